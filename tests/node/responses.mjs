// responses.mjs: `specula serve`'s /v1/responses through the official OpenAI
// Node client (client.responses.create, plain and streamed) and the Vercel
// AI SDK's default OpenAI provider (which speaks the Responses API).
// Usage: node responses.mjs BASE_URL MODEL API_KEY
// Prints "ok ..." / "FAIL ..." lines and a last line "NODE <passed> <failed>".
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText, generateObject, tool, jsonSchema } from 'ai';
import { z } from 'zod';
import { check, done, J } from './checks.mjs';

const [base, model, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });

const input = 'Write a Python function that adds two numbers.';
let plain;
await check('responses.create: a response with output_text, status and usage', async () => {
  plain = await client.responses.create({ model, input, max_output_tokens: 24, temperature: 0 });
  if (plain.object !== 'response' || !plain.id.startsWith('resp_')) return `bad shape ${J(plain)}`;
  if (typeof plain.output_text !== 'string' || !plain.output_text.length) return `no output_text ${J(plain)}`;
  const m = plain.output[0];
  if (plain.output.length !== 1 || m.type !== 'message' || m.role !== 'assistant' || m.content[0].type !== 'output_text')
    return `output ${J(plain.output)}`;
  if (!['completed', 'incomplete'].includes(plain.status)) return `status ${plain.status}`;
  if (plain.status === 'incomplete' && plain.incomplete_details?.reason !== 'max_output_tokens')
    return `incomplete_details ${J(plain.incomplete_details)}`;
  const u = plain.usage;
  if (!(u.input_tokens > 0) || !(u.output_tokens > 0) || u.total_tokens !== u.input_tokens + u.output_tokens ||
      typeof u.input_tokens_details?.cached_tokens !== 'number')
    return `usage ${J(u)}`;
});

await check('responses.create streamed: typed events in order, numbered, the same text', async () => {
  const stream = await client.responses.create({ model, input, max_output_tokens: 24, temperature: 0, stream: true });
  const types = [];
  let text = '', seq = -1, last = null, final = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.sequence_number !== seq + 1) return `sequence_number ${ev.sequence_number} after ${seq}`;
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.output_text.done') last = ev.text;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  const want = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'];
  if (J(types.slice(0, 4)) !== J(want)) return `first events ${J(types.slice(0, 6))}`;
  const tail = types.slice(-4);
  if (J(tail.slice(0, 3)) !== J(['response.output_text.done', 'response.content_part.done', 'response.output_item.done']))
    return `last events ${J(tail)}`;
  if (!final || final.usage?.output_tokens !== plain.usage.output_tokens) return `final ${J(final)}`;
  if (text !== plain.output_text || last !== text) return `streamed ${J(text)} vs ${J(plain.output_text)}`;
});

await check('responses.stream helper: finalResponse equals the plain answer', async () => {
  const s = client.responses.stream({ model, input, max_output_tokens: 24, temperature: 0 });
  const r = await s.finalResponse();
  const text = r.output?.[0]?.content?.[0]?.text;
  // (the helper keeps the snapshot of response.created unless the stream
  // ends with response.completed, so its status is not compared here)
  return text === plain.output_text ? null : `${J(text)} vs ${J(plain.output_text)}`;
});

await check('instructions and input items: a conversation', async () => {
  const r = await client.responses.create({
    model, instructions: 'You are terse.', max_output_tokens: 8, temperature: 0,
    input: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: [{ type: 'output_text', text: 'hello' }] },
            { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'again' }] }],
  });
  return r.output_text.length ? null : `empty ${J(r)}`;
});

const weather = { type: 'function', name: 'get_weather', description: 'the weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } },
                required: ['city', 'days'], additionalProperties: false }, strict: true };
let call;
await check('function tools: tool_choice required gives a function_call item whose arguments validate', async () => {
  const r = await client.responses.create({ model, input: 'weather in Paris?', tools: [weather],
    tool_choice: 'required', max_output_tokens: 60, temperature: 0 });
  call = r.output.find((o) => o.type === 'function_call');
  if (!call || call.name !== 'get_weather' || !call.call_id) return `output ${J(r.output)}`;
  const a = JSON.parse(call.arguments);
  if (typeof a.city !== 'string' || !Number.isInteger(a.days) || a.days < 1 || a.days > 7) return `arguments ${call.arguments}`;
});

await check('function tools streamed: the same call, its arguments in deltas', async () => {
  const stream = await client.responses.create({ model, input: 'weather in Paris?', tools: [weather],
    tool_choice: 'required', max_output_tokens: 60, temperature: 0, stream: true });
  let args = '', done = null, deltas = 0;
  for await (const ev of stream) {
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta, deltas++;
    if (ev.type === 'response.output_item.done' && ev.item.type === 'function_call') done = ev.item;
  }
  if (!done || done.arguments !== call?.arguments || args !== done.arguments || deltas < 2)
    return `streamed ${J(done)} (${deltas} deltas) vs ${J(call)}`;
});

