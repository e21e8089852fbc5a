// responses_client.mjs URL MODEL API_KEY EXPECT_DIR - the official OpenAI
// client (npm package openai, tests/serve/package.json) against qrun
// serve's POST /v1/responses: a response, the same streamed, a function
// call and its output answered, structured output, and a conversation
// continued with previous_response_id. EXPECT_DIR/chat.txt holds qrun's
// own greedy reply to the chat "Hi" (qrun --chat -p Hi -n 8, with its
// final newline), the independent expectation; the other replies are
// compared with Chat Completions replies to the same conversations.
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

const chatOf = async (messages, extra = {}) =>
  (await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, ...extra })).choices[0].message;

// a response: its text is qrun's reply to the same chat
const resp = await client.responses.create({ model, input: 'Hi', max_output_tokens: 8, temperature: 0 });
check(resp.output_text === want('chat.txt'), `a response equals qrun --chat: ${JSON.stringify(resp.output_text)}`);
check(resp.object === 'response' && resp.id.startsWith('resp_') && resp.status === 'incomplete' &&
      resp.incomplete_details?.reason === 'max_output_tokens' && resp.output.length === 1 &&
      resp.output[0].type === 'message' && resp.output[0].role === 'assistant',
      `a response: object, status, one message (${resp.status})`);
check(resp.usage.output_tokens === 8 && resp.usage.total_tokens === resp.usage.input_tokens + 8,
      `a response: usage ${JSON.stringify(resp.usage)}`);
const asItems = await client.responses.create({ model, max_output_tokens: 8, temperature: 0,
  input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }] });
check(asItems.output_text === resp.output_text, 'input as items is the same conversation');

// instructions are the system message
const withSystem = await client.responses.create({ model, input: 'Hi', instructions: 'Be brief.', max_output_tokens: 8,
                                                   temperature: 0 });
const systemChat = await chatOf([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }]);
check(withSystem.output_text === systemChat.content, 'instructions are the system message');

// streamed: the events in the order OpenAI sends them, the same text
const stream = client.responses.stream({ model, input: 'Hi', max_output_tokens: 8, temperature: 0 });
const types = [];
let deltas = '', seq = -1, ordered = true;
for await (const event of stream) {
  types.push(event.type);
  ordered = ordered && event.sequence_number === seq + 1;
  seq = event.sequence_number;
  if (event.type === 'response.output_text.delta') deltas += event.delta;
}
const final = await stream.finalResponse();
const distinct = types.filter((t, i) => t !== types[i - 1]);
check(JSON.stringify(distinct) === JSON.stringify(['response.created', 'response.in_progress', 'response.output_item.added',
  'response.content_part.added', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
  'response.output_item.done', 'response.incomplete']), `the events in order: ${distinct.join(' ')}`);
check(ordered, 'sequence numbers count from 0 by 1');
check(deltas === want('chat.txt') && final.output_text === deltas && final.usage.output_tokens === 8,
      `the streamed text equals the response's (${types.length} events)`);

// a forced function call, then its output answered
const tools = [{ type: 'function', name: 'get_weather', description: 'The weather of a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } }, required: ['city'],
                additionalProperties: false } }];
const ask = [{ role: 'user', content: 'Weather in Paris?' }];
const called = await client.responses.create({ model, input: ask, tools, max_output_tokens: 600, temperature: 0,
  tool_choice: { type: 'function', name: 'get_weather' } });
const call = called.output.find((o) => o.type === 'function_call');
check(called.status === 'completed' && call?.name === 'get_weather' && call.call_id &&
      ['Paris', 'Oslo'].includes(JSON.parse(call.arguments).city), `a forced call: ${JSON.stringify(call)}`);
const answered = await client.responses.create({ model, tools, max_output_tokens: 8, temperature: 0,
  input: [...ask, ...called.output, { type: 'function_call_output', call_id: call.call_id, output: '18 C, sunny' }] });
const chatTools = tools.map(({ type, ...fn }) => ({ type, function: fn }));
const answeredChat = await chatOf([...ask,
  { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function',
    function: { name: call.name, arguments: call.arguments } }] },
  { role: 'tool', tool_call_id: call.call_id, content: '18 C, sunny' }], { tools: chatTools });
check(answered.output_text === answeredChat.content, `the call's output answered as the chat answers it: ${
  JSON.stringify(answered.output_text)}`);
// the same call streamed: a function_call item whose argument deltas make its arguments
const callStream = client.responses.stream({ model, input: ask, tools, max_output_tokens: 600, temperature: 0,
  tool_choice: 'required' });
let args = '';
for await (const event of callStream)
  if (event.type === 'response.function_call_arguments.delta') args += event.delta;
const streamedCall = (await callStream.finalResponse()).output.find((o) => o.type === 'function_call');
check(streamedCall?.name === 'get_weather' && streamedCall.arguments === args &&
      ['Paris', 'Oslo'].includes(JSON.parse(args).city), `a streamed call: ${args}`);

// structured output: the text parses and holds the schema
const pick = { type: 'object', properties: { color: { enum: ['red', 'green'] }, ok: { type: 'boolean' } },
  required: ['color', 'ok'], additionalProperties: false };
const structured = await client.responses.create({ model, input: 'Hi', max_output_tokens: 600, temperature: 0,
  text: { format: { type: 'json_schema', name: 'pick', strict: true, schema: pick } } });
const picked = JSON.parse(structured.output_text);
check(['red', 'green'].includes(picked.color) && typeof picked.ok === 'boolean' && Object.keys(picked).length === 2 &&
      structured.status === 'completed' && structured.text.format.type === 'json_schema',
      `text.format holds its schema: ${JSON.stringify(picked)}`);

// previous_response_id: the stored conversation goes on as the whole history sent again
const first = await client.responses.create({ model, input: 'Hi', max_output_tokens: 8, temperature: 0,
                                              instructions: 'Be brief.' });
const next = await client.responses.create({ model, input: 'And then?', previous_response_id: first.id,
                                             max_output_tokens: 8, temperature: 0 });
const whole = await client.responses.create({ model, max_output_tokens: 8, temperature: 0,
  input: [{ role: 'user', content: 'Hi' }, ...first.output, { role: 'user', content: 'And then?' }] });
check(next.output_text === whole.output_text && next.previous_response_id === first.id,
      `previous_response_id continues as the whole history (instructions not carried): ${JSON.stringify(next.output_text)}`);
const notKept = await client.responses.create({ model, input: 'Hi', max_output_tokens: 2, temperature: 0, store: false });
try {
  await client.responses.create({ model, input: 'Hi', previous_response_id: notKept.id, max_output_tokens: 2 });
  check(false, 'a response with store false is not kept');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.message.includes(notKept.id), `store false is not kept: ${e.status}`);
}
