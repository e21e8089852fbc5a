// openai_client.mjs URL MODEL API_KEY EXPECT_DIR - the official OpenAI
// client (npm package openai, tests/serve/package.json) against qrun serve:
// a chat, the same chat streamed, a text completion (plain and streamed),
// the model list, a conversation with tools, structured output, another model's name served by this one, and an unknown
// model looked up, which the client must see as its NotFoundError. EXPECT_DIR holds qrun's own greedy texts for the same
// prompts, the independent expectation: chat.txt (qrun --chat -p Hi -n 8)
// and text.txt (qrun -p Hello -n 8), each with qrun's final newline.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [url, model, apiKey, dir] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
const want = (name) => readFileSync(`${dir}/${name}`, 'utf8').replace(/\n$/, '');

function check(ok, what) {
  if (!ok) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const hi = [{ role: 'user', content: 'Hi' }];
const chat = await client.chat.completions.create({ model, messages: hi, max_tokens: 8, temperature: 0 });
const content = chat.choices[0].message.content;
check(content === want('chat.txt'), `chat equals qrun --chat: ${JSON.stringify(content)}`);
check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant', 'chat: object and role');
check(chat.choices[0].finish_reason === 'length' && chat.usage.completion_tokens === 8 &&
      chat.usage.total_tokens === chat.usage.prompt_tokens + 8, `chat: finish and usage ${JSON.stringify(chat.usage)}`);

const stream = await client.chat.completions.create({
  model, messages: hi, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = '', chunks = 0, usage = null, finish = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  if (!chunk.choices.length) continue;
  streamed += chunk.choices[0].delta.content ?? '';
  finish = chunk.choices[0].finish_reason ?? finish;
}
check(streamed === want('chat.txt'), `streamed chat equals qrun --chat (${chunks} chunks)`);
check(chunks >= 3 && finish === 'length' && usage && usage.completion_tokens === 8, 'streamed chat: chunks, finish, usage');

const text = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0 });
check(text.choices[0].text === want('text.txt'), `completion equals qrun -p: ${JSON.stringify(text.choices[0].text)}`);
let streamedText = '';
for await (const chunk of await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0,
                                                             stream: true }))
  streamedText += chunk.choices[0]?.text ?? '';
check(streamedText === want('text.txt'), 'streamed completion equals qrun -p');

// tools: a conversation that called one and has its result; the reply is
// the completion of the prompt /apply-template renders for it (that
// prompt is checked against Qwen3's own template in the tools case)
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const history = [{ role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null,
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '18 C, sunny' }];
const withTools = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 8, temperature: 0 });
const rendered = await (await fetch(`${url}/apply-template`, {
  method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
  body: JSON.stringify({ messages: history, tools }) })).json();
check(rendered.prompt.includes('<tools>\n{"type": "function", "function": {"name": "get_weather"') &&
      rendered.prompt.includes('<tool_response>\n18 C, sunny\n</tool_response>'), 'the tools and the tool result are in the prompt');
const asText = await client.completions.create({ model, prompt: rendered.prompt, max_tokens: 8, temperature: 0 });
check(withTools.choices[0].message.content === asText.choices[0].text && withTools.choices[0].finish_reason === 'length',
      `a chat with tools continues its rendered prompt: ${JSON.stringify(withTools.choices[0].message.content)}`);
let streamedTools = '';
for await (const chunk of await client.chat.completions.create({ model, messages: history, tools, max_tokens: 8,
                                                                  temperature: 0, stream: true }))
  streamedTools += chunk.choices[0]?.delta?.content ?? '';
check(streamedTools === asText.choices[0].text, 'and so does it streamed');

// n choices: greedy, each is qrun's reply
const two = await client.chat.completions.create({ model, messages: hi, max_tokens: 8, temperature: 0, n: 2 });
check(two.choices.length === 2 && two.choices.every((c, i) => c.index === i && c.message.content === want('chat.txt')) &&
      two.usage.completion_tokens === 16, 'n 2: two choices, each qrun\'s');

const byIndex = ['', ''];
for await (const chunk of await client.chat.completions.create({ model, messages: hi, max_tokens: 8, temperature: 0,
                                                                  n: 2, stream: true }))
  for (const c of chunk.choices) byIndex[c.index] += c.delta.content ?? '';
check(byIndex.every((t) => t === want('chat.txt')), 'n 2 streamed: each index\'s deltas make qrun\'s reply');

// log probabilities: the chosen token of a greedy reply is the most likely
const withLogprobs = await client.chat.completions.create({ model, messages: hi, max_tokens: 4, temperature: 0,
                                                            logprobs: true, top_logprobs: 3 });
const lpContent = withLogprobs.choices[0].logprobs.content;
check(lpContent.length === 4 && lpContent.every((e) => e.top_logprobs.length === 3 && e.logprob === e.top_logprobs[0].logprob &&
      e.logprob < 0) && lpContent.map((e) => e.token).join('') === withLogprobs.choices[0].message.content,
      'logprobs: each token the most likely of its 3, their texts the reply');

// structured output: the reply parses and holds the schema, whatever the model
const pick = { type: 'object', properties: { color: { enum: ['red', 'green'] }, ok: { type: 'boolean' } },
  required: ['color', 'ok'], additionalProperties: false };
const structured = await client.chat.completions.create({ model, messages: hi, max_tokens: 600, temperature: 0,
  response_format: { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema: pick } } });
const picked = JSON.parse(structured.choices[0].message.content);
check(['red', 'green'].includes(picked.color) && typeof picked.ok === 'boolean' && Object.keys(picked).length === 2 &&
      structured.choices[0].finish_reason === 'stop', `structured output holds its schema: ${JSON.stringify(picked)}`);

// a forced tool call: one call of the tool named, its arguments holding its parameters
// (the city an enum: the random model's free strings run on)
const cities = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
  properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } }, required: ['city'] } } }];
const forced = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }],
  tools: cities, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 600, temperature: 0 });
const call = forced.choices[0].message.tool_calls?.[0];
check(forced.choices[0].finish_reason === 'tool_calls' && call?.function.name === 'get_weather' &&
      ['Paris', 'Oslo'].includes(JSON.parse(call.function.arguments).city),
      `a forced tool call: ${JSON.stringify(call?.function)}`);

const models = [];
for await (const m of client.models.list()) models.push(m.id);
check(models.length === 1 && models[0] === model, `models: ${models}`);

// a model name the client hard-codes is served by the loaded model
const other = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 8, temperature: 0 });
check(other.choices[0].message.content === chat.choices[0].message.content, 'another model name is served alike');
try {
  await client.models.retrieve('no-such-model');
  check(false, 'an unknown model is not listed');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, `an unknown model is the client's NotFoundError: ${e.status}`);
}
const wrongKey = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'wrong', maxRetries: 0 });
try {
  await wrongKey.models.list();
  check(false, 'a wrong key is refused');
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, `a wrong key is the client's AuthenticationError`);
}
