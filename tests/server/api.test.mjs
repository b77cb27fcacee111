// The OpenAI API of dsv4 serve through the official openai client: chat (whole and streamed),
// tools and tool results in the encoding, thinking mode, completions, models, and every error
// status. The model is random, so the checks are about the protocol, not the text.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';
import { MODEL, collectChat, metrics, post, startServer } from './harness.mjs';

const KEY = 'test-key';
let srv;
let client;

before(async () => {
  srv = await startServer(['--max-batch', '4', '--max-body-bytes', '65536'], { apiKey: KEY, context: 2048 });
  client = srv.client();
});
after(async () => {
  assert.equal(await srv.stop(), 0, 'graceful exit');
});

const user = (content) => [{ role: 'user', content }];
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

function assertErrorShape(body, status, param) {
  assert.ok(body && body.error, `an error object (${JSON.stringify(body)})`);
  for (const k of ['message', 'type', 'param', 'code']) assert.ok(k in body.error, `error.${k}`);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  if (param !== undefined) assert.equal(body.error.param, param);
}

async function rejects(promise, status, param) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.APIError, `an APIError, got ${e}`);
    assert.equal(e.status, status, e.message);
    if (param !== undefined) assert.equal(e.param, param);
    return true;
  });
}

test('models: the served model is listed and retrievable; others are 404', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
  assert.equal((await client.models.retrieve(MODEL)).id, MODEL);
  await rejects(client.models.retrieve('gpt-4'), 404);
});

test('chat: one assistant message, usage adds up, finish reason', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'system', content: 'Be brief.' }, ...user('Hello!')],
    max_tokens: 8, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.equal(typeof m.content, 'string');
  assert.equal(m.reasoning_content, undefined, 'no reasoning outside thinking mode');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat stream: chunks reassemble to the whole answer (greedy), usage last', async () => {
  const body = { model: MODEL, messages: user('Tell me a story.'), max_tokens: 12, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const s = await collectChat(await client.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(s.content, whole.choices[0].message.content ?? '');
  assert.equal(s.finish, whole.choices[0].finish_reason);
  assert.equal(s.finishes, 1, 'one finish_reason');
  assert.deepEqual(s.usage, whole.usage);
  assert.ok(s.chunks >= 3, 'role, content, finish and usage chunks');
  // vLLM's continuous_usage_stats: every chunk with the counts so far, the last ones final.
  let last = null;
  let chunks = 0;
  for await (const c of await client.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true },
  })) {
    ++chunks;
    assert.ok(c.usage, `chunk ${chunks} has usage`);
    assert.equal(c.usage.prompt_tokens, whole.usage.prompt_tokens);
    if (last) assert.ok(c.usage.completion_tokens >= last.completion_tokens, 'counts only grow');
    last = c.usage;
  }
  assert.deepEqual(last, whole.usage);
});

