// The prefix cache (--prefix-cache): a request whose prompt begins with a kept sequence, or
// with the part of one up to a snapshot, feeds only the rest and answers as a server without the
// cache does (the CPU's logits do not depend on how the prompt is cut into steps); kept
// sequences give their slots to waiting requests.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, metrics, startServer } from './harness.mjs';

let cached;
let plain;

before(async () => {
  [cached, plain] = await Promise.all([
    startServer(['--max-batch', '2', '--prefix-cache', '2']),
    startServer(['--max-batch', '2']),
  ]);
});
after(async () => {
  assert.equal(await cached.stop(), 0, 'graceful exit');
  assert.equal(await plain.stop(), 0, 'graceful exit');
});

const ids = (from, n) => Array.from({ length: n }, (_, i) => from + i);
// The usage of both servers agree but for the cached one's prompt_tokens_details (the prompt
// tokens found in the cache, on every answer of a server with the cache; none without).
function sameUsage(a, b) {
  const { prompt_tokens_details: details, ...rest } = a;
  assert.deepEqual(rest, b);
  assert.equal(typeof details.cached_tokens, 'number');
}
// What both servers answer (text and log-probabilities) for one completions request.
async function both(body) {
  const req = { model: MODEL, logprobs: 3, ...body };
  const [a, b] = await Promise.all([cached.client().completions.create(req),
                                    plain.client().completions.create(req)]);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.deepEqual(a.choices[0].logprobs, b.choices[0].logprobs);
  sameUsage(a.usage, b.usage);
  return a;
}
// The cached server's metrics once the engine thread has published the gauges of its last step
// (a response can reach the client just before they are).
async function settled() {
  for (let i = 0; ; i++) {
    const m = await metrics(cached.url);
    if ((m.dsv4_running_requests === 0 && m.dsv4_queue_depth === 0) || i === 100) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
}
const fedAndHit = async () => {
  const m = await settled();
  return [m.dsv4_prompt_tokens_computed_total, m.dsv4_prefix_cache_hit_tokens_total];
};

test('a continuation of a kept sequence feeds only its new tokens and answers as without the cache', async () => {
  const first = [0, ...ids(60, 40)];
  // One token: the kept sequence is the prompt (the sampled token is not fed).
  await both({ prompt: first, max_tokens: 1, temperature: 0 });
  const [fed0, hit0] = await fedAndHit();
  const next = [...first, ...ids(200, 25)];
  const r = await both({ prompt: next, max_tokens: 8, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, next.length);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, first.length);
  const [fed1, hit1] = await fedAndHit();
  assert.equal(hit1 - hit0, first.length);
  assert.equal(fed1 - fed0, next.length - first.length);
  // Sampled, with penalties (the kept tokens count as prompt for the repetition penalty).
  const sampled = [0, ...ids(300, 30)];
  const rules = { temperature: 0.9, seed: 11, frequency_penalty: 0.5, repetition_penalty: 1.3 };
  await both({ prompt: sampled, max_tokens: 1, ...rules });
  const [, hit2] = await fedAndHit();
  // Streamed: the usage chunk says what was found in the cache too.
  let text = '';
  let usage = null;
  for await (const c of await cached.client().completions.create({
    model: MODEL, prompt: [...sampled, ...ids(100, 9)], max_tokens: 12, ...rules, stream: true,
    stream_options: { include_usage: true } })) {
    text += c.choices[0]?.text ?? '';
    if (c.usage) usage = c.usage;
  }
  const [, hit3] = await fedAndHit();
  assert.equal(hit3 - hit2, sampled.length);
  assert.equal(usage.prompt_tokens_details.cached_tokens, sampled.length);
  const alone = await plain.client().completions.create({
    model: MODEL, prompt: [...sampled, ...ids(100, 9)], max_tokens: 12, ...rules });
  assert.equal(text, alone.choices[0].text);
});

// (The random model's answers do not tokenize back to the tokens it generated, so whether the
// second turn hits depends on them; what must hold either way is the answer.)
test("a conversation's second turn answers as without the cache", async () => {
  const first = [{ role: 'user', content: 'Hi' }];
  const body = { model: MODEL, max_tokens: 6, temperature: 0 };
  const [a, b] = await Promise.all([cached.client().chat.completions.create({ ...body, messages: first }),
                                    plain.client().chat.completions.create({ ...body, messages: first })]);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const next = [...first, { role: 'assistant', content: a.choices[0].message.content },
                { role: 'user', content: 'more' }];
  const [c, d] = await Promise.all([cached.client().chat.completions.create({ ...body, messages: next }),
                                    plain.client().chat.completions.create({ ...body, messages: next })]);
  assert.equal(c.choices[0].message.content, d.choices[0].message.content);
  sameUsage(c.usage, d.usage);
});

// The shipped trained model (models/kjv-tiny: its own tokenizer, V4's chat encoding): greedy
// answers tokenize back to the tokens generated, so each turn continues the last one's sequence.
test('a conversation with the shipped model: each turn feeds only what is new', async () => {
  const kjv = await startServer(['--max-batch', '2', '--prefix-cache', '2'],
                                { model: process.env.DSV4_KJV_MODEL, context: 1024 });
  try {
    const messages = [{ role: 'user', content: 'Who made the heaven and the earth?' }];
    let last = null;
    for (const next of ['And then?', 'And after that?']) {
      const r = await kjv.client().chat.completions.create({ model: MODEL, messages, max_tokens: 30, temperature: 0 });
      if (last === null) {
        assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
      } else {
        // The last turn's prompt and answer but its last token (sampled, not fed).
        assert.equal(r.usage.prompt_tokens_details.cached_tokens,
                     last.usage.prompt_tokens + last.usage.completion_tokens - 1);
      }
      last = r;
      messages.push({ role: 'assistant', content: r.choices[0].message.content }, { role: 'user', content: next });
    }
    const r = await kjv.client().chat.completions.create({ model: MODEL, messages, max_tokens: 30, temperature: 0 });
    assert.equal(r.usage.prompt_tokens_details.cached_tokens,
                 last.usage.prompt_tokens + last.usage.completion_tokens - 1);
  } finally {
    assert.equal(await kjv.stop(), 0, 'graceful exit');
  }
});

// Two conversations with one system prompt: the second starts from the first one's snapshot
// within the shared part (kjv-tiny's block: 16 tokens, its compress rates 4 and 16).
test('conversations with one system prompt share its snapshots', async () => {
  const [kjv, kjvPlain] = await Promise.all([
    startServer(['--max-batch', '2', '--prefix-cache', '2'], { model: process.env.DSV4_KJV_MODEL, context: 1024 }),
    startServer(['--max-batch', '2'], { model: process.env.DSV4_KJV_MODEL, context: 1024 })]);
  try {
    const system = { role: 'system', content: 'Answer as the scripture does, in the words of the King James Bible, and say no more than is written.' };
    const ask = async (server, content) => server.client().chat.completions.create(
      { model: MODEL, messages: [system, { role: 'user', content }], max_tokens: 12, temperature: 0 });
    const one = await ask(kjv, 'Who made the heaven and the earth?');
    assert.equal(one.usage.prompt_tokens_details.cached_tokens, 0);
    const two = await ask(kjv, 'What was in the beginning?');
    const cached = two.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= 16 && cached % 16 === 0 && cached < one.usage.prompt_tokens, `cached ${cached}`);
    const alone = await ask(kjvPlain, 'What was in the beginning?');
    assert.equal(two.choices[0].message.content, alone.choices[0].message.content);
  } finally {
    assert.equal(await kjv.stop(), 0, 'graceful exit');
    assert.equal(await kjvPlain.stop(), 0, 'graceful exit');
  }
});

