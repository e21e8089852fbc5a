// hostile.mjs URL: slow and idle clients cannot deny service.
//
// Against a server started with --timeout 6 --max-per-ip 150, from
// loopback addresses of their own: 500 connections that send nothing and
// 500 that trickle a request head a byte every 400 ms. While they are all
// held, requests from 127.0.0.2 are answered; a 151st connection from one
// address is refused; and within the timeout (plus the watcher's sweep)
// every slow connection is closed although it keeps sending, and so is
// every idle one. Bounded: about 10 s.
import net from 'node:net';
import http from 'node:http';

const url = new URL(process.argv[2]);
const port = Number(url.port);
const TIMEOUT_S = 6, PER_IP = 150;
const fail = (m) => { console.error(`FAIL: ${m}`); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// a connection from localAddress; resolves once connected, with its state
function open(localAddress) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress });
    const c = { s, closedAt: 0, connected: false };
    s.on('connect', () => { c.connected = true; resolve(c); });
    s.on('error', () => {});
    s.on('close', () => { c.closedAt = Date.now(); if (!c.connected) resolve(c); });
    s.setTimeout(20000, () => s.destroy());
  });
}

async function openMany(first, addresses, each) {
  const all = [];
  for (let a = 0; a < addresses; a++)
    for (let i = 0; i < each; i++)
      all.push(open(`127.0.0.${first + a}`));
  return Promise.all(all);
}

// one request from 127.0.0.2: [status, body]
function request(method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, localAddress: '127.0.0.2',
      headers: body ? { 'Content-Type': 'application/json' } : {}, timeout: 10000, agent: false }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve([res.statusCode, data]));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', reject);
    req.end(body);
  });
}

const metric = async (name) => {
  const [, text] = await request('GET', '/metrics');
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.split(' ')[1]) : NaN;
};

const t0 = Date.now();
const idle = await openMany(11, 5, 100);
const slow = await openMany(16, 5, 100);
const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(200);
let at = 0;
const trickle = setInterval(() => {
  for (const c of slow) if (!c.closedAt) c.s.write(head[at % head.length]);
  at++;
}, 400);
if (idle.some((c) => c.closedAt) || slow.some((c) => c.closedAt))
  fail('the server refused or closed some of 1000 connections from 10 addresses at once');

// served while the 1000 are held
const [hs, hb] = await request('GET', '/health');
if (hs !== 200 || !hb.includes('ok')) fail(`GET /health while 1000 connections are held: ${hs} ${hb}`);
const [cs, cb] = await request('POST', '/v1/completions', JSON.stringify({ prompt: 'Hello', max_tokens: 2 }));
if (cs !== 200 || !JSON.parse(cb).choices) fail(`POST /v1/completions while 1000 connections are held: ${cs} ${cb}`);
const held = await metric('qpack_http_connections');
if (!(held >= 1000)) fail(`qpack_http_connections is ${held} while 1000 are held`);
if (Date.now() - t0 > (TIMEOUT_S - 1) * 1000) fail('too slow to check within the timeout');

// the per-address limit
const extra = await openMany(21, 1, PER_IP + 10);
await sleep(500);
const refused = extra.filter((c) => c.closedAt).length;
if (refused < 10) fail(`${PER_IP + 10} connections from one address: ${refused} refused, expected 10 or more`);
for (const c of extra) c.s.destroy();

// every slow and idle connection closed by the deadline
const deadline = t0 + (TIMEOUT_S + 3) * 1000;
while (Date.now() < deadline && (slow.some((c) => !c.closedAt) || idle.some((c) => !c.closedAt)))
  await sleep(100);
clearInterval(trickle);
const slowOpen = slow.filter((c) => !c.closedAt).length, idleOpen = idle.filter((c) => !c.closedAt).length;
if (slowOpen) fail(`${slowOpen} trickling connections still open ${TIMEOUT_S + 3} s after they started`);
if (idleOpen) fail(`${idleOpen} idle connections still open ${TIMEOUT_S + 3} s after they started`);
const closed = await metric('qpack_http_deadline_closed_total');
if (!(closed >= 500)) fail(`qpack_http_deadline_closed_total is ${closed}, expected 500 or more`);
const [hs2] = await request('GET', '/health');
if (hs2 !== 200) fail(`GET /health after: ${hs2}`);
console.log(`ok: 1000 held and a request answered, ${refused} of ${PER_IP + 10} refused from one address, ` +
            `all closed by the deadline (${closed} counted)`);
process.exit(0);
