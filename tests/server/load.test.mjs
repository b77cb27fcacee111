// Load on loopback with the CPU backend and the small random model: 64 concurrent streaming
// clients (a quarter hang up mid-stream), batching invariance through the server, and 429
// from a full queue. /metrics must agree with what was sent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, collectChat, metrics, startServer } from './harness.mjs';

const user = (content) => [{ role: 'user', content }];

async function settled(url) {
  // Cancellations land at the engine's next step; wait for the batch to drain.
  for (let i = 0; i < 200; i++) {
    const m = await metrics(url);
    if (m.dsv4_running_requests === 0 && m.dsv4_queue_depth === 0) return m;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the engine did not drain');
}

test('64 concurrent streams, 16 disconnecting: every request ends, metrics agree', async () => {
  const srv = await startServer(['--max-batch', '16', '--max-queue', '256', '--http-threads', '160'],
                                { context: 2048 });
  try {
    const client = srv.client();
    const prompt = user('Count to ten.');
    const finished = [];
    const disconnected = [];
    const jobs = Array.from({ length: 64 }, async (_, i) => {
      const hangUp = i % 4 === 3;
      // Hang-ups ask for many tokens, past EOS, so they are surely still running when they
      // leave (a sampled EOS once ended one first: "stop" instead of "cancelled"; and a loaded
      // CI machine may serve its HTTP slower than the engine steps).
      const stream = await client.chat.completions.create({
        model: MODEL, messages: prompt, stream: true, stream_options: { include_usage: true },
        max_tokens: hangUp ? 1900 : 16, temperature: 0.8, seed: i, ignore_eos: hangUp,
      });
      if (hangUp) {
        let n = 0;
        for await (const chunk of stream) {
          if (chunk.choices[0]?.delta?.content !== undefined && ++n === 3) break;  // aborts the request
        }
        disconnected.push(i);
        return;
      }
      const r = await collectChat(stream);
      assert.equal(r.finishes, 1, `request ${i} got one finish_reason`);
      assert.ok(['stop', 'length'].includes(r.finish), `request ${i}: ${r.finish}`);
      assert.ok(r.usage, `request ${i} got usage`);
      finished.push(r.usage);
    });
    const results = await Promise.allSettled(jobs);
    const failures = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason));
    assert.deepEqual(failures, [], 'no request failed');
    assert.equal(finished.length, 48);
    assert.equal(disconnected.length, 16);

    const m = await settled(srv.url);
    assert.equal(m['dsv4_requests_total{endpoint="chat",status="200"}'], 64);
    assert.equal(m['dsv4_requests_finished_total{reason="cancelled"}'], 16);
    assert.equal((m['dsv4_requests_finished_total{reason="length"}'] ?? 0) +
                 (m['dsv4_requests_finished_total{reason="stop"}'] ?? 0), 48);
    const promptTokens = finished[0].prompt_tokens;
    assert.equal(m.dsv4_prompt_tokens_total, 64 * promptTokens);
    const completed = finished.reduce((s, u) => s + u.completion_tokens, 0);
    // Hang-ups got at least 3 tokens each before they left.
    assert.ok(m.dsv4_generated_tokens_total >= completed + 16 * 3,
              `${m.dsv4_generated_tokens_total} >= ${completed} + 48`);
    assert.equal(m.dsv4_time_to_first_token_seconds_count, 64);
    assert.equal(m.dsv4_cache_slots_used, 0, 'every slot is back');
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('batching invariance: a greedy request alone and among 16 others gives the same output', async () => {
  const srv = await startServer(['--max-batch', '17', '--http-threads', '64']);
  try {
    const client = srv.client();
    const probe = { model: MODEL, prompt: 'In a hole in the ground there lived', max_tokens: 24, temperature: 0 };
    const alone = (await client.completions.create(probe)).choices[0];
    const others = Array.from({ length: 16 }, (_, i) => client.completions.create({
      model: MODEL, prompt: `Other prompt number ${i} ${'x'.repeat(i * 7)}`, max_tokens: 8 + i,
      temperature: i % 2 ? 0.9 : 0, seed: i,
    }));
    const [crowded] = await Promise.all([client.completions.create(probe), ...others]);
    assert.equal(crowded.choices[0].text, alone.text);
    assert.equal(crowded.choices[0].finish_reason, alone.finish_reason);
    const chat = { model: MODEL, messages: user('Same answer please'), max_tokens: 20, temperature: 0 };
    const chatAlone = (await client.chat.completions.create(chat)).choices[0].message.content;
    const chatOthers = Array.from({ length: 16 }, (_, i) => client.chat.completions.create({
      model: MODEL, messages: user(`noise ${i}`), max_tokens: 12, temperature: 0.7, seed: i }));
    const [chatCrowded] = await Promise.all([client.chat.completions.create(chat), ...chatOthers]);
    assert.equal(chatCrowded.choices[0].message.content, chatAlone);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('429 with Retry-After when the queue is full', async () => {
  const srv = await startServer(['--max-batch', '1', '--max-queue', '1'], { context: 8192 });
  try {
    const client = srv.client();
    // One request holds the only slot (seconds of tokens, past EOS: 400 tokens once ended
    // before the two below reached a loaded CI machine's engine)...
    const holder = await client.chat.completions.create({ model: MODEL, messages: user('hold'), max_tokens: 8000, ignore_eos: true, stream: true });
    const it = holder[Symbol.asyncIterator]();
    await it.next();
    await it.next();
    // ...one may wait for it, the other is refused (whichever the engine sees second).
    const a = client.chat.completions.create({ model: MODEL, messages: user('a'), max_tokens: 2 }).then((r) => r, (e) => e);
    const b = client.chat.completions.create({ model: MODEL, messages: user('b'), max_tokens: 2 }).then((r) => r, (e) => e);
    const refused = await Promise.race([a, b]);
    assert.equal(refused.status, 429, String(refused));
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.equal(refused.error?.type, 'rate_limit_error');
    holder.controller.abort();  // frees the slot for the waiting one
    const results = await Promise.all([a, b]);
    assert.equal(results.filter((r) => r.status === 429).length, 1);
    assert.equal(results.filter((r) => r.object === 'chat.completion').length, 1);
    const m = await settled(srv.url);
    assert.equal(m['dsv4_requests_total{endpoint="chat",status="429"}'], 1);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('n choices that cannot all wait: 429 for the request, its accepted choices cancelled', async () => {
  const srv = await startServer(['--max-batch', '1', '--max-queue', '2']);
  try {
    const client = srv.client();
    // One running and two waiting at most: four choices never fit.
    const refused = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 50, n: 4 }).then((r) => r, (e) => e);
    assert.equal(refused.status, 429, String(refused));
    let m = await settled(srv.url);
    assert.equal(m['dsv4_requests_total{endpoint="completions",status="429"}'], 1);
    assert.equal(m['dsv4_requests_total{endpoint="completions",status="200"}'] ?? 0, 0);
    // Two choices fit (one runs, one waits for it).
    const two = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 3, n: 2, temperature: 0.8 });
    assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
    assert.ok(two.usage.completion_tokens >= 2 && two.usage.completion_tokens <= 6, JSON.stringify(two.usage));
    m = await settled(srv.url);
    assert.equal(m['dsv4_requests_total{endpoint="completions",status="200"}'], 1);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});