test('sampling parameters: a seed repeats, top_k / top_p / temperature accepted', async () => {
  const body = { model: MODEL, messages: user('Pick words.'), max_tokens: 10, temperature: 1.3,
                 top_p: 0.9, top_k: 40, seed: 1234 };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('stop strings end the output before the match', async () => {
  const body = { model: MODEL, prompt: 'The quick brown fox', max_tokens: 24, temperature: 0 };
  const full = (await client.completions.create(body)).choices[0].text;
  const chars = [...full];
  assert.ok(chars.length >= 6, `enough text to cut (${JSON.stringify(full)})`);
  const stop = chars.slice(3, 5).join('');
  const cut = await client.completions.create({ ...body, stop: [stop] });
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
  let streamed = '';
  for await (const c of await client.completions.create({ ...body, stop, stream: true }))
    streamed += c.choices[0]?.text ?? '';
  assert.equal(streamed, cut.choices[0].text);
  const kept = await client.completions.create({ ...body, stop: [stop], include_stop_str_in_output: true });
  assert.equal(kept.choices[0].text, full.slice(0, full.indexOf(stop) + stop.length));
  assert.equal(kept.choices[0].finish_reason, 'stop');
});

test('tools: schemas, assistant tool_calls and tool results reach the prompt', async () => {
  const plain = await client.chat.completions.create({ model: MODEL, messages: user('Weather in Paris?'), max_tokens: 4 });
  const withTools = await client.chat.completions.create({
    model: MODEL, messages: user('Weather in Paris?'), tools, tool_choice: 'auto', max_tokens: 4,
  });
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 100, 'tool schemas in the prompt');
  const toolNone = await client.chat.completions.create({
    model: MODEL, messages: user('Weather in Paris?'), tools, tool_choice: 'none', max_tokens: 4,
  });
  assert.equal(toolNone.usage.prompt_tokens, plain.usage.prompt_tokens, 'tool_choice none drops the tools');
  // The round trip: the assistant's call and the tool's result in the history.
  const history = [
    ...user('Weather in Paris?'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 21}' },
  ];
  const r = await client.chat.completions.create({ model: MODEL, messages: history, tools, max_tokens: 6 });
  assert.ok(r.usage.prompt_tokens > withTools.usage.prompt_tokens + 20, 'call and result encoded');
  const s = await collectChat(await client.chat.completions.create({ model: MODEL, messages: history, tools, max_tokens: 6, stream: true }));
  assert.ok(['stop', 'length', 'tool_calls'].includes(s.finish));
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), tools, tool_choice: 'required' }), 400, 'tool_choice');
  await rejects(client.chat.completions.create({
    model: MODEL, messages: [...user('x'), { role: 'tool', content: 'no id' }],
  }), 400, 'messages[1].tool_call_id');
});

test('thinking mode: reasoning_content, whole and streamed', async () => {
  const body = { model: MODEL, messages: user('Think about it.'), max_tokens: 10, temperature: 0,
                 chat_template_kwargs: { thinking: true } };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.equal(typeof m.reasoning_content, 'string');
  // The random model never writes </think> in these 10 greedy tokens: all of it is reasoning.
  assert.ok(m.reasoning_content.length > 0, JSON.stringify(m));
  const s = await collectChat(await client.chat.completions.create({ ...body, stream: true }));
  assert.equal(s.reasoning, m.reasoning_content);
  assert.equal(s.content, m.content ?? '');
  // reasoning_effort alone turns thinking on; "none" keeps it off.
  const effort = await client.chat.completions.create({ ...body, chat_template_kwargs: undefined, reasoning_effort: 'max' });
  assert.equal(typeof effort.choices[0].message.reasoning_content, 'string');
  assert.ok(effort.usage.prompt_tokens > r.usage.prompt_tokens, 'the max-effort paragraph is in the prompt');
  const none = await client.chat.completions.create({ ...body, chat_template_kwargs: undefined, reasoning_effort: 'none' });
  assert.equal(none.choices[0].message.reasoning_content, undefined);
});

test('completions: text, token-id prompts, streaming', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens, 6);
  const ids = await client.completions.create({ model: MODEL, prompt: [0, 70, 80, 90], max_tokens: 3 });
  assert.equal(ids.usage.prompt_tokens, 4);
  let text = '';
  let usage = null;
  for await (const c of await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
    text += c.choices[0]?.text ?? '';
    if (c.usage) usage = c.usage;
  }
  assert.equal(text, r.choices[0].text);
  assert.deepEqual(usage, r.usage);
});

