// langchain_client.mjs URL MODEL API_KEY EXPECT_DIR - LangChain's ChatOpenAI
// (npm @langchain/openai, tests/serve/package.json) against qrun serve with
// its default settings: a chat, the same chat streamed, a conversation with
// a system prompt, tools bound to the model with a tool call and its result
// in the history, a forced tool call, log probabilities, n, a text completion (LangChain's
// OpenAI), structured output, and an unknown key refused. EXPECT_DIR holds
// qrun's own greedy texts, the independent expectation: chat.txt (qrun
// --chat -p Hi -n 8), text.txt (qrun -p Hello -n 8) and system.txt (qrun
// --chat --system "Be brief." -p Hi -n 8), each with qrun's final newline.
// A chat with tools is compared with the completion of the prompt
// /apply-template renders for it, which the tools case checks against
// Qwen3's own template.
import { readFileSync } from 'node:fs';
import { ChatOpenAI, OpenAI } from '@langchain/openai';
import { AIMessage, HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';

const [url, model, apiKey, dir] = process.argv.slice(2);
const want = (name) => readFileSync(`${dir}/${name}`, 'utf8').replace(/\n$/, '');
const llm = new ChatOpenAI({ model, apiKey, temperature: 0, maxTokens: 8, maxRetries: 0,
                             configuration: { baseURL: `${url}/v1` } });

function check(ok, what) {
  if (!ok) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const hi = await llm.invoke([new HumanMessage('Hi')]);
check(hi.content === want('chat.txt'), `invoke equals qrun --chat: ${JSON.stringify(hi.content)}`);
check(hi.usage_metadata && hi.usage_metadata.output_tokens === 8, `usage: ${JSON.stringify(hi.usage_metadata)}`);

let streamed = '', chunks = 0;
for await (const chunk of await llm.stream([new HumanMessage('Hi')])) {
  streamed += chunk.content;
  chunks++;
}
check(streamed === want('chat.txt') && chunks >= 2, `stream equals qrun --chat (${chunks} chunks)`);

const brief = await llm.invoke([new SystemMessage('Be brief.'), new HumanMessage('Hi')]);
check(brief.content === want('system.txt'), 'a system message equals qrun --chat --system');

const weather = { type: 'function', function: { name: 'get_weather', description: 'The weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const withTools = llm.bindTools([weather]);
const history = [new HumanMessage('Weather in Paris?'),
  new AIMessage({ content: '', tool_calls: [{ id: 'call_1', name: 'get_weather', args: { city: 'Paris' } }] }),
  new ToolMessage({ tool_call_id: 'call_1', content: '18 C, sunny' })];
const answer = await withTools.invoke(history);
const rendered = await (await fetch(`${url}/apply-template`, {
  method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
  body: JSON.stringify({ tools: [weather], messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '18 C, sunny' }] }) })).json();
const completion = await (await fetch(`${url}/v1/completions`, {
  method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
  body: JSON.stringify({ model, prompt: rendered.prompt, max_tokens: 8, temperature: 0 }) })).json();
check(answer.content === completion.choices[0].text && answer.tool_calls.length === 0,
      `bound tools with a call in the history: the reply continues the rendered prompt ${JSON.stringify(answer.content)}`);

// a forced call of a bound tool: the random model's reply is a call LangChain parses
const cities = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
  properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } }, required: ['city'] } } };
const called = await new ChatOpenAI({ model, apiKey, temperature: 0, maxTokens: 600, maxRetries: 0,
                                      configuration: { baseURL: `${url}/v1` } })
  .bindTools([cities], { tool_choice: 'get_weather' }).invoke([new HumanMessage('Weather in Paris?')]);
check(called.tool_calls.length === 1 && called.tool_calls[0].name === 'get_weather' &&
      ['Paris', 'Oslo'].includes(called.tool_calls[0].args.city), `a forced tool call: ${JSON.stringify(called.tool_calls)}`);

// log probabilities: each token of the greedy reply the most likely of its alternatives
const withLogprobs = await new ChatOpenAI({ model, apiKey, temperature: 0, maxTokens: 8, maxRetries: 0, logprobs: true,
                                            topLogprobs: 2, configuration: { baseURL: `${url}/v1` } })
  .invoke([new HumanMessage('Hi')]);
const lp = withLogprobs.response_metadata.logprobs?.content ?? [];
check(lp.length === 8 && lp.map((e) => e.token).join('') === want('chat.txt') &&
      lp.every((e) => e.top_logprobs.length === 2 && e.logprob === e.top_logprobs[0].logprob),
      `logprobs: ${lp.length} tokens, each the most likely of its 2`);

// n: two generations of one prompt, each qrun's greedy reply
const two = await new ChatOpenAI({ model, apiKey, temperature: 0, maxTokens: 8, maxRetries: 0, n: 2,
                                   configuration: { baseURL: `${url}/v1` } })
  .generate([[new HumanMessage('Hi')]]);
check(two.generations[0].length === 2 && two.generations[0].every((g) => g.text === want('chat.txt')),
      `n 2: ${two.generations[0].length} generations, each qrun's`);

// text completions through LangChain's OpenAI (the completions endpoint)
const completer = new OpenAI({ model, apiKey, temperature: 0, maxTokens: 8, maxRetries: 0,
                               configuration: { baseURL: `${url}/v1` } });
const completed = await completer.invoke('Hello');
check(completed === want('text.txt'), `OpenAI (completions) equals qrun -p: ${JSON.stringify(completed)}`);

// structured output as LangChain asks for it (response_format json_schema):
// the parsed reply holds the schema
const pick = { title: 'pick', type: 'object', properties: { color: { type: 'string', enum: ['red', 'green'] },
  ok: { type: 'boolean' } }, required: ['color', 'ok'], additionalProperties: false };
const structured = await new ChatOpenAI({ model, apiKey, temperature: 0, maxTokens: 600, maxRetries: 0,
                                          configuration: { baseURL: `${url}/v1` } })
  .withStructuredOutput(pick, { method: 'jsonSchema' }).invoke([new HumanMessage('Pick one')]);
check(['red', 'green'].includes(structured.color) && typeof structured.ok === 'boolean',
      `withStructuredOutput holds its schema: ${JSON.stringify(structured)}`);

try {
  await new ChatOpenAI({ model, apiKey: 'wrong', maxRetries: 0, configuration: { baseURL: `${url}/v1` } })
    .invoke([new HumanMessage('Hi')]);
  check(false, 'a wrong key is refused');
} catch (e) {
  check(e.status === 401 || /401/.test(String(e.message)), `a wrong key is refused: ${e.status ?? e.message}`);
}
