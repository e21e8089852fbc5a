// crowded.mjs URL MAX_CONNECTIONS: a crowd past --max-connections cannot
// deny service.
//
// Against a server started with --max-connections MAX_CONNECTIONS (well
// under 1000) and a --timeout longer than this test: 500 connections that
// send nothing and 500 that trickle a request head a byte every 400 ms,
// from loopback addresses of their own, each opened again a second after
// the server closes it. While the crowd presses, every request from
// 127.0.0.2 is answered; the server holds no more connections than its
// limit allows (and 64 being closed), and it made room by closing crowd
// connections, not by refusing new ones. Bounded: about 10 s.
import net from 'node:net';
import http from 'node:http';

const url = new URL(process.argv[2]);
const port = Number(url.port);
const LIMIT = Number(process.argv[3]);
const fail = (m) => { console.error(`FAIL: ${m}`); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let pressing = true;

// one member of the crowd from localAddress: connected again a second
// after each close while the crowd presses; slow ones trickle a head
const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(200);
function member(localAddress, slow) {
  const m = { opened: 0, closed: 0, s: null, at: 0 };
  const connect = () => {
    m.at = 0;
    m.s = net.connect({ host: '127.0.0.1', port, localAddress });
    m.opened++;
    m.s.on('error', () => {});
    m.s.on('close', () => {
      m.closed++;
      if (pressing) setTimeout(connect, 1000);
    });
  };
  connect();
  m.slow = slow;
  return m;
}

const crowd = [];
for (let a = 0; a < 5; a++)
  for (let i = 0; i < 100; i++) crowd.push(member(`127.0.0.${11 + a}`, false));
for (let a = 0; a < 5; a++)
  for (let i = 0; i < 100; i++) crowd.push(member(`127.0.0.${16 + a}`, true));
const trickle = setInterval(() => {
  for (const m of crowd)
    if (m.slow && m.s && !m.s.destroyed && !m.s.connecting) m.s.write(head[m.at++ % head.length]);
}, 400);

// one request from 127.0.0.2: [status, body], or an error's message
function request(method, path, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, localAddress: '127.0.0.2',
      headers: body ? { 'Content-Type': 'application/json' } : {}, timeout: 5000, agent: false }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve([res.statusCode, data]));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', (e) => resolve([0, e.message]));
    req.end(body);
  });
}

const metric = async (name) => {
  const [, text] = await request('GET', '/metrics');
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.split(' ')[1]) : NaN;
};

// the crowd's first 1000 in, and some closed and back
await sleep(3000);
const opened = crowd.reduce((n, m) => n + m.opened, 0);
if (opened < 1000) fail(`only ${opened} of the crowd's 1000 connections were opened`);

// served while the crowd presses: every request, one after the other
let answered = 0, most = 0;
for (let k = 0; k < 8; k++) {
  const [hs, hb] = await request('GET', '/health');
  if (hs !== 200 || !hb.includes('ok')) fail(`GET /health #${k + 1} with 1000 crowding ${LIMIT} places: ${hs} ${hb}`);
  const [cs, cb] = await request('POST', '/v1/completions', JSON.stringify({ prompt: 'Hello', max_tokens: 2 }));
  if (cs !== 200 || !JSON.parse(cb).choices) fail(`POST /v1/completions #${k + 1} in the crowd: ${cs} ${cb}`);
  const held = await metric('qpack_http_connections');
  most = Math.max(most, held);
  answered += 2;
  await sleep(500);
}
const reopened = crowd.reduce((n, m) => n + m.closed, 0);
const crowdedOut = await metric('qpack_http_crowded_out_total');
pressing = false;
clearInterval(trickle);
for (const m of crowd) m.s.destroy();

// past the limit, the ones being closed for new ones (SERVE_SPARE_CONNECTIONS)
if (!(most <= LIMIT + 64)) fail(`qpack_http_connections reached ${most}, over the limit of ${LIMIT} and 64 closing`);
if (!(crowdedOut >= 1000 - LIMIT))
  fail(`qpack_http_crowded_out_total is ${crowdedOut}, expected ${1000 - LIMIT} or more`);
console.log(`ok: ${answered} requests answered while 1000 crowded ${LIMIT} places (${reopened} closed and ` +
            `opened again, ${crowdedOut} crowded out, at most ${most} held)`);
process.exit(0);