test('n choices: choice i is the request alone with seed + i; streamed by index; usage adds up', async () => {
  const base = { model: MODEL, prompt: 'Once upon a time', max_tokens: 10, temperature: 0.9, seed: 41 };
  const computed = async () => (await metrics(srv.url)).dsv4_prompt_tokens_computed_total;
  const before = await computed();
  const many = await client.completions.create({ ...base, n: 3 });
  // The choices share their prompt: all but its last token fed once, the last by each choice.
  assert.equal(await computed() - before, many.usage.prompt_tokens - 1 + 3);
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2]);
  let completion = 0;
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...base, seed: 41 + i });
    assert.equal(many.choices[i].text, one.choices[0].text, `choice ${i}`);
    assert.equal(many.choices[i].finish_reason, one.choices[0].finish_reason, `choice ${i}`);
    assert.equal(many.usage.prompt_tokens, one.usage.prompt_tokens);
    completion += one.usage.completion_tokens;
  }
  assert.equal(many.usage.completion_tokens, completion);
  assert.equal(new Set(many.choices.map((c) => c.text)).size, 3, 'three samples, not one thrice');

  const texts = ['', '', ''];
  const finishes = [0, 0, 0];
  let usage = null;
  for await (const c of await client.completions.create({ ...base, n: 3, stream: true, stream_options: { include_usage: true } })) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      texts[ch.index] += ch.text ?? '';
      if (ch.finish_reason) finishes[ch.index]++;
    }
  }
  assert.deepEqual(texts, many.choices.map((c) => c.text));
  assert.deepEqual(finishes, [1, 1, 1]);
  assert.deepEqual(usage, many.usage);

  const chat = await client.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, n: 2 });
  assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
  assert.equal(chat.choices[0].message.content, chat.choices[1].message.content, 'greedy: the same twice');
  const roles = [0, 0];
  for await (const c of await client.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, n: 2, stream: true })) {
    for (const ch of c.choices) if (ch.delta?.role) roles[ch.index]++;
  }
  assert.deepEqual(roles, [1, 1], 'each choice opens with its role');
});

test('logprobs: chat and completions, whole and streamed; greedy tokens are their top choice', async () => {
  const plain = await client.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 4, temperature: 0 });
  assert.equal(plain.choices[0].logprobs, null, 'null unless asked for');
  const body = { model: MODEL, messages: user('Hello'), max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 3 };
  const whole = await client.chat.completions.create(body);
  const content = whole.choices[0].logprobs.content;
  assert.ok(content.length >= 1 && content.length <= whole.usage.completion_tokens, 'a token each (not EOS)');
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(Array.isArray(t.bytes), 'bytes (none for the random model\'s ids past the tokenizer\'s)');
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.deepEqual(t.top_logprobs[0], { token: t.token, logprob: t.logprob, bytes: t.bytes }, 'greedy: the most likely token');
    for (let j = 1; j < 3; ++j) assert.ok(t.top_logprobs[j].logprob <= t.top_logprobs[j - 1].logprob, 'most likely first');
  }
  // Streamed: the chunks' entries, in order, are the whole response's.
  const streamed = [];
  for await (const c of await client.chat.completions.create({ ...body, stream: true })) {
    for (const ch of c.choices) if (ch.logprobs) streamed.push(...ch.logprobs.content);
  }
  assert.deepEqual(streamed, content);
  // Sampled, without alternatives.
  const sampled = await client.chat.completions.create({ ...body, temperature: 1, seed: 3, top_logprobs: 0 });
  for (const t of sampled.choices[0].logprobs.content) assert.deepEqual(t.top_logprobs, []);

  // Completions: OpenAI's legacy form (alternatives by their text, so tokens of the same text
  // share an entry).
  const cbody = { model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 2 };
  const c = await client.completions.create(cbody);
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, c.usage.completion_tokens);
  for (const k of ['token_logprobs', 'top_logprobs', 'text_offset']) assert.equal(lp[k].length, lp.tokens.length, k);
  for (let i = 0; i < lp.tokens.length; ++i) {
    const top = lp.top_logprobs[i];
    assert.ok(Object.keys(top).length <= 3 && top[lp.tokens[i]] === lp.token_logprobs[i], 'the token among its alternatives');
    assert.equal(Math.max(...Object.values(top)), lp.token_logprobs[i], 'greedy: the largest');
    if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
  }
  assert.equal(lp.text_offset[0], 0);
  // Offsets count characters: while every token so far is one ASCII character, token i's is i.
  for (let i = 0; i < lp.tokens.length && lp.tokens.slice(0, i).every((t) => /^[\x00-\x7f]$/.test(t)); ++i)
    assert.equal(lp.text_offset[i], i, JSON.stringify(lp.tokens));
  const multi = (await client.completions.create({ ...cbody, prompt: 'x', logit_bias: { [byteTokenId(0xc3)]: 100 }, max_tokens: 3 })).choices[0].logprobs;
  assert.deepEqual(multi.text_offset, [0, 1, 2], 'a lead byte a character');
  const cont = (await client.completions.create({ ...cbody, prompt: 'x', logit_bias: { [byteTokenId(0x80)]: 100 }, max_tokens: 3 })).choices[0].logprobs;
  assert.deepEqual(cont.text_offset, [0, 0, 0], 'continuation bytes add no character');
  const merged = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const chunk of await client.completions.create({ ...cbody, stream: true })) {
    const l = chunk.choices[0]?.logprobs;
    if (l) for (const k of Object.keys(merged)) merged[k].push(...l[k]);
  }
  assert.deepEqual(merged, lp);
});

