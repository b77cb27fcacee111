// Starts `dsv4 serve` on loopback for a test file: a temporary model folder with the random
// small-rates weights (symlinked, never copied) and the byte-level test tokenizer whose V4
// markers sit inside the model's 512-token vocabulary (tools/make_test_tokenizer.py).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (ctest sets it; see tests/server/CMakeLists.txt)`);
  return v;
};

export const MODEL = 'dsv4-test';

// The temporary model folder (the caller removes it).
function makeModelDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-serve-'));
  const weights = env('DSV4_SMALL_MODEL');
  for (const f of ['config.json', 'model.safetensors'])
    fs.symlinkSync(path.join(weights, f), path.join(dir, f));
  fs.copyFileSync(env('DSV4_TEST_TOKENIZER'), path.join(dir, 'tokenizer.json'));
  return dir;
}

const serveArgs = (dir, context, threads, args) =>
  ['serve', '--model', dir, '--served-model-name', MODEL, '--max-context', String(context),
   '--threads', String(threads), ...args];

// model: a model folder to serve as it is (default: the temporary random one).
export async function startServer(args = [], { apiKey, context = 512, threads = 2, model } = {}) {
  const dir = model ?? makeModelDir();
  const argv = serveArgs(dir, context, threads, ['--port', '0', ...args]);
  if (apiKey) argv.push('--api-key', apiKey);
  const proc = spawn(env('DSV4_BIN'), argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no listening line in 120 s:\n${stderr}`)), 120000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`dsv4 serve exited ${code}:\n${stderr}`)); });
  });
  return {
    url,
    proc,
    exited,  // resolves to { code, signal } when the server ends (by itself or by stop())
    stderr: () => stderr,
    client: (key = apiKey ?? 'unused') =>
      // No retries: 429 and 5xx must reach the test as they are.
      new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 }),
    // SIGTERM, then the exit status (0 for a graceful shutdown; ASan's leak check makes it
    // non-zero when something leaked).
    async stop() {
      proc.kill('SIGTERM');
      const { code, signal } = await exited;
      if (!model) fs.rmSync(dir, { recursive: true, force: true });
      if (code !== 0) console.error(stderr);
      return code ?? signal;
    },
  };
}

// `dsv4 serve ARGS` as a rank >= 1 of a server whose ranks are processes (--rank R
// --rendezvous ...): it serves nothing; `exit()` waits for its exit status.
export function startFollower(args, { context = 512, threads = 2 } = {}) {
  const dir = makeModelDir();
  const proc = spawn(env('DSV4_BIN'), serveArgs(dir, context, threads, args),
                     { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  proc.stdout.on('data', () => {});
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    proc,
    stderr: () => stderr,
    async exit() {
      const { code, signal } = await exited;
      fs.rmSync(dir, { recursive: true, force: true });
      return code ?? signal;
    },
  };
}

// A TCP port free on loopback now (for a rendezvous address).
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Raw POST for what the client cannot send (broken JSON, huge bodies).
export async function post(url, body, headers = {}) {
  const r = await fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json', ...headers } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Prometheus text -> { 'name{labels}': value }.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// Reads a chat stream into { content, reasoning, toolCalls, finish, usage, chunks }.
export async function collectChat(stream) {
  const r = { content: '', reasoning: '', toolCalls: [], finish: null, usage: null, chunks: 0, finishes: 0 };
  for await (const chunk of stream) {
    r.chunks++;
    if (chunk.usage) r.usage = chunk.usage;
    for (const c of chunk.choices) {
      const d = c.delta ?? {};
      if (d.content) r.content += d.content;
      if (d.reasoning_content) r.reasoning += d.reasoning_content;
      for (const t of d.tool_calls ?? []) {
        r.toolCalls[t.index] ??= { id: '', name: '', arguments: '' };
        if (t.id) r.toolCalls[t.index].id = t.id;
        if (t.function?.name) r.toolCalls[t.index].name = t.function.name;
        r.toolCalls[t.index].arguments += t.function?.arguments ?? '';
      }
      if (c.finish_reason) { r.finish = c.finish_reason; r.finishes++; }
    }
  }
  return r;
}