// Thinking mode: each turn's encoding drops the last reply's reasoning, so a turn does not
// continue the last one's sequence whole; it starts from that sequence's snapshot within the
// shared part (the last prompt up to its last block boundary).
test("a conversation in thinking mode continues from the last turn's snapshot", async () => {
  const kjv = await startServer(['--max-batch', '2', '--prefix-cache', '2'],
                                { model: process.env.DSV4_KJV_MODEL, context: 1024 });
  try {
    const messages = [{ role: 'user', content: 'Who made the heaven and the earth, and all that is in them?' }];
    const body = { model: MODEL, max_tokens: 20, temperature: 0, reasoning_effort: 'high' };
    let last = null;
    for (const next of ['And then?', 'And after that?']) {
      const r = await kjv.client().chat.completions.create({ ...body, messages });
      if (last !== null) {
        const cached = r.usage.prompt_tokens_details.cached_tokens;
        // (at most the last prompt, cut at a block boundary; at least one block)
        assert.ok(cached >= 16 && cached % 16 === 0 && cached <= last.usage.prompt_tokens,
                  `cached ${cached} of ${r.usage.prompt_tokens}; the last prompt ${last.usage.prompt_tokens}`);
      }
      last = r;
      messages.push({ role: 'assistant', content: r.choices[0].message.content ?? '',
                      reasoning_content: r.choices[0].message.reasoning_content },
                    { role: 'user', content: next });
    }
  } finally {
    assert.equal(await kjv.stop(), 0, 'graceful exit');
  }
});