// The test tokenizer's id of a one-byte token: its vocabulary spells byte b as GPT-2's
// byte-to-unicode character of b.
function byteTokenId(b) {
  const tok = JSON.parse(fs.readFileSync(process.env.DSV4_TEST_TOKENIZER, 'utf8'));
  const printable = (c) => (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
  let extra = 0;
  let ch = null;
  for (let c = 0; c < 256; ++c) {
    const u = printable(c) ? c : 256 + extra++;
    if (c === b) ch = String.fromCodePoint(u);
  }
  const id = tok.model.vocab[ch];
  assert.ok(Number.isInteger(id), `byte ${b} in the vocabulary`);
  return id;
}

test('vLLM extensions: stop_token_ids end the output, ignore_eos runs to max_tokens; completions echo', async () => {
  const body = { model: MODEL, prompt: 'The quick brown fox', max_tokens: 16, temperature: 0 };
  const full = (await client.completions.create({ ...body, logprobs: 0 })).choices[0];
  const tokens = full.logprobs.tokens;
  // The first ASCII token that does not repeat an earlier one: the output stops right before
  // it, as the same request with max_tokens there ends.
  const ascii = (t) => t.length === 1 && t.charCodeAt(0) < 128;
  let at = 1;
  while (at < tokens.length && !(ascii(tokens[at]) && !tokens.slice(0, at).includes(tokens[at]))) ++at;
  assert.ok(at < tokens.length, `an ASCII token that does not repeat an earlier one (${JSON.stringify(tokens)})`);
  const stopId = byteTokenId(tokens[at].charCodeAt(0));
  const before = (await client.completions.create({ ...body, max_tokens: at })).choices[0].text;
  const cut = await client.completions.create({ ...body, stop_token_ids: [stopId] });
  assert.equal(cut.choices[0].text, before);
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.usage.completion_tokens, at + 1, 'the stop token counts as generated');
  let streamed = '';
  let reason = null;
  for await (const c of await client.completions.create({ ...body, stop_token_ids: [stopId], stream: true })) {
    streamed += c.choices[0]?.text ?? '';
    reason = c.choices[0]?.finish_reason ?? reason;
  }
  assert.equal(streamed, cut.choices[0].text);
  assert.equal(reason, 'stop');

  // (The random model hardly ever samples EOS, so this shows the field accepted and the length
  // reached; the engine's stop_at_eos = false is the engine tests'.)
  const long = await client.completions.create({ ...body, max_tokens: 40, ignore_eos: true });
  assert.equal(long.usage.completion_tokens, 40);
  assert.equal(long.choices[0].finish_reason, 'length');

  const echoed = await client.completions.create({ ...body, echo: true });
  assert.equal(echoed.choices[0].text, body.prompt + full.text);
  let echoStream = '';
  for await (const c of await client.completions.create({ ...body, echo: true, stream: true }))
    echoStream += c.choices[0]?.text ?? '';
  assert.equal(echoStream, echoed.choices[0].text);
  const idsEcho = await client.completions.create({ model: MODEL, prompt: [byteTokenId(72), byteTokenId(105)], max_tokens: 2, echo: true });
  assert.ok(idsEcho.choices[0].text.startsWith('Hi'), JSON.stringify(idsEcho.choices[0].text));
  await rejects(client.completions.create({ ...body, echo: true, logprobs: 1 }), 400, 'echo');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), echo: true }), 400, 'echo');
  await rejects(client.completions.create({ ...body, stop_token_ids: [100000] }), 400, 'stop_token_ids');
  await rejects(client.completions.create({ ...body, stop_token_ids: 'x' }), 400, 'stop_token_ids');
});

