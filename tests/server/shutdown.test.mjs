// SIGTERM while a stream is running: the stream ends with an error event (not a cut
// connection), a waiting non-streamed request gets 503, and the process exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, startServer } from './harness.mjs';

test('graceful shutdown on SIGTERM', async () => {
  const srv = await startServer(['--max-batch', '1'], { context: 8192 });
  const client = srv.client();
  // Seconds of tokens, past EOS, so the stream is surely running at the signal.
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'long' }], max_tokens: 8000, ignore_eos: true,
    stream: true,
  });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  await it.next();
  // Waits for the only slot, so it is still queued at the signal.
  const waiting = client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'w' }], max_tokens: 2 })
    .then((r) => r, (e) => e);
  await new Promise((r) => setTimeout(r, 200));
  const code = srv.stop();
  let ended = null;
  try {
    while (!(await it.next()).done) { /* tokens until the server stops it */ }
  } catch (e) {
    ended = e;
  }
  assert.ok(ended instanceof OpenAI.APIError, `the stream ends with an error event: ${ended}`);
  assert.match(ended.message, /shutting down/);
  const w = await waiting;
  assert.equal(w.status, 503, String(w));
  assert.equal(await code, 0);
});
