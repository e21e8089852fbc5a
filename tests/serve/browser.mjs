// browser.mjs URL SMALL_URL WANT_HI WANT_SYSTEM SHOTS - the chat page of qrun
// serve in headless Chromium (Debian's, driven by playwright-core). URL is
// a server with the default context, SMALL_URL one with 192 positions.
// WANT_HI is qrun's greedy reply to "Hi" (qrun --chat -p Hi -n 24, with its
// final newline), WANT_SYSTEM the same under the system prompt "Be brief.".
// Screenshots go to the folder SHOTS. CHROMIUM names the browser (default
// /usr/bin/chromium). What is checked, in order: the page loads, names the
// model and shows its defaults; a reply streams in and equals qrun's; Stop
// ends a reply and the server's session; New chat during a reply cancels it
// and nothing of it leaks into the next conversation; the system prompt is
// sent; Stop while the page measures the prompt leaves the turn out, with
// no error; Markdown and the thinking render (a reply written by hand, served to
// the page in place of the server's); the conversation is trimmed to fit
// the small context, the fewest turns left out, with a note.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [url, smallUrl, wantHiFile, wantSystemFile, shots] = process.argv.slice(2);
const wantHi = readFileSync(wantHiFile, 'utf8').replace(/\n$/, '');
const wantSystem = readFileSync(wantSystemFile, 'utf8').replace(/\n$/, '');

function check(ok, what) {
  if (!ok) {
    console.error(`FAIL: ${what}`);
    process.exitCode = 1;
    throw new Error(what);
  }
  console.log(`ok ${what}`);
}