test('logits rules: logit_bias, min_tokens holding stop_token_ids back, penalties; whole and streamed', async () => {
  const body = { model: MODEL, prompt: 'The quick brown fox', max_tokens: 12, temperature: 0 };
  const x = byteTokenId('x'.charCodeAt(0));
  // +100 on one token: it is every token of the output.
  const forced = (await client.completions.create({ ...body, logit_bias: { [x]: 100 } })).choices[0];
  assert.equal(forced.text, 'x'.repeat(12));
  // The same token as a stop id: it ends the output at once, or after min_tokens other tokens.
  const at_once = await client.completions.create({ ...body, logit_bias: { [x]: 100 }, stop_token_ids: [x] });
  assert.equal(at_once.usage.completion_tokens, 1);
  assert.equal(at_once.choices[0].text, '');
  const held = await client.completions.create({ ...body, logit_bias: { [x]: 100 }, stop_token_ids: [x], min_tokens: 4, logprobs: 0 });
  assert.equal(held.usage.completion_tokens, 5);
  assert.equal(held.choices[0].finish_reason, 'stop');
  assert.equal(held.choices[0].logprobs.tokens.length, 4);
  assert.ok(!held.choices[0].logprobs.tokens.includes('x'), JSON.stringify(held.choices[0].logprobs.tokens));
  let streamed = '';
  for await (const c of await client.completions.create({ ...body, logit_bias: { [x]: 100 }, stop_token_ids: [x], min_tokens: 4, stream: true }))
    streamed += c.choices[0]?.text ?? '';
  assert.equal(streamed, held.choices[0].text);
  // -100 on the plain output's first token: another one comes first.
  const plain = (await client.completions.create({ ...body, logprobs: 0 })).choices[0].logprobs.tokens;
  const first = plain[0];
  if (first.length === 1 && first.charCodeAt(0) < 128) {
    const other = (await client.completions.create({ ...body, max_tokens: 1, logprobs: 0, logit_bias: { [byteTokenId(first.charCodeAt(0))]: -100 } })).choices[0];
    assert.notEqual(other.logprobs.tokens[0], first);
  }
  // A huge repetition penalty: no ASCII token of the output repeats the prompt or itself.
  const fresh = (await client.completions.create({ ...body, repetition_penalty: 100, logprobs: 0 })).choices[0].logprobs.tokens;
  const seen = new Set(body.prompt.split(''));
  for (const t of fresh) {
    if (t.length !== 1 || t.charCodeAt(0) >= 128) continue;
    assert.ok(!seen.has(t), `${JSON.stringify(t)} repeats (${JSON.stringify(fresh)})`);
    seen.add(t);
  }
  const chat = await client.chat.completions.create({ model: MODEL, messages: user('hi'), max_tokens: 8, presence_penalty: 1.5, frequency_penalty: -0.5 });
  assert.equal(chat.usage.completion_tokens, 8);
  await rejects(client.completions.create({ ...body, logit_bias: { 100000: 1 } }), 400, 'logit_bias');
  await rejects(client.completions.create({ ...body, logit_bias: { [x]: 101 } }), 400, 'logit_bias');
  await rejects(client.completions.create({ ...body, min_tokens: 13 }), 400, 'min_tokens');
  await rejects(client.completions.create({ ...body, repetition_penalty: 0 }), 400, 'repetition_penalty');
  await rejects(client.completions.create({ ...body, presence_penalty: 3 }), 400, 'presence_penalty');
});