// Ids of the small model's vocabulary (512), varied: the prompts are longer than it.
const mixed = (seed, n) => Array.from({ length: n }, (_, i) => 1 + ((seed * 7919 + i * 104729) % 509));

test('a prompt sharing only the start of a kept sequence continues from its last snapshot in the shared part', async () => {
  // The small model's block is 128 tokens (its compress rates 4 and 128): a 300-token prompt
  // leaves snapshots at 128 and 256.
  const first = [0, ...mixed(1, 299)];
  await both({ prompt: first, max_tokens: 1, temperature: 0 });
  const m = await settled();
  assert.ok(m.dsv4_prefix_cache_snapshots >= 2, `snapshots: ${m.dsv4_prefix_cache_snapshots}`);
  // (each hit makes a sequence of its own, taking the least recently used idle one's slot: the
  // miss last, since it would take `first`'s)
  for (const [shared, found] of [[200, 128], [280, 256], [150, 128], [100, 0]]) {
    const sampled = shared === 150;  // with penalties: still the plain server's answer
    const [fed0, hit0] = await fedAndHit();
    const prompt = [...first.slice(0, shared), ...mixed(shared, 40)];
    const settings = sampled ? { temperature: 0.9, seed: 3, presence_penalty: 0.7 } : { temperature: 0 };
    const r = await both({ prompt, max_tokens: 6, ...settings });
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, found, `sharing ${shared}`);
    const [fed1, hit1] = await fedAndHit();
    assert.equal(hit1 - hit0, found);
    assert.equal(fed1 - fed0, prompt.length - found);
  }
});

// One kept sequence: a prompt sharing its start takes it back to the snapshot (no other
// sequence can be had), and a later one sharing the first prompt's start finds it there still.
test('with one kept sequence a prompt sharing its start sends it back to a snapshot', async () => {
  const one = await startServer(['--max-batch', '1', '--prefix-cache', '1']);
  try {
    const first = [0, ...mixed(7, 299)];
    const ask = async (prompt) => {
      const body = { model: MODEL, prompt, max_tokens: 4, temperature: 0, logprobs: 1 };
      const [a, b] = await Promise.all([one.client().completions.create(body), plain.client().completions.create(body)]);
      assert.equal(a.choices[0].text, b.choices[0].text);
      assert.deepEqual(a.choices[0].logprobs, b.choices[0].logprobs);
      return a.usage.prompt_tokens_details.cached_tokens;
    };
    assert.equal(await ask(first), 0);
    assert.equal(await ask([...first.slice(0, 270), ...mixed(8, 20)]), 256);
    assert.equal(await ask([...first.slice(0, 140), ...mixed(9, 20)]), 128);
  } finally {
    assert.equal(await one.stop(), 0, 'graceful exit');
  }
});

