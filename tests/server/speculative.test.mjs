// Speculative decoding in the server (dsv4 serve --speculative ngram): greedy answers equal a
// plain server's token for token, and /metrics counts the drafts by their place in the step.
// (The test model has no MTP block: --speculative mtp is refused at start, tests/model's CLI
// cases.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, MODEL } from './harness.mjs';

let plain, spec;
before(async () => {
  [plain, spec] = await Promise.all([
    startServer([]),
    startServer(['--speculative', 'ngram', '--draft-tokens', '3']),
  ]);
});
after(async () => {
  assert.equal(await plain.stop(), 0);
  assert.equal(await spec.stop(), 0);
});

test('greedy completions: the same tokens with n-gram drafts; drafts counted', async () => {
  // A prompt that repeats, so the n-gram source has something to propose.
  const prompt = 'abcabcabcabcabcabc abcabcabc abcabc';
  for (const max_tokens of [1, 7, 40]) {
    const body = { model: MODEL, prompt, max_tokens, temperature: 0 };
    const [a, b] = await Promise.all([
      plain.client().completions.create(body),
      spec.client().completions.create(body),
    ]);
    assert.equal(b.choices[0].text, a.choices[0].text, `max_tokens ${max_tokens}`);
    assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
  }
  const m = await metrics(spec.url);
  const drafted = [0, 1, 2, 3].map((j) => m[`dsv4_speculative_drafts_total{position="${j}"}`]);
  const accepted = [0, 1, 2, 3].map((j) => m[`dsv4_speculative_accepted_total{position="${j}"}`]);
  assert.ok(drafted[0] > 0, `drafts fed: ${drafted}`);
  assert.equal(drafted[3], 0, 'at most 3 drafts a step');
  for (let j = 0; j < 4; ++j) assert.ok(accepted[j] <= drafted[j]);
  const none = await metrics(plain.url);
  assert.equal(none['dsv4_speculative_drafts_total{position="0"}'], 0);
});

test('logits rules on a drafting server: penalties run without drafts, biases with them; the same text', async () => {
  const prompt = 'abcabcabcabcabcabc abcabcabc abcabc';
  for (const extra of [{ presence_penalty: 1.5, repetition_penalty: 1.3 }, { logit_bias: { 98: 3 }, min_tokens: 10 }]) {
    const body = { model: MODEL, prompt, max_tokens: 24, temperature: 0, ...extra };
    const [a, b] = await Promise.all([
      plain.client().completions.create(body),
      spec.client().completions.create(body),
    ]);
    assert.equal(b.choices[0].text, a.choices[0].text, JSON.stringify(extra));
    assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
  }
});