test('tokenize / detokenize: the prompts the endpoints build, and back to text', async () => {
  const auth = { Authorization: `Bearer ${KEY}` };
  const call = async (route, body, headers = auth) => post(`${srv.url}/${route}`, JSON.stringify(body), headers);
  // A text prompt: BOS, then one token a byte (the test tokenizer); what completions count.
  const text = 'Hello, world';
  const t = await call('tokenize', { model: MODEL, prompt: text });
  assert.equal(t.status, 200, t.text);
  assert.equal(t.json.count, text.length + 1);
  assert.equal(t.json.tokens.length, t.json.count);
  assert.equal(t.json.max_model_len, 2048);
  const done = await client.completions.create({ model: MODEL, prompt: text, max_tokens: 1 });
  assert.equal(done.usage.prompt_tokens, t.json.count);
  const bare = await call('tokenize', { prompt: text, add_special_tokens: false });  // (model left out)
  assert.deepEqual(bare.json.tokens, t.json.tokens.slice(1));
  const back = await call('detokenize', { model: MODEL, tokens: bare.json.tokens });
  assert.equal(back.status, 200, back.text);
  assert.equal(back.json.prompt, text);
  // Chat messages: the chat endpoint's prompt.
  const msgs = { messages: user('hi there') };
  const c = await call('tokenize', { model: MODEL, ...msgs });
  const chatDone = await client.chat.completions.create({ model: MODEL, ...msgs, max_tokens: 1 });
  assert.equal(c.json.count, chatDone.usage.prompt_tokens);
  // Token ids pass through.
  const ids = await call('tokenize', { model: MODEL, prompt: [0, 70, 80] });
  assert.deepEqual(ids.json.tokens, [0, 70, 80]);
  // Mistakes: a 400 naming the field, 404 for another model, 401 without the key.
  for (const [route, body, status, param] of [
    ['detokenize', { tokens: [1, 100000] }, 400, 'tokens'],
    ['detokenize', { tokens: 'x' }, 400, 'tokens'],
    ['detokenize', { tokens: [1.5] }, 400, 'tokens'],
    ['tokenize', { prompt: 5 }, 400, 'prompt'],
    ['tokenize', { prompt: 'x', add_special_tokens: 'no' }, 400, 'add_special_tokens'],
    ['tokenize', { model: 'gpt-4o', prompt: 'x' }, 404, 'model'],
  ]) {
    const r = await call(route, body);
    assert.equal(r.status, status, `${route} ${JSON.stringify(body)}: ${r.text}`);
    assertErrorShape(r.json, status, param);
  }
  assert.equal((await call('tokenize', { prompt: 'x' }, {})).status, 401);
  assert.equal((await call('detokenize', { tokens: [] }, {})).status, 401);
});

