// anthropic_client.mjs URL MODEL API_KEY EXPECT_DIR - Anthropic's own client
// (npm package @anthropic-ai/sdk, tests/serve/package.json) against qrun
// serve's Messages API: a message, the same message streamed (as raw
// events and through the client's stream helper), a system prompt, a stop
// sequence, a forced tool call and the turn that answers its result,
// count_tokens, and a refused request the client must see as its
// BadRequestError. EXPECT_DIR holds qrun's own greedy texts, the
// independent expectation: chat.txt (qrun --chat -p Hi -n 8) and
// system.txt (qrun --chat --system "Be brief." -p Hi -n 8). The prompts of
// the tool turns and of count_tokens are the OpenAI side's, from
// /apply-template, whose template the tools case checks against Qwen3's.
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';

const [url, model, apiKey, dir] = process.argv.slice(2);
const client = new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 60000 });
const want = (name) => readFileSync(`${dir}/${name}`, 'utf8').replace(/\n$/, '');

function check(ok, what) {
  if (!ok) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

async function post(path, body) {
  const r = await fetch(`${url}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json',
    Authorization: `Bearer ${apiKey}` }, body: JSON.stringify(body) });
  return r.json();
}

// the tokens of an OpenAI chat's rendered prompt, and its greedy continuation
async function rendered(body) {
  const { prompt } = await post('/apply-template', body);
  const { tokens } = await post('/tokenize', { content: prompt });
  return { prompt, tokens: tokens.length };
}

const hi = [{ role: 'user', content: 'Hi' }];
const msg = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: hi });
const text = msg.content.map((b) => b.text).join('');
check(text === want('chat.txt'), `message equals qrun --chat: ${JSON.stringify(text)}`);
check(msg.type === 'message' && msg.role === 'assistant' && msg.id.startsWith('msg_') &&
      msg.content.length === 1 && msg.content[0].type === 'text', 'message: type, role, id, one text block');
const hiTokens = (await rendered({ messages: hi })).tokens;
check(msg.stop_reason === 'max_tokens' && msg.stop_sequence === null && msg.usage.output_tokens === 8 &&
      msg.usage.input_tokens === hiTokens, `message: stop_reason and usage ${JSON.stringify(msg.usage)}`);

// streamed: Anthropic's event sequence, its text the message's
const types = [];
let streamed = '', delta = null;
for await (const ev of await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: hi,
                                                       stream: true })) {
  if (types[types.length - 1] !== ev.type || ev.type !== 'content_block_delta') types.push(ev.type);
  if (ev.type === 'content_block_delta') streamed += ev.delta.text;
  if (ev.type === 'message_delta') delta = ev;
}
check(types.join(' ') === 'message_start content_block_start content_block_delta content_block_stop message_delta ' +
      'message_stop', `stream events: ${types.join(' ')}`);
check(streamed === text && delta.delta.stop_reason === 'max_tokens' && delta.usage.output_tokens === 8,
      'stream: the text deltas make the message, stop_reason and usage');
const helper = client.messages.stream({ model, max_tokens: 8, temperature: 0, messages: hi });
let helped = '';
helper.on('text', (t) => { helped += t; });
const final = await helper.finalMessage();
check(helped === text && final.content[0].text === text && final.stop_reason === 'max_tokens',
      'the client\'s stream helper: its text and final message');

// a system prompt, as a string and as text blocks
const sys = await client.messages.create({ model, max_tokens: 8, temperature: 0, system: 'Be brief.', messages: hi });
check(sys.content[0].text === want('system.txt'), `system equals qrun --chat --system: ${JSON.stringify(sys.content[0].text)}`);
const sysBlocks = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: hi,
  system: [{ type: 'text', text: 'Be ' }, { type: 'text', text: 'brief.', cache_control: { type: 'ephemeral' } }] });
check(sysBlocks.content[0].text === want('system.txt'), 'system as text blocks (cache_control ignored)');

// a stop sequence inside the greedy reply: the text before it
const stop = text.slice(1, 3);
const stopped = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: hi,
                                               stop_sequences: ['never there', stop] });
check(stopped.stop_reason === 'stop_sequence' && stopped.stop_sequence === stop &&
      (stopped.content[0]?.text ?? '') === text.slice(0, text.indexOf(stop)),
      `stop_sequences: ${JSON.stringify(stopped.stop_sequence)}, ${JSON.stringify(stopped.content)}`);

// a forced call: a tool_use block whose input holds the schema (the city
// an enum: the random model's free strings run on)
const tools = [{ name: 'get_weather', description: 'The weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } }, required: ['city'] } }];
const ask = [{ role: 'user', content: 'Weather in Paris?' }];
const called = await client.messages.create({ model, max_tokens: 600, temperature: 0, messages: ask, tools,
                                              tool_choice: { type: 'tool', name: 'get_weather' } });
const use = called.content.find((b) => b.type === 'tool_use');
check(called.stop_reason === 'tool_use' && use?.name === 'get_weather' && use.id.startsWith('toolu_') &&
      ['Paris', 'Oslo'].includes(use.input.city) && Object.keys(use.input).length === 1,
      `a forced tool call: ${JSON.stringify(use)}`);
let json = '', started = null;
for await (const ev of await client.messages.create({ model, max_tokens: 600, temperature: 0, messages: ask, tools,
                                                       tool_choice: { type: 'any' }, stream: true })) {
  if (ev.type === 'content_block_start' && ev.content_block.type === 'tool_use') started = ev.content_block;
  if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') json += ev.delta.partial_json;
}
check(started?.name === 'get_weather' && ['Paris', 'Oslo'].includes(JSON.parse(json).city),
      `streamed, tool_choice any: a tool_use block and its input_json_delta ${json}`);

// the result answered: the reply continues the prompt the OpenAI side
// renders for the same conversation
const result = '18 C, sunny';
const turns = [...ask, { role: 'assistant', content: called.content },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: result }] }];
const answer = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: turns, tools });
const openaiTools = tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description,
                                                                          parameters: t.input_schema } }));
const history = [...ask, { role: 'assistant', content: null,
  tool_calls: [{ id: use.id, type: 'function', function: { name: use.name, arguments: use.input } }] },
{ role: 'tool', tool_call_id: use.id, content: result }];
const prompt = await rendered({ messages: history, tools: openaiTools });
check(prompt.prompt.includes('<tool_response>\n18 C, sunny\n</tool_response>'), 'the tool result is in the prompt');
const cont = await post('/v1/completions', { prompt: prompt.prompt, max_tokens: 8, temperature: 0 });
check(answer.content.map((b) => b.text ?? '').join('') === cont.choices[0].text &&
      answer.usage.input_tokens === prompt.tokens, `the tool_result turn answered: ${JSON.stringify(answer.content)}`);

// count_tokens: the rendered prompt's tokens
const counted = await client.messages.countTokens({ model, messages: turns, tools });
check(counted.input_tokens === prompt.tokens, `count_tokens with tools: ${counted.input_tokens}`);
const countedHi = await client.messages.countTokens({ model, messages: hi });
check(countedHi.input_tokens === hiTokens, `count_tokens: ${countedHi.input_tokens}`);

// thinking on: the prompt and the greedy reply of the OpenAI side's chat
// with enable_thinking (a <think> block, if the model writes one, as the
// thinking block and reasoning_content alike). Anthropic wants max_tokens
// above the budget's 1024: both replies stop at a stop string taken from
// the prompt's first 8 greedy tokens, within them
const thinking = { type: 'enabled', budget_tokens: 1024 };
const thinkPrompt = (await post('/apply-template', { messages: hi, chat_template_kwargs: { enable_thinking: true } })).prompt;
const thinkTokens = (await post('/tokenize', { content: thinkPrompt })).tokens.length;
const countedThink = await client.messages.countTokens({ model, messages: hi, thinking });
check(countedThink.input_tokens === thinkTokens && thinkTokens !== hiTokens,
      `count_tokens with thinking: ${thinkTokens} (${hiTokens} without)`);
const raw = (await post('/v1/completions', { prompt: thinkPrompt, max_tokens: 8, temperature: 0 })).choices[0].text;
const cut = Array.from(raw).slice(-2).join('');
const thought = await client.messages.create({ model, max_tokens: 1025, temperature: 0, messages: hi, thinking,
                                               stop_sequences: [cut] });
const openaiThought = await post('/v1/chat/completions', { messages: hi, max_tokens: 1025, temperature: 0, stop: [cut],
  chat_template_kwargs: { enable_thinking: true } });
const om = openaiThought.choices[0].message;
const blockText = (type, key) => thought.content.filter((b) => b.type === type).map((b) => b[key]).join('');
check(cut.length > 0 && blockText('thinking', 'thinking') === (om.reasoning_content ?? '') &&
      blockText('text', 'text') === om.content && thought.usage.input_tokens === thinkTokens &&
      thought.stop_reason === 'stop_sequence' && thought.stop_sequence === cut &&
      openaiThought.choices[0].finish_reason === 'stop',
      `thinking on: the reply is the OpenAI side's (stopped at ${JSON.stringify(cut)} after ${thought.usage.output_tokens} tokens)`);

// a refusal: Anthropic's error shape, which the client reads as its own
try {
  await client.messages.create({ model, messages: hi });
  check(false, 'a request without max_tokens is refused');
} catch (e) {
  check(e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.type === 'error' &&
        e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message),
        `without max_tokens: ${e.message}`);
}
