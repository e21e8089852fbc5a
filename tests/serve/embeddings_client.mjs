// embeddings_client.mjs URL MODEL EXPECT - the official openai client and
// LangChain's OpenAIEmbeddings, each with its default settings (the openai
// client asks for base64), against qrun serve's /v1/embeddings. EXPECT is
// the vector curl got for the same text as floats: the expectation.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';

const [url, model, expectFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectFile, 'utf8'));

function check(ok, what) {
  if (!ok) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}
const same = (a, b) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= 1e-7);

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const res = await client.embeddings.create({ model, input: ['Hello, world!', 'Another text'] });
check(res.data.length === 2 && res.data[0].index === 0 && same(res.data[0].embedding, want) &&
      !same(res.data[1].embedding, want) && res.usage.prompt_tokens > 0,
      `openai: embeddings.create gives curl's vector (${res.data[0].embedding.length} values)`);

const lc = new OpenAIEmbeddings({ model, apiKey: 'none', maxRetries: 0, configuration: { baseURL: `${url}/v1` } });
const q = await lc.embedQuery('Hello, world!');
const docs = await lc.embedDocuments(['Hello, world!', 'Another text', 'A third']);
check(same(q, want) && docs.length === 3 && same(docs[0], want) && same(docs[1], res.data[1].embedding),
      'LangChain: embedQuery and embedDocuments give the same vectors');