async function api(base, path, body) {
  const r = await fetch(base + path, body === undefined ? {}
    : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

// the prompt's tokens, counted by the server itself
async function promptTokens(base, messages) {
  const t = await api(base, '/apply-template', { messages });
  return (await api(base, '/tokenize', { content: t.prompt })).tokens.length;
}

// true once no session of the server is busy (within 5 s)
async function idle(base) {
  for (let i = 0; i < 50; i++) {
    if ((await api(base, '/slots')).every((s) => !s.is_processing)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

const profile = mkdtempSync(join(tmpdir(), 'qp-serve-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  timeout: 60000,
  viewport: { width: 900, height: 700 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
try {
  const page = browser.pages()[0] ?? await browser.newPage();
  const elsewhere = [], errors = [], sent = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(url) && !r.url().startsWith(smallUrl)) elsewhere.push(r.url());
    if (r.method() === 'POST' && r.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(r.postData()));
  });
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error' && !/aborted|Failed to load resource/i.test(m.text())) errors.push(m.text()); });
  const lastReply = '.msg.assistant >> nth=-1';
  const source = () => page.evaluate(() => {
    const c = [...document.querySelectorAll('.msg.assistant .content')].pop();
    return c ? c.dataset.source || '' : '';
  });
  const send = async (text) => {
    await page.fill('#input', text);
    await page.press('#input', 'Enter');
  };
  // the turn ends (Send is back), in a finished reply: not in a note or an error
  const done = async () => {
    await page.waitForSelector('#stop', { state: 'hidden', timeout: 60000 });
    const last = await page.evaluate(() => {
      const m = document.getElementById('messages').lastElementChild;
      return m && { cls: m.className, done: m.dataset.done, text: m.textContent };
    });
    if (!(last && last.cls === 'msg assistant' && last.done === 'true'))
      check(false, `the turn ends in a finished reply, not in ${JSON.stringify(last)}`);
  };
  // the N-th message of the page is a reply that has begun to stream in
  const streaming = (n) => page.waitForFunction((n) => {
    const m = document.querySelectorAll('#messages > .msg');
    return m.length === n && m[n - 1].matches('.assistant') && (m[n - 1].querySelector('.content').dataset.source || '').length > 0;
  }, n, { timeout: 30000 });

  // loads, names the model, shows the model's defaults
  await page.goto(`${url}/`, { timeout: 30000 });
  check(await page.title() === 'qpack chat', 'the page loads');
  await page.waitForFunction(() => document.getElementById('context').textContent !== '', null, { timeout: 30000 });
  const props = await api(url, '/props');
  check(await page.textContent('#model') === 'M', 'the page names the model from /v1/models');
  await page.click('#toggle-settings');
  check(await page.getAttribute('#temperature', 'placeholder') === String(props.default_generation_settings.params.temperature) &&
        await page.getAttribute('#top-k', 'placeholder') === String(props.default_generation_settings.params.top_k),
        "the sampling fields show the model's defaults from /props");

  // a reply streams in and equals qrun's
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '24');
  await page.evaluate(() => {
    window.seen = [];
    new MutationObserver(() => {
      const c = document.querySelector('.msg.assistant .content');
      if (c) window.seen.push(c.dataset.source || '');
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, attributes: true });
  });
  await send('Hi');
  await done();
  const seen = await page.evaluate(() => [...new Set(window.seen)].filter((s) => s.length));
  check(await page.textContent('.msg.user') === 'Hi', 'the message typed is shown');
  check(await source() === wantHi, `the reply equals qrun --chat: ${JSON.stringify(await source())}`);
  check(seen.length >= 2 && seen.every((s) => wantHi.startsWith(s)),
        `the reply streamed in (${seen.length} partial texts, each a start of the reply)`);
  const stats = await page.textContent(`${lastReply} >> .stats`);
  check(/^24 tokens · \d+\.\d tokens\/s · cut: max tokens reached$/.test(stats), `the reply's numbers: ${stats}`);
  const first = sent[0];
  check(JSON.stringify(first.messages) === '[{"role":"user","content":"Hi"}]' && first.temperature === 0 &&
        first.max_tokens === 24 && !('top_p' in first) && !('top_k' in first),
        'the request carries what was set, and leaves the rest to the model');
  await page.screenshot({ path: join(shots, 'chat.png') });

  // Stop: the reply ends where it is, the server's session is freed
  await page.fill('#max-tokens', '');
  // the prompt is measured late, as on a busy machine: Stop must wait for
  // this turn's reply, not take the last one's text for it
  await page.route('**/apply-template', async (route) => {
    await new Promise((r) => setTimeout(r, 500));
    await route.continue();
  });
  await send('Tell me a story');
  await streaming(4);
  await page.click('#stop');
  await done();
  await page.unroute('**/apply-template');
  const kept = (await source()).length;
  check(kept > 0 && (await page.textContent(`${lastReply} >> .stats`)).endsWith('stopped'),
        `Stop ends the reply where it is (${kept} characters kept), marked stopped`);
  check(await page.isVisible('#send') && !(await page.isVisible('#stop')), 'Send is back');
  check(await idle(url), "the server's session is free after Stop");

  // New chat during a reply: cancelled, and nothing of it leaks
  await send('Another story');
  await streaming(6);
  await page.click('#clear');
  check(await idle(url), 'New chat cancels the running reply on the server');
  await page.waitForTimeout(300);
  check(await page.locator('#messages > *').count() === 0, 'New chat empties the page, and no late reply appears');
  await page.fill('#max-tokens', '24');
  const before = sent.length;
  await send('Hi');
  await done();
  check(JSON.stringify(sent[before].messages) === '[{"role":"user","content":"Hi"}]',
        'the new conversation starts afresh');
  check(await source() === wantHi, 'and its reply equals qrun --chat again');

  // the system prompt
  await page.click('#clear');
  await page.fill('#system', 'Be brief.');
  await send('Hi');
  await done();
  check(JSON.stringify(sent[sent.length - 1].messages) ===
        '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]', 'the system prompt is sent first');
  check(await source() === wantSystem, 'the reply equals qrun --chat --system');
  await page.fill('#system', '');

  // Stop while the page measures the prompt: its /tokenize answers, but the
  // body stalls (a server of this script's own), so the abort cuts a body
  // being read; the turn is left out and marked stopped, no error
  const stall = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.write('{"tokens": [');
  });
  await new Promise((r) => stall.listen(0, '127.0.0.1', r));
  await page.route('**/tokenize', (route) => route.continue({ url: `http://127.0.0.1:${stall.address().port}/tokenize` }));
  const measuring = page.waitForEvent('response', (r) => r.url().endsWith('/tokenize'), { timeout: 30000 });
  await send('A story stopped early');
  await measuring;
  await page.click('#stop');
  await page.waitForSelector('#stop', { state: 'hidden', timeout: 30000 });
  const tail = await page.evaluate(() => [...document.querySelectorAll('#messages > *')].slice(-2)
    .map((m) => `${m.className}: ${m.textContent}`));
  check(JSON.stringify(tail) === '["msg user left-out: A story stopped early","msg note: stopped"]',
        `Stop while the prompt is measured leaves the turn out, marked stopped: ${JSON.stringify(tail)}`);
  await page.unroute('**/tokenize');
  stall.closeAllConnections();
  stall.close();

  // Markdown and thinking, on a reply written by hand
  const answer = '# Title\n\nSome **bold**, *slanted* and `code`.\n\n```c\nint x = 1 < 2;\n```\n\n- one\n- two\n\n' +
                 '<img src=x onerror=alert(1)> [a link](https://example.org/x)';
  const events = [{ delta: { role: 'assistant', content: '' } }, { delta: { reasoning_content: 'Let me ' } },
                  { delta: { reasoning_content: 'think.' } }, ...answer.match(/[\s\S]{1,7}/g).map((c) => ({ delta: { content: c } })),
                  { delta: {}, finish_reason: 'stop', timings: { predicted_n: 42, predicted_per_second: 12.5 } }]
    .map((c) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, ...c }], timings: c.timings })}\n\n`);
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: events.join('') + 'data: [DONE]\n\n' }));
  await page.click('#clear');
  await page.check('#think');
  await send('Show me Markdown');
  await done();
  const md = await page.evaluate(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop(), q = (s) => m.querySelector(s);
    return { h: q('.content h3')?.textContent, strong: q('.content strong')?.textContent, em: q('.content em')?.textContent,
             code: q('.content p code')?.textContent, pre: q('.content pre code')?.textContent,
             lang: q('.content pre code')?.className, items: [...m.querySelectorAll('.content li')].map((l) => l.textContent),
             img: m.querySelectorAll('img').length, text: q('.content').textContent,
             link: q('.content a')?.getAttribute('href'), thinkOpen: q('details.thinking')?.open,
             summary: q('details.thinking summary')?.textContent, reasoning: q('details.thinking .reasoning')?.textContent,
             stats: q('.stats').textContent };
  });
  check(md.h === 'Title' && md.strong === 'bold' && md.em === 'slanted' && md.code === 'code', 'Markdown: heading, bold, italic, code');
  check(md.pre === 'int x = 1 < 2;' && md.lang === 'language-c', 'Markdown: a fenced code block');
  check(JSON.stringify(md.items) === '["one","two"]', 'Markdown: a list');
  check(md.img === 0 && md.text.includes('<img src=x onerror=alert(1)>'), 'HTML in a reply is shown as text');
  check(md.link === 'https://example.org/x', 'Markdown: a link');
  check(md.thinkOpen === false && md.summary === 'Thoughts' && md.reasoning === 'Let me think.',
        'the thinking is apart, collapsed once the answer came');
  check(md.stats === '42 tokens · 12.5 tokens/s', `the numbers from the timings: ${md.stats}`);
  check(sent[sent.length - 1].chat_template_kwargs.enable_thinking === true, 'thinking on is sent');
  await page.locator('details.thinking').click();
  await page.screenshot({ path: join(shots, 'markdown.png') });
  await page.unroute('**/v1/chat/completions');
  await page.uncheck('#think');

  // trimming, on the server with 192 positions: each request is the
  // longest suffix of the conversation that fits with 24 tokens of room
  await page.goto(`${smallUrl}/`, { timeout: 30000 });
  await page.waitForFunction(() => document.getElementById('context').textContent === '192 positions', null, { timeout: 30000 });
  await page.click('#toggle-settings');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '24');
  const conv = [];
  let trimmed = 0;
  for (let turn = 0; turn < 6; turn++) {
    const text = `Tell me about dragons, part ${turn + 1} of the story`;
    const at = sent.length;
    await send(text);
    await done();
    conv.push({ role: 'user', content: text });
    const body = sent[at].messages, n = body.length;
    check(JSON.stringify(body) === JSON.stringify(conv.slice(conv.length - n)), `turn ${turn + 1}: a suffix of the conversation (${n} of ${conv.length})`);
    check((await promptTokens(smallUrl, body)) + 24 <= 192, `turn ${turn + 1}: it fits`);
    if (n < conv.length) {
      trimmed++;
      check((await promptTokens(smallUrl, conv.slice(conv.length - n - 2))) + 24 > 192, `turn ${turn + 1}: one turn more would not`);
    }
    conv.push({ role: 'assistant', content: await source() });
  }
  check(trimmed > 0, `${trimmed} of 6 turns were trimmed`);
  const faded = await page.evaluate(() => [...document.querySelectorAll('.msg.user, .msg.assistant')]
    .map((m) => m.classList.contains('left-out')));
  // the last request sent all but the turns left out and the last reply
  const leftOut = conv.length - 1 - sent[sent.length - 1].messages.length;
  check(JSON.stringify(faded) === JSON.stringify(conv.map((_, i) => i < leftOut)),
        `the turns left out are faded (${faded.filter(Boolean).length})`);
  const note = await page.textContent('.note');
  check(/earlier messages? (is|are) left out to fit the context of 192 positions$/.test(note), `the note: ${note}`);
  await page.screenshot({ path: join(shots, 'trimmed.png') });

  check(await page.locator('.msg.error').count() === 0 && errors.length === 0, `no error: ${errors.join('; ')}`);
  check(elsewhere.length === 0, `no request left the servers: ${elsewhere.join(' ')}`);
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
