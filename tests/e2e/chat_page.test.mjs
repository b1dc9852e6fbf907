// The chat page of `moeflux serve` (GET /) in headless Chromium (Debian's /usr/bin/chromium, or
// $MOEFLUX_CHROMIUM) driven by playwright-core: a message typed and sent with Enter streams an
// answer into the page (seen growing), equal to what the API answers the same conversation
// greedy and not streamed; a second turn sends the whole conversation; the tok/s line counts
// the API's tokens; New chat clears it. A server with --api-key: the page asks for the key once.
// The server runs greedy (--temp 0) with -n 120, the defaults of the page's requests, which
// set neither. Run: node tests/e2e/chat_page.test.mjs build/src/moeflux (CTest: the e2e label).
import test from 'node:test';
import assert from 'node:assert/strict';
import {chromium} from 'playwright-core';
import {moefluxExe, startServer, DEMO_NAME} from './serve.mjs';

const exe = moefluxExe();
const CHROMIUM = process.env.MOEFLUX_CHROMIUM || '/usr/bin/chromium';
const N = 120;  // tokens an answer has (-n; the demo model does not end its answers itself)
const SERVER_ARGS = ['--temp', '0', '-n', String(N)];

// As the root user Chromium needs --no-sandbox; the rest keep it off this machine's network.
async function launch() {
  return chromium.launch({executablePath: CHROMIUM, headless: true, timeout: 60000,
                          args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
                                 '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic']});
}

// The server's non-streamed answer to `messages` with the page's (empty) sampling fields.
async function apiAnswer(srv, messages, key) {
  const headers = {'Content-Type': 'application/json'};
  if (key) headers.Authorization = 'Bearer ' + key;
  const r = await fetch(srv.url + '/v1/chat/completions', {method: 'POST', headers, body: JSON.stringify({messages})});
  assert.equal(r.status, 200, await r.clone().text());
  const j = await r.json();
  assert.equal(j.choices[0].finish_reason, 'length');
  return {text: j.choices[0].message.content, tokens: j.usage.completion_tokens};
}

// A page that records every text an assistant bubble shows (to see the answer stream in),
// page errors and the bodies it posts to /v1/chat/completions.
async function openPage(browser, srv) {
  const page = await browser.newPage();
  const seen = {errors: [], bodies: []};
  page.on('pageerror', e => seen.errors.push(String(e)));
  page.on('request', r => {
    if (r.url().endsWith('/v1/chat/completions')) seen.bodies.push(r.postDataJSON());
  });
  await page.goto(srv.url + '/', {timeout: 30000});
  // The answers come to the page at 16 KB/s: the demo model writes its 120 tokens in tens of
  // milliseconds, which a busy page could otherwise take in one or two reads (then nothing
  // shows it growing, however it renders).
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.emulateNetworkConditions',
                 {offline: false, latency: 0, downloadThroughput: 16 * 1024, uploadThroughput: -1});
  await page.evaluate(() => {
    window.__texts = [], window.__watch = 0;  // the texts of assistant bubble number __watch
    new MutationObserver(() => {
      const b = document.querySelectorAll('#log .msg.assistant')[window.__watch];
      if (b && b.textContent !== window.__texts[window.__texts.length - 1]) window.__texts.push(b.textContent);
    }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
  });
  return {page, seen};
}

// Types `text`, sends it with Enter and waits until the page has finished the answer (the Send
// button enabled again). Returns the answer bubble's text and the texts it showed on the way.
async function say(page, text) {
  const before = await page.locator('#log .msg.assistant').count();
  await page.evaluate(n => { window.__texts = [], window.__watch = n; }, before);
  await page.locator('#input').fill(text);
  await page.locator('#input').press('Enter');
  await page.waitForFunction(n => document.querySelectorAll('#log .msg.assistant').length === n + 1 &&
                               !document.getElementById('send').disabled, before, {timeout: 60000});
  const bubble = page.locator('#log .msg.assistant').last();
  assert.equal(await bubble.getAttribute('class'), 'msg assistant', 'no error bubble');
  return {answer: await bubble.textContent(), texts: await page.evaluate(() => window.__texts)};
}