await check('function_call and function_call_output items continue the conversation', async () => {
  const r = await client.responses.create({ model, tools: [weather], max_output_tokens: 12, temperature: 0,
    input: [{ role: 'user', content: 'weather in Paris?' },
            { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
            { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }] });
  return r.status && r.output.length ? null : `output ${J(r)}`;
});

await check('text.format json_schema: output_text is a document of the schema', async () => {
  const r = await client.responses.create({ model, input: 'a person', max_output_tokens: 80, temperature: 0,
    text: { format: { type: 'json_schema', name: 'person', strict: true, schema: { type: 'object',
      properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
      required: ['name', 'age'], additionalProperties: false } } } });
  if (r.status !== 'completed') return `status ${r.status} ${J(r.output_text)}`;
  const d = JSON.parse(r.output_text);
  if (typeof d.name !== 'string' || !Number.isInteger(d.age) || d.age < 0 || d.age > 120) return `document ${r.output_text}`;
});

await check('a repeated input is served from the prefix cache (cached_tokens)', async () => {
  const long = input + ' ' + 'Use type hints and a docstring. '.repeat(6);
  await client.responses.create({ model, input: long, max_output_tokens: 2, temperature: 0 });
  const r = await client.responses.create({ model, input: long, max_output_tokens: 2, temperature: 0 });
  return r.usage.input_tokens_details.cached_tokens > 0 ? null : `usage ${J(r.usage)}`;
});

await check('max_output_tokens reached: status incomplete, reason max_output_tokens', async () => {
  const r = await client.responses.create({ model, input, max_output_tokens: 3, temperature: 0 });
  return r.status === 'incomplete' && r.incomplete_details?.reason === 'max_output_tokens' &&
    r.usage.output_tokens === 3 ? null : `${r.status} ${J(r.incomplete_details)} ${J(r.usage)}`;
});

for (const [label, body, param] of [
  ['previous_response_id', { previous_response_id: 'resp_x' }, 'previous_response_id'],
  ['a chat field (messages)', { messages: [] }, 'messages'],
  ['an unknown field', { frobnicate: 1 }, 'frobnicate'],
  ['a non-function tool', { tools: [{ type: 'web_search' }] }, 'tools'],
  ['max_output_tokens 0', { max_output_tokens: 0 }, 'max_output_tokens'],
]) {
  await check(`refused with a 400 naming it: ${label}`, async () => {
    try {
      await client.responses.create({ model, input: 'hi', ...body });
      return 'accepted';
    } catch (e) {
      return e.status === 400 && e.param === param ? null : `status ${e.status} param ${e.param}: ${e.message}`;
    }
  });
}

// ---- the AI SDK's default provider: openai(model) is the Responses API ----
const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey: key });
let sdkText;
await check('AI SDK generateText (Responses API): text and usage', async () => {
  const r = await generateText({ model: provider(model), prompt: input, maxOutputTokens: 24, temperature: 0 });
  sdkText = r.text;
  if (!r.text.length || !(r.usage.inputTokens > 0) || !(r.usage.outputTokens > 0)) return `${J(r.text)} ${J(r.usage)}`;
  if (r.response.id && !r.response.id.startsWith('resp_')) return `response id ${r.response.id}`;
});

await check('AI SDK streamText: the same text', async () => {
  const r = streamText({ model: provider(model), prompt: input, maxOutputTokens: 24, temperature: 0 });
  let text = '';
  for await (const part of r.textStream) text += part;
  return text === sdkText ? null : `${J(text)} vs ${J(sdkText)}`;
});

await check('AI SDK tools (zod, .int().min().max()): a call whose input validates', async () => {
  const r = await generateText({ model: provider(model), prompt: 'weather in Paris for 3 days?', temperature: 0,
    maxOutputTokens: 60, toolChoice: 'required',
    tools: { get_weather: tool({ description: 'the weather', inputSchema: z.object({ city: z.string(), days: z.number().int().min(1).max(7) }) }) } });
  const c = r.toolCalls[0];
  if (!c || c.toolName !== 'get_weather') return `toolCalls ${J(r.toolCalls)}`;
  const a = c.input;
  return typeof a.city === 'string' && Number.isInteger(a.days) && a.days >= 1 && a.days <= 7 ? null : `input ${J(a)}`;
});

await check('AI SDK generateObject (zod 4 .int().nonnegative()): an object of the schema', async () => {
  const r = await generateObject({ model: provider(model), prompt: 'a person', temperature: 0, maxOutputTokens: 80,
    schema: z.object({ name: z.string().max(12), age: z.number().int().nonnegative() }) });
  const o = r.object;
  return typeof o.name === 'string' && Number.isInteger(o.age) && o.age >= 0 ? null : `object ${J(o)}`;
});

await check('AI SDK tools with a JSON schema and no arguments: called with {}', async () => {
  const r = await generateText({ model: provider(model), prompt: 'what time is it?', temperature: 0, maxOutputTokens: 30,
    toolChoice: { type: 'tool', toolName: 'now' },
    tools: { now: tool({ description: 'the time', inputSchema: jsonSchema({ type: 'object', properties: {} }) }) } });
  const c = r.toolCalls[0];
  return c && c.toolName === 'now' && J(c.input) === '{}' ? null : `toolCalls ${J(r.toolCalls)}`;
});

done();
