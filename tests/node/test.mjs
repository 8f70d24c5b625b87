// test.mjs: `specula serve` through the official OpenAI Node client.
// Usage: node test.mjs BASE_URL MODEL   (BASE_URL like http://127.0.0.1:PORT)
// The server must run with a chat template (--chat-template chatml for the
// reference model). Prints "ok ..." / "FAIL ..." lines and a last line
// "NODE <passed> <failed>".
import OpenAI from 'openai';
import { check, done } from './checks.mjs';

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
// waits are as much longer under a sanitizer as tests/run.sh's limits are
const scale = Number(process.env.SPECULA_TIMEOUT_SCALE || 1);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function metrics() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

const prompt = 'The quick brown fox jumps over the lazy dog. Once upon a time';
let plain;
await check('completions (greedy): text, finish_reason, usage', async () => {
  plain = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
  const c = plain.choices[0];
  if (plain.object !== 'text_completion' || typeof c.text !== 'string') return `bad shape ${JSON.stringify(plain)}`;
  if (!['stop', 'length'].includes(c.finish_reason)) return `finish_reason ${c.finish_reason}`;
  const u = plain.usage;
  if (!(u.prompt_tokens > 0) || u.completion_tokens < 1 || u.total_tokens !== u.prompt_tokens + u.completion_tokens)
    return `usage ${JSON.stringify(u)}`;
  if (!plain.specula || typeof plain.specula.ttft_ms !== 'number') return 'no specula extension';
});

await check('completions streaming: same text as non-streaming, usage chunk', async () => {
  const stream = await client.completions.create({
    model, prompt, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  if (text !== plain.choices[0].text) return `streamed ${JSON.stringify(text)} != ${JSON.stringify(plain.choices[0].text)}`;
  if (!usage || usage.completion_tokens !== plain.usage.completion_tokens) return `usage ${JSON.stringify(usage)}`;
  if (finish !== plain.choices[0].finish_reason) return `finish ${finish}`;
  if (chunks < 3) return `only ${chunks} chunks`;
});

let chatText;
await check('chat completion: assistant message', async () => {
  const r = await client.chat.completions.create({
    model, max_tokens: 10, temperature: 0,
    messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
  });
  const c = r.choices[0];
  if (r.object !== 'chat.completion' || c.message.role !== 'assistant' || typeof c.message.content !== 'string')
    return `bad shape ${JSON.stringify(r)}`;
  if (!['stop', 'length'].includes(c.finish_reason)) return `finish_reason ${c.finish_reason}`;
  chatText = c.message.content;
});

await check('chat streaming: role first, same content, logprobs', async () => {
  const stream = await client.chat.completions.create({
    model, max_tokens: 10, temperature: 0, stream: true, logprobs: true, top_logprobs: 2,
    messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
  });
  let text = '', role = null, nlp = 0;
  for await (const ch of stream) {
    for (const c of ch.choices) {
      if (c.delta.role) role = role ?? c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.logprobs && c.logprobs.content) {
        for (const t of c.logprobs.content) {
          if (typeof t.logprob !== 'number' || t.top_logprobs.length !== 2) return `logprob entry ${JSON.stringify(t)}`;
          nlp++;
        }
      }
    }
  }
  if (role !== 'assistant') return `role ${role}`;
  if (text !== chatText) return `streamed ${JSON.stringify(text)} != ${JSON.stringify(chatText)}`;
  if (nlp < 1) return 'no logprobs';
});

await check('prefix cache: cached_tokens on a repeated prefix, none across salts', async () => {
  const long = Array.from({ length: 20 }, (_, i) => `line ${i}: the rain in spain stays mainly in the plain`).join('\n');
  const ask = (salt, tail) => client.completions.create({ model, prompt: long + tail, max_tokens: 2, temperature: 0, cache_salt: salt });
  const a = await ask('node-salt-a', '\nQ1:');
  const b = await ask('node-salt-a', '\nQ2:');
  const c = await ask('node-salt-b', '\nQ3:');
  const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;
  if (cached(a) !== 0) return `first request cached ${cached(a)}`;
  if (!(cached(b) > 64)) return `repeat cached only ${cached(b)}`;
  if (cached(c) !== 0) return `other salt cached ${cached(c)}`;
});

await check('errors: unknown model 404, n=2 400', async () => {
  try {
    await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 });
    return 'unknown model accepted';
  } catch (e) {
    if (e.status !== 404) return `status ${e.status}`;
  }
  try {
    await client.completions.create({ model, prompt: 'x', max_tokens: 1, n: 2 });
    return 'n=2 accepted';
  } catch (e) {
    if (e.status !== 400 || e.param !== 'n') return `status ${e.status} param ${e.param}`;
  }
});

// structured output: what the client sends for JSON Schema and tools, unchanged
const pickSchema = { type: 'object', properties: { color: { enum: ['red', 'blue'] }, n: { type: 'integer', minimum: 0, maximum: 9 } },
                     required: ['color', 'n'], additionalProperties: false };
