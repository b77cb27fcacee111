// Speculative decoding in the server (dsv4 serve --speculative ngram): greedy answers equal a
// plain server's token for token, also on a kept sequence of the prefix cache, and /metrics
// counts the drafts by their place in the step.
// (The test model has no MTP block: --speculative mtp is refused at start, tests/model's CLI
// cases.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, MODEL } from './harness.mjs';

let plain, spec, cached;
before(async () => {
  [plain, spec, cached] = await Promise.all([
    startServer([]),
    startServer(['--speculative', 'ngram', '--draft-tokens', '3']),
    startServer(['--speculative', 'ngram', '--draft-tokens', '3', '--prefix-cache', '2']),
  ]);
});
after(async () => {
  assert.equal(await plain.stop(), 0);
  assert.equal(await spec.stop(), 0);
  assert.equal(await cached.stop(), 0);
});

test('with the prefix cache: a continuation drafts on its kept sequence; the same tokens', async () => {
  // Token ids that repeat (drafts to find). One token out: the kept sequence is the prompt
  // (the sampled token is not fed), which the next prompt continues.
  const cycle = (n) => Array.from({ length: n }, (_, i) => 10 + (i % 3));
  const first = [0, ...cycle(40)];
  const body = { model: MODEL, temperature: 0 };
  await cached.client().completions.create({ ...body, prompt: first, max_tokens: 1 });
  const next = [...first, ...cycle(7)];
  const [a, b] = await Promise.all([plain.client().completions.create({ ...body, prompt: next, max_tokens: 16 }),
                                    cached.client().completions.create({ ...body, prompt: next, max_tokens: 16 })]);
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, first.length);
  const m = await metrics(cached.url);
  assert.ok(m['dsv4_speculative_drafts_total{position="0"}'] > 0, 'drafts fed');
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
