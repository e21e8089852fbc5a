// browser.mjs URL EXPECT_FILE SCREENSHOT - the chat page of qrun serve in
// headless Chromium (Debian's, driven by playwright-core): the page loads
// with no request leaving the server, a message typed into it and sent with
// Enter gets a reply that streams into the page (several distinct partial
// texts seen in the DOM) and ends equal to qrun's greedy reply to the same
// message (EXPECT_FILE: qrun --chat -p Hi -n 24, with its final newline).
// CHROMIUM names the browser (default /usr/bin/chromium).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [url, expectFile, screenshot] = process.argv.slice(2);
const want = readFileSync(expectFile, 'utf8').replace(/\n$/, '');

function check(ok, what) {
  if (!ok) {
    console.error(`FAIL: ${what}`);
    process.exitCode = 1;
    throw new Error(what);
  }
  console.log(`ok ${what}`);
}

const profile = mkdtempSync(join(tmpdir(), 'qp-serve-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  timeout: 60000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
try {
  const page = browser.pages()[0] ?? await browser.newPage();
  const elsewhere = [], errors = [];
  page.on('request', (r) => { if (!r.url().startsWith(url)) elsewhere.push(r.url()); });
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(`${url}/`, { timeout: 30000 });
  check(await page.title() === 'qpack chat', 'the page loads');
  await page.waitForFunction(() => document.getElementById('model').textContent === 'M', null, { timeout: 30000 });
  check(true, 'the page names the model from /v1/models');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '24');
  // every text the reply shows on its way
  await page.evaluate(() => {
    window.seen = [];
    new MutationObserver(() => {
      const reply = document.querySelector('.msg.assistant');
      if (reply) window.seen.push(reply.textContent);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  await page.fill('#input', 'Hi');
  await page.press('#input', 'Enter');
  await page.waitForSelector('.msg.assistant[data-done="true"]', { timeout: 60000 });
  const reply = await page.textContent('.msg.assistant');
  const seen = await page.evaluate(() => [...new Set(window.seen)].filter((s) => s.length));
  check(await page.textContent('.msg.user') === 'Hi', 'the message typed is shown');
  check(reply === want, `the reply equals qrun --chat: ${JSON.stringify(reply)}`);
  check(seen.length >= 2 && seen.every((s) => want.startsWith(s)),
        `the reply streamed in (${seen.length} partial texts, each a start of the reply)`);
  check(await page.locator('.msg.error').count() === 0 && errors.length === 0, `no error: ${errors.join('; ')}`);
  check(elsewhere.length === 0, `no request left the server: ${elsewhere.join(' ')}`);
  if (screenshot) await page.screenshot({ path: screenshot });
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