// Runs body(srv, browser) against a server started with `args` and a fresh browser; prints the
// server's log when it fails; the server must exit 0 on SIGTERM.
async function withServer(args, body) {
  const srv = await startServer(exe, args);
  let browser;
  try {
    browser = await launch();
    await body(srv, browser);
  } catch (e) {
    console.error(srv.log());
    throw e;
  } finally {
    if (browser) await browser.close();
    const {code} = await srv.stop();
    assert.equal(code, 0, srv.log());
  }
}

test('the chat page streams greedy answers equal to the API\'s', {timeout: 180000}, async () => {
  await withServer(SERVER_ARGS, async (srv, browser) => {
    const {page, seen} = await openPage(browser, srv);
    await page.waitForFunction(name => document.getElementById('model').textContent === name, DEMO_NAME,
                               {timeout: 10000});

    const q1 = 'Tell me about the jury.';
    const t1 = await say(page, q1);
    const want1 = await apiAnswer(srv, [{role: 'user', content: q1}]);
    assert.ok(want1.text.length > 0);
    assert.equal(t1.answer, want1.text);
    assert.equal(want1.tokens, N);
    // Streamed: the bubble showed the answer growing, each text a prefix of the next.
    assert.ok(t1.texts.length >= 3, `the answer appeared in ${t1.texts.length} step(s)`);
    for (let i = 1; i < t1.texts.length; ++i) assert.ok(t1.texts[i].startsWith(t1.texts[i - 1]));
    assert.equal(t1.texts[t1.texts.length - 1], want1.text);
    assert.deepEqual(await page.locator('#log .msg.user').allTextContents(), [q1]);
    // "N tokens, X tok/s, first token after Y s", N from the usage chunk.
    const stats = await page.locator('#stats').textContent();
    const m = /^(\d+) tokens, (\d+\.\d) tok\/s, first token after (\d+\.\d\d) s$/.exec(stats);
    assert.ok(m, `stats line: ${JSON.stringify(stats)}`);
    assert.equal(Number(m[1]), N);
    assert.ok(Number(m[2]) > 0, stats);

    // The second turn sends the whole conversation; its answer is the API's for it.
    const q2 = 'And what did the jury say?';
    const t2 = await say(page, q2);
    const conversation = [{role: 'user', content: q1}, {role: 'assistant', content: want1.text}, {role: 'user', content: q2}];
    assert.equal(seen.bodies.length, 2);
    assert.deepEqual(seen.bodies[1].messages, conversation);
    assert.equal(seen.bodies[1].stream, true);
    const want2 = await apiAnswer(srv, conversation);
    assert.equal(t2.answer, want2.text);
    assert.notEqual(want2.text, want1.text);
    assert.deepEqual(await page.locator('#log .msg.user').allTextContents(), [q1, q2]);

    // New chat: an empty log, and the next message goes alone.
    await page.locator('#reset').click();
    assert.equal(await page.locator('#log .msg').count(), 0);
    assert.equal(await page.locator('#stats').textContent(), '');
    const t3 = await say(page, q1);
    assert.equal(t3.answer, want1.text);
    assert.deepEqual(seen.bodies[2].messages, [{role: 'user', content: q1}]);
    assert.deepEqual(seen.errors, []);
  });
});

test('with --api-key the page asks for the key once and keeps it', {timeout: 180000}, async () => {
  await withServer([...SERVER_ARGS, '--api-key', 'sesame'], async (srv, browser) => {
    const {page, seen} = await openPage(browser, srv);
    const prompts = [];
    page.on('dialog', d => {
      prompts.push(d.type() + ': ' + d.message());
      d.accept('sesame');
    });
    const q = 'Tell me about the jury.';
    const t = await say(page, q);
    assert.deepEqual(prompts, ['prompt: API key']);
    const want = await apiAnswer(srv, [{role: 'user', content: q}], 'sesame');
    assert.equal(t.answer, want.text);
    // The key is kept: a reload lists the model (GET /v1/models with it) and asks nothing.
    await page.reload();
    await page.waitForFunction(name => document.getElementById('model').textContent === name, DEMO_NAME,
                               {timeout: 10000});
    assert.equal(prompts.length, 1);
    assert.deepEqual(seen.errors, []);
  });
});
