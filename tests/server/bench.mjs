// Requests/s and time to first token of dsv4 serve at 1, 16 and 64 concurrent streaming
// clients (docs/perf.md). Starts its own server (harness.mjs; same env variables as the
// tests) Each client sends REQUESTS_PER_CLIENT chat requests
// back to back: a short prompt, MAX_TOKENS greedy tokens, EOS ignored by the length limit.
//   DSV4_BIN=build/src/cli/dsv4 DSV4_SMALL_MODEL=tests/data/golden/small-rates \
//   DSV4_TEST_TOKENIZER=tests/data/server/tokenizer.json node tests/server/bench.mjs
import { MODEL, startServer } from './harness.mjs';

const MAX_TOKENS = Number(process.env.MAX_TOKENS ?? 32);
const PER_CLIENT = Number(process.env.REQUESTS_PER_CLIENT ?? 4);
const LEVELS = (process.env.CONCURRENCY ?? '1,16,64').split(',').map(Number);

const srv = await startServer(['--max-batch', '64', '--max-queue', '1024', '--http-threads', '160'],
                              { threads: Number(process.env.THREADS ?? 2) });
const client = srv.client();
const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];

async function one(i) {
  const t0 = performance.now();
  let first = null;
  let tokens = 0;
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: `Request ${i}: write a short poem.` }],
    max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  for await (const c of stream) {
    if (first === null && c.choices[0]?.delta?.content) first = performance.now() - t0;
    if (c.usage) tokens = c.usage.completion_tokens;
  }
  return { ttft: first ?? performance.now() - t0, tokens };
}

console.log('| clients | requests | tokens/request | requests/s | tokens/s | TTFT p50 (ms) | TTFT p90 (ms) |');
console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const n of LEVELS) {
  const t0 = performance.now();
  const results = (await Promise.all(Array.from({ length: n }, async (_, c) => {
    const out = [];
    for (let k = 0; k < PER_CLIENT; k++) out.push(await one(c * PER_CLIENT + k));
    return out;
  }))).flat();
  const secs = (performance.now() - t0) / 1000;
  const ttft = results.map((r) => r.ttft);
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  console.log(`| ${n} | ${results.length} | ${(tokens / results.length).toFixed(1)} | ${(results.length / secs).toFixed(2)} | ${(tokens / secs).toFixed(0)} | ` +
              `${pct(ttft, 0.5).toFixed(0)} | ${pct(ttft, 0.9).toFixed(0)} |`);
}
process.exitCode = await srv.stop();