test('400: malformed JSON, wrong types, missing fields, n out of range, long prompts', async () => {
  const url = `${srv.url}/v1/chat/completions`;
  const auth = { Authorization: `Bearer ${KEY}` };
  for (const body of ['{"model": "dsv4-test", "messages": [', 'null', '[]', '"text"', '{"model": 1e999999}',
                      '['.repeat(50000), '{"a":' + '{"a":'.repeat(5000)]) {
    const r = await post(url, body, auth);
    assert.equal(r.status, 400, body.slice(0, 40));
    assertErrorShape(r.json);
  }
  await rejects(client.chat.completions.create({ model: MODEL }), 400, 'messages');
  await rejects(client.chat.completions.create({ model: MODEL, messages: 'hi' }), 400, 'messages');
  await rejects(client.chat.completions.create({ model: MODEL, messages: [] }), 400, 'messages');
  await rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: 'robot', content: 'x' }] }), 400, 'messages[0].role');
  await rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 5 }] }), 400, 'messages[0].content');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), temperature: 'hot' }), 400, 'temperature');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), temperature: 3 }), 400, 'temperature');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), max_tokens: 0 }), 400, 'max_tokens');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), stream: 'yes' }), 400, 'stream');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), n: 0 }), 400, 'n');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), n: 17 }), 400, 'n');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), top_logprobs: 2 }), 400, 'top_logprobs');
  await rejects(client.chat.completions.create({ model: MODEL, messages: user('x'), logprobs: true, top_logprobs: 21 }), 400, 'top_logprobs');
  await rejects(client.completions.create({ model: MODEL, prompt: 'x', logprobs: 21 }), 400, 'logprobs');
  await rejects(client.completions.create({ model: MODEL, prompt: ['a', 'b'] }), 400, 'prompt');
  await rejects(client.completions.create({ model: MODEL, prompt: [0, 9999] }), 400, 'prompt');
  // The context is 2048 tokens; the byte-level tokenizer makes one token per byte.
  const long = client.chat.completions.create({ model: MODEL, messages: user('x'.repeat(2100)) });
  await assert.rejects(long, (e) => e.status === 400 && e.code === 'context_length_exceeded');
  const tight = client.chat.completions.create({ model: MODEL, messages: user('x'.repeat(1900)), max_tokens: 200 });
  await assert.rejects(tight, (e) => e.status === 400 && e.param === 'max_tokens');
});

test('401 without the key, 404 unknown model or route, 413 over the body limit', async () => {
  await rejects(srv.client('wrong').chat.completions.create({ model: MODEL, messages: user('x') }), 401);
  await rejects(client.chat.completions.create({ model: 'gpt-4o', messages: user('x') }), 404, 'model');
  const auth = { Authorization: `Bearer ${KEY}` };
  const big = JSON.stringify({ model: MODEL, messages: user('y'.repeat(70000)) });
  const r = await post(`${srv.url}/v1/chat/completions`, big, auth);
  assert.equal(r.status, 413);
  assertErrorShape(r.json);
  const nowhere = await post(`${srv.url}/v1/nowhere`, '{}', auth);
  assert.equal(nowhere.status, 404);
  assertErrorShape(nowhere.json);
  assert.equal((await fetch(`${srv.url}/health`)).status, 200, 'health needs no key');
});

test('metrics: requests by status, tokens, gauges, latency histograms', async () => {
  const m = await metrics(srv.url);
  assert.ok(m['dsv4_requests_total{endpoint="chat",status="200"}'] >= 10);
  assert.ok(m['dsv4_requests_total{endpoint="chat",status="400"}'] >= 10);
  assert.equal(m['dsv4_requests_total{endpoint="chat",status="404"}'], 1);
  assert.equal(m['dsv4_requests_total{endpoint="chat",status="413"}'], 1);
  assert.ok(m.dsv4_prompt_tokens_total > 0 && m.dsv4_generated_tokens_total > 0);
  assert.equal(m.dsv4_running_requests, 0);
  assert.equal(m.dsv4_queue_depth, 0);
  assert.equal(m.dsv4_cache_slots_used, 0);
  assert.equal(m.dsv4_cache_slots_total, 4);
  assert.ok(m.dsv4_time_to_first_token_seconds_count > 0);
  assert.ok(m.dsv4_inter_token_latency_seconds_count > 0);
  assert.equal(m['dsv4_time_to_first_token_seconds_bucket{le="+Inf"}'], m.dsv4_time_to_first_token_seconds_count);
});