// Many requests at once whose prompts share starts of a few others, on four slots with six
// snapshot buffers: kept sequences are copied (also while their requests run), evicted and
// stripped of their snapshots as others need room, and every answer is still the plain
// server's. (Which requests hit depends on how the requests reach the engine thread: only the
// answers are checked then.)
test('requests at once sharing starts answer as without the cache', async () => {
  const busy = await startServer(['--max-batch', '4', '--prefix-cache', '4', '--prefix-snapshots', '6']);
  try {
    const ask = (b) => Promise.all([busy.client().completions.create(b), plain.client().completions.create(b)]);
    const same = ([a, b], what) => {
      assert.equal(a.choices[0].text, b.choices[0].text, what);
      assert.deepEqual(a.choices[0].logprobs, b.choices[0].logprobs, what);
      return a;
    };
    const body = (prompt) => ({ model: MODEL, prompt, max_tokens: 5, temperature: 0, logprobs: 2 });
    // One after another: each keeps snapshots at 128 and 256; the fourth needs the first's.
    const bases = [0, 1, 2, 3].map((b) => [0, ...mixed(50 + b, 299)]);
    for (const base of bases) same(await ask(body(base)), 'a base');
    const m = await metrics(busy.url);
    assert.equal(m.dsv4_prefix_cache_snapshots, 6);
    const last = same(await ask(body([...bases[3].slice(0, 270), ...mixed(999, 9)])), 'from the last');
    assert.equal(last.usage.prompt_tokens_details.cached_tokens, 256);
    const lengths = [130, 200, 260, 300, 140, 290];
    for (const wave of [0, 1]) {
      const bodies = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => body(
        [...bases[(i + wave) % 4].slice(0, lengths[(i * 5 + wave) % lengths.length]), ...mixed(1000 + 10 * wave + i, 12)]));
      const answers = await Promise.all(bodies.map(ask));
      answers.forEach((a, i) => same(a, `wave ${wave} request ${i}`));
    }
  } finally {
    assert.equal(await busy.stop(), 0, 'graceful exit');
  }
});

test('a prompt that is not a continuation misses and is answered as without the cache', async () => {
  const [, hit0] = await fedAndHit();
  const miss = await both({ prompt: [0, ...ids(400, 12)], max_tokens: 4, temperature: 0 });
  assert.equal(miss.usage.prompt_tokens_details.cached_tokens, 0);
  await both({ prompt: [0, ...ids(401, 20)], max_tokens: 4, temperature: 0 });
  const [, hit1] = await fedAndHit();
  assert.equal(hit1, hit0);
});

test('kept sequences give their slots to requests that wait for one', async () => {
  let m = await settled();
  assert.equal(m.dsv4_prefix_cache_sequences, 2);  // both slots kept, idle
  assert.equal(m.dsv4_cache_slots_used, 0);
  // Five at once on two slots: three wait, and take the kept sequences' slots.
  const bodies = [0, 1, 2, 3, 4].map((i) => ({ prompt: [0, ...ids(20 + 7 * i, 15)], max_tokens: 6, temperature: 0 }));
  await Promise.all(bodies.map(both));
  m = await settled();
  assert.equal(m.dsv4_cache_slots_used, 0);
  assert.equal(m.dsv4_running_requests, 0);
  assert.ok(m.dsv4_prefix_cache_sequences <= 2);
});

test('out-of-range prefix cache flags are one-line errors at start', async () => {
  await assert.rejects(startServer(['--max-batch', '2', '--prefix-cache', '3']),
                       /--prefix-cache 3: 0 to --max-batch \(2\)/);
  await assert.rejects(startServer(['--prefix-cache', '1', '--prefix-block', '100']),
                       /--prefix-block 100: must be a multiple of 128/);
  await assert.rejects(startServer(['--prefix-snapshots', '4']),
                       /--prefix-snapshots and --prefix-block need --prefix-cache N/);
  await assert.rejects(startServer(['--prefix-cache', '1', '--prefix-snapshots', '-2']),
                       /--prefix-snapshots -2: -1 \(8 per kept sequence\) or a count >= 0/);
});
