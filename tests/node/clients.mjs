// clients.mjs: what today's clients send to `specula serve`, with zod 4
// schemas: the official OpenAI client's zodResponseFormat and zodFunction
// helpers (chat.completions.parse), the AI SDK's chat provider
// (generateObject, tools beside a structured answer under auto) and
// LangChain's ChatOpenAI (withStructuredOutput, bindTools, and the
// Responses API with useResponsesApi).
// Usage: node clients.mjs BASE_URL MODEL API_KEY
// Prints "ok ..." / "FAIL ..." lines and a last line "NODE <passed> <failed>".
import OpenAI from 'openai';
import { zodResponseFormat, zodFunction } from 'openai/helpers/zod';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, tool, Output } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { check, done, J } from './checks.mjs';
import { webcrypto } from 'node:crypto';

// Node 18 (Debian 12's) has no global crypto, which LangChain's tracing
// ids use; Node 20 has it
if (!globalThis.crypto) globalThis.crypto = webcrypto;

const [base, model, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });

// the field types zod 4 writes bounds for: .int() is ±(2^53 - 1),
// .nonnegative() a minimum 0, .positive() an exclusiveMinimum 0
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int().nonnegative().max(130),
  score: z.number().min(0).max(1),
  id: z.number().int(),
  rank: z.number().int().positive().max(9),
});
const valid = (p) => typeof p.name === 'string' && Number.isInteger(p.age) && p.age >= 0 && p.age <= 130 &&
  p.score >= 0 && p.score <= 1 && Number.isInteger(p.id) && Math.abs(p.id) <= Number.MAX_SAFE_INTEGER &&
  Number.isInteger(p.rank) && p.rank > 0 && p.rank <= 9;

await check('openai chat.completions.parse with zodResponseFormat (zod 4 .int(), .positive())', async () => {
  const r = await client.chat.completions.parse({ model, temperature: 0, max_tokens: 120,
    messages: [{ role: 'user', content: 'a person' }], response_format: zodResponseFormat(Person, 'person') });
  const p = r.choices[0].message.parsed;
  return p && valid(p) ? null : `parsed ${J(r.choices[0].message)}`;
});

const Weather = z.object({ city: z.string().max(20), days: z.number().int().min(1).max(7) });
await check('openai zodFunction tool, tool_choice required: a call whose arguments parse', async () => {
  const r = await client.chat.completions.parse({ model, temperature: 0, max_tokens: 80,
    messages: [{ role: 'user', content: 'weather in Paris?' }],
    tools: [zodFunction({ name: 'get_weather', parameters: Weather })], tool_choice: 'required' });
  const c = r.choices[0].message.tool_calls?.[0];
  const a = c?.function?.parsed_arguments;
  return a && typeof a.city === 'string' && a.days >= 1 && a.days <= 7 ? null : `message ${J(r.choices[0].message)}`;
});

await check('openai zodFunction tool under auto: accepted, a text answer or a call that parses', async () => {
  // (create, not parse: parse throws on an answer cut by max_tokens)
  const r = await client.chat.completions.create({ model, temperature: 0, max_tokens: 40,
    messages: [{ role: 'user', content: 'weather in Paris?' }],
    tools: [zodFunction({ name: 'get_weather', parameters: Weather })], tool_choice: 'auto' });
  const m = r.choices[0].message, c = m.tool_calls?.[0]?.function;
  const a = c ? Weather.safeParse(JSON.parse(c.arguments)).data : null;
  return typeof m.content === 'string' || (a && a.days >= 1 && a.days <= 7) ? null : `message ${J(m)}`;
});

const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey: key });
await check('AI SDK chat provider: generateObject with zod 4 bounds', async () => {
  const r = await generateObject({ model: provider.chat(model), prompt: 'a person', temperature: 0,
    maxOutputTokens: 120, schema: Person });
  return valid(r.object) ? null : `object ${J(r.object)}`;
});

await check('AI SDK tools beside a structured answer (auto): a valid call or a valid answer', async () => {
  const r = await generateText({ model: provider.chat(model), prompt: 'a person, or look one up', temperature: 0,
    maxOutputTokens: 120, experimental_output: Output.object({ schema: Person }),
    tools: { lookup: tool({ description: 'find a person', inputSchema: z.object({ name: z.string().max(12) }) }) } });
  if (r.toolCalls.length) return typeof r.toolCalls[0].input.name === 'string' ? null : `call ${J(r.toolCalls)}`;
  return valid(r.experimental_output) ? null : `answer ${J(r.text)}`;
});

const lc = (extra = {}) => new ChatOpenAI({ model, temperature: 0, maxTokens: 120, apiKey: key,
  configuration: { baseURL: `${base}/v1` }, maxRetries: 0, ...extra });
await check('LangChain withStructuredOutput (zod 4, json_schema)', async () => {
  const p = await lc().withStructuredOutput(Person, { method: 'jsonSchema' }).invoke('a person');
  return valid(p) ? null : `object ${J(p)}`;
});

await check('LangChain bindTools with a zod 4 .int() parameter, tool_choice any', async () => {
  const m = lc().bindTools([{ name: 'get_weather', description: 'the weather', schema: Weather }], { tool_choice: 'any' });
  const r = await m.invoke('weather in Paris?');
  const c = r.tool_calls?.[0];
  return c && c.name === 'get_weather' && c.args.days >= 1 && c.args.days <= 7 ? null : `tool_calls ${J(r.tool_calls)}`;
});

await check('LangChain useResponsesApi: the Responses API answers', async () => {
  const r = await lc({ useResponsesApi: true, maxTokens: 16 }).invoke('def add(a, b):');
  const text = typeof r.content === 'string' ? r.content : (r.content || []).map((c) => c.text || '').join('');
  return text.length ? null : `content ${J(r.content)}`;
});

await check('LangChain useResponsesApi with withStructuredOutput', async () => {
  const p = await lc({ useResponsesApi: true }).withStructuredOutput(Person, { method: 'jsonSchema' }).invoke('a person');
  return valid(p) ? null : `object ${J(p)}`;
});

done();
