// The server over ranks (dsv4 serve --ranks 2: the routed experts split over two in-process
// ranks, every request and step run on both): the same answers as a plain server, greedy and
// sampled, one request at a time and several batched together.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL } from './harness.mjs';

let plain, ranked;
before(async () => {
  [plain, ranked] = await Promise.all([startServer([]), startServer(['--ranks', '2'])]);
});
after(async () => {
  assert.equal(await plain.stop(), 0);
  assert.equal(await ranked.stop(), 0);
});

const body = (prompt, extra) => ({ model: MODEL, prompt, max_tokens: 24, ...extra });

test('one request at a time: the same text, greedy and sampled', async () => {
  for (const extra of [{ temperature: 0 }, { temperature: 0.8, seed: 3 }]) {
    const a = await plain.client().completions.create(body('In the beginning', extra));
    const b = await ranked.client().completions.create(body('In the beginning', extra));
    assert.equal(b.choices[0].text, a.choices[0].text, JSON.stringify(extra));
    assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
    assert.ok(a.usage.completion_tokens > 0);
  }
});

test('batched requests: each the same text as on one rank', async () => {
  const prompts = ['abc', 'The quick brown fox', 'x', 'Once upon a time, there'];
  const run = (server) =>
    Promise.all(prompts.map((p, i) =>
      server.client().completions.create(body(p, { temperature: 0.7, seed: i, max_tokens: 8 + 5 * i }))));
  const a = await run(plain);
  const b = await run(ranked);
  for (let i = 0; i < prompts.length; ++i)
    assert.equal(b[i].choices[0].text, a[i].choices[0].text, prompts[i]);
});