await check('structured output: response_format json_schema (strict) gives a valid document', async () => {
  const r = await client.chat.completions.create({
    model, max_tokens: 40, temperature: 0, messages: [{ role: 'user', content: 'Pick a color.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema: pickSchema } },
  });
  const c = r.choices[0];
  if (c.finish_reason !== 'stop') return `finish_reason ${c.finish_reason}`;
  const v = JSON.parse(c.message.content);
  if (!['red', 'blue'].includes(v.color) || !(v.n >= 0 && v.n <= 9) || Object.keys(v).length !== 2)
    return `invalid ${c.message.content}`;
});

const tools = [{ type: 'function', function: { name: 'pick', description: 'pick a color', parameters: pickSchema } }];
await check('tools: a named tool_choice gives tool_calls with valid arguments', async () => {
  const r = await client.chat.completions.create({
    model, max_tokens: 100, temperature: 0, messages: [{ role: 'user', content: 'Pick a color.' }],
    tools, tool_choice: { type: 'function', function: { name: 'pick' } },
  });
  const c = r.choices[0];
  const call = c.message.tool_calls && c.message.tool_calls[0];
  if (c.finish_reason !== 'tool_calls' || !call || call.type !== 'function' || call.function.name !== 'pick')
    return `bad ${JSON.stringify(c)}`;
  const v = JSON.parse(call.function.arguments);
  if (!['red', 'blue'].includes(v.color)) return `arguments ${call.function.arguments}`;
});

await check('tools: streamed, the tool_calls delta and finish_reason tool_calls', async () => {
  const stream = await client.chat.completions.create({
    model, max_tokens: 100, temperature: 0, stream: true, messages: [{ role: 'user', content: 'Pick a color.' }],
    tools, tool_choice: 'required',
  });
  let args = '', name = '', finish = null;
  for await (const ch of stream)
    for (const c of ch.choices) {
      for (const t of (c.delta.tool_calls || [])) {
        if (t.function && t.function.name) name += t.function.name;
        if (t.function && t.function.arguments) args += t.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  if (finish !== 'tool_calls' || name !== 'pick') return `finish ${finish}, name ${name}`;
  JSON.parse(args);
});

await check("tools: the client's stream helper puts the piecewise tool-call deltas together", async () => {
  const params = { model, max_tokens: 100, temperature: 0, messages: [{ role: 'user', content: 'Pick a color.' }],
                   tools, tool_choice: 'required' };
  const whole = (await client.chat.completions.create(params)).choices[0].message.tool_calls[0];
  const stream = client.chat.completions.stream(params);
  let deltas = 0, done = null;
  stream.on('tool_calls.function.arguments.delta', () => { deltas++; });
  stream.on('tool_calls.function.arguments.done', (e) => { done = e; });
  const c = (await stream.finalChatCompletion()).choices[0];
  const call = c.message.tool_calls && c.message.tool_calls[0];
  if (c.finish_reason !== 'tool_calls' || !call || call.type !== 'function' || !call.id.startsWith('call_'))
    return `bad ${JSON.stringify(c)}`;
  if (call.function.name !== whole.function.name || call.function.arguments !== whole.function.arguments)
    return `streamed ${JSON.stringify(call.function)}, whole ${JSON.stringify(whole.function)}`;
  if (deltas < 3) return `the arguments came in ${deltas} deltas`;
  if (!done || done.name !== 'pick' || done.arguments !== call.function.arguments) return `done event ${JSON.stringify(done)}`;
  const v = JSON.parse(call.function.arguments);
  if (!['red', 'blue'].includes(v.color)) return `arguments ${call.function.arguments}`;
});

await check('abort mid-stream cancels the request and returns its blocks', async () => {
  const before = await metrics();
  const ac = new AbortController();
  const stream = await client.completions.create(
    { model, prompt: 'Count to a thousand:', max_tokens: 1500, temperature: 0, stream: true },
    { signal: ac.signal });
  let n = 0;
  try {
    for await (const ch of stream) {
      if (++n === 3) ac.abort();
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError) && e.name !== 'AbortError') throw e;
  }
  for (let i = 0; i < 100 * scale; i++) {
    const m = await metrics();
    const gone = m['specula_client_disconnects_total'] - before['specula_client_disconnects_total'];
    const cancelled = m['specula_requests_finished_total{reason="cancelled"}'] -
      before['specula_requests_finished_total{reason="cancelled"}'];
    if (gone >= 1 && cancelled >= 1 && m['specula_kv_blocks{state="in_use"}'] === 0 &&
        m['specula_requests_active'] === 0) {
      const toks = m['specula_completion_tokens_total'] - before['specula_completion_tokens_total'];
      if (toks >= 1500) return `it ran to the end (${toks} tokens)`;
      return;
    }
    await sleep(50);
  }
  return `no cancellation seen in /metrics within ${5 * scale} s`;
});

done();
