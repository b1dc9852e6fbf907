// The official OpenAI npm client (`openai`, pinned in package.json) against `moeflux serve` on
// the demo model: models.list; chat and text completions greedy, streamed (with usage) and not,
// giving the same text, usage and finish_reason; stop strings; seeded sampling; logprobs;
// concurrent streams; the client's error classes for a 400 and for a wrong API key (401);
// /health, /metrics against the usage the client saw; a clean exit on SIGTERM.
// Run: node tests/e2e/openai_client.test.mjs build/src/moeflux (CTest: the e2e label).
import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {moefluxExe, startServer, DEMO_NAME} from './serve.mjs';

const exe = moefluxExe();
const USER = 'Tell me about the jury.';

function clientFor(srv, apiKey = 'unused') {
  return new OpenAI({baseURL: srv.url + '/v1', apiKey, maxRetries: 0, timeout: 60000});
}

// A streamed chat or text completion drained: the text, the number of chunks that carried
// text, the finish_reason, the usage chunk, and the chunks' shape checked on the way.
async function drain(stream, chat) {
  const r = {text: '', pieces: 0, finish: null, usage: null, ids: new Set(), roles: []};
  for await (const chunk of stream) {
    r.ids.add(chunk.id);
    assert.equal(chunk.object, chat ? 'chat.completion.chunk' : 'text_completion');
    assert.equal(chunk.model, DEMO_NAME);
    if (chunk.usage) {
      assert.equal(r.usage, null, 'one usage chunk');
      assert.notEqual(r.finish, null, 'usage comes after the finish_reason');
      assert.deepEqual(chunk.choices, []);
      r.usage = chunk.usage;
      continue;
    }
    assert.equal(r.usage, null, 'nothing after the usage chunk');
    assert.equal(chunk.choices.length, 1);
    const c = chunk.choices[0];
    const piece = chat ? c.delta.content : c.text;
    if (chat && c.delta.role) r.roles.push(c.delta.role);
    if (piece) r.text += piece, r.pieces++;
    if (c.finish_reason) {
      assert.equal(r.finish, null, 'one finish_reason');
      r.finish = c.finish_reason;
    }
  }
  assert.equal(r.ids.size, 1, 'every chunk has the same id');
  return r;
}

test('the openai client against moeflux serve', {timeout: 240000}, async t => {
  const srv = await startServer(exe);
  let generated = 0, finished = 0;  // what the client saw, for /metrics
  const count = usage => { generated += usage.completion_tokens; finished++; };
  try {
    const client = clientFor(srv);

    await t.test('models.list names the model', async () => {
      const models = [];
      for await (const m of client.models.list()) models.push(m);
      assert.deepEqual(models.map(m => [m.id, m.object, m.owned_by]), [[DEMO_NAME, 'model', 'moeflux']]);
    });

    await t.test('chat: greedy, streamed and not, the same text, usage and finish_reason', async () => {
      const params = {model: DEMO_NAME, messages: [{role: 'user', content: USER}], max_tokens: 24, temperature: 0};
      const full = await client.chat.completions.create(params);
      count(full.usage);
      assert.match(full.id, /^chatcmpl-/);
      assert.equal(full.object, 'chat.completion');
      assert.equal(full.model, DEMO_NAME);
      assert.equal(full.choices.length, 1);
      const msg = full.choices[0].message;
      assert.equal(msg.role, 'assistant');
      assert.ok(msg.content.length > 0);
      assert.equal(full.choices[0].finish_reason, 'length');
      assert.equal(full.usage.completion_tokens, 24);
      assert.ok(full.usage.prompt_tokens > 0);
      assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + full.usage.completion_tokens);

      const s = await drain(await client.chat.completions.create(
          {...params, stream: true, stream_options: {include_usage: true}}), true);
      count(s.usage);
      assert.equal(s.text, msg.content);
      assert.deepEqual(s.roles, ['assistant']);
      assert.equal(s.finish, 'length');
      assert.equal(s.usage.prompt_tokens, full.usage.prompt_tokens);
      assert.equal(s.usage.completion_tokens, 24);
      assert.equal(s.usage.total_tokens, s.usage.prompt_tokens + 24);
      // The demo's answer is plain ASCII: every token is a chunk of its own.
      assert.equal(s.pieces, 24);

      // Without include_usage: no usage chunk, the same text.
      const plain = await drain(await client.chat.completions.create({...params, stream: true}), true);
      count(full.usage);  // the same 24 tokens, for /metrics
      assert.equal(plain.usage, null);
      assert.equal(plain.text, msg.content);
    });

    await t.test('chat: a stop string ends the answer before it, streamed and not', async () => {
      const params = {model: DEMO_NAME, messages: [{role: 'user', content: USER}], max_tokens: 40, temperature: 0};
      const whole = (await client.chat.completions.create(params));
      count(whole.usage);
      const text = whole.choices[0].message.content;
      const stop = ' most';
      assert.ok(text.indexOf(stop) > 0, `the greedy answer has '${stop}' to stop at: ${JSON.stringify(text)}`);
      const cut = await client.chat.completions.create({...params, stop: [stop]});
      count(cut.usage);
      assert.equal(cut.choices[0].message.content, text.slice(0, text.indexOf(stop)));
      assert.equal(cut.choices[0].finish_reason, 'stop');
      const s = await drain(await client.chat.completions.create(
          {...params, stop: stop, stream: true, stream_options: {include_usage: true}}), true);
      count(s.usage);
      assert.equal(s.text, text.slice(0, text.indexOf(stop)));
      assert.equal(s.finish, 'stop');
      assert.equal(s.usage.completion_tokens, cut.usage.completion_tokens);
    });

    await t.test('completions: greedy, streamed and not, the same text', async () => {
      const params = {model: DEMO_NAME, prompt: 'The jury said that the', max_tokens: 20, temperature: 0};
      const full = await client.completions.create(params);
      count(full.usage);
      assert.match(full.id, /^cmpl-/);
      assert.equal(full.object, 'text_completion');
      assert.ok(full.choices[0].text.length > 0);
      assert.equal(full.choices[0].finish_reason, 'length');
      assert.equal(full.usage.completion_tokens, 20);
      const s = await drain(await client.completions.create(
          {...params, stream: true, stream_options: {include_usage: true}}), false);
      count(s.usage);
      assert.equal(s.text, full.choices[0].text);
      assert.equal(s.finish, 'length');
      assert.equal(s.pieces, 20);
      assert.equal(s.usage.completion_tokens, 20);
      assert.equal(s.usage.prompt_tokens, full.usage.prompt_tokens);
    });

    await t.test('sampling with a seed repeats, streamed and not; another seed differs', async () => {
      const params = {model: DEMO_NAME, prompt: 'The jury said that the', max_tokens: 24, temperature: 1, seed: 1234};
      const a = await client.completions.create(params);
      const b = await client.completions.create(params);
      const s = await drain(await client.completions.create({...params, stream: true, stream_options: {include_usage: true}}),
                            false);
      const other = await client.completions.create({...params, seed: 99});
      const greedy = await client.completions.create({...params, temperature: 0});
      for (const r of [a, b, other, greedy]) count(r.usage);
      count(s.usage);
      assert.equal(b.choices[0].text, a.choices[0].text);
      assert.equal(s.text, a.choices[0].text);
      assert.notEqual(other.choices[0].text, a.choices[0].text);
      assert.notEqual(greedy.choices[0].text, a.choices[0].text);
    });

    await t.test('chat logprobs: one per token, greedy tokens the most likely', async () => {
      const r = await client.chat.completions.create({model: DEMO_NAME, messages: [{role: 'user', content: USER}],
                                                      max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3});
      count(r.usage);
      const lp = r.choices[0].logprobs.content;
      assert.equal(lp.length, 8);
      assert.equal(lp.map(x => x.token).join(''), r.choices[0].message.content);
      for (const x of lp) {
        assert.equal(x.top_logprobs.length, 3);
        assert.ok(x.logprob <= 0);
        assert.equal(x.top_logprobs[0].token, x.token);
        assert.ok(Math.abs(x.top_logprobs[0].logprob - x.logprob) < 1e-5);
        assert.deepEqual(x.bytes, [...Buffer.from(x.token, 'utf8')]);
      }
    });

    await t.test('three concurrent streams each get the text they get alone', async () => {
      const prompts = ['The jury said that the', 'In the city of', 'He was not sure whether'];
      const alone = [];
      for (const prompt of prompts) {
        const r = await client.completions.create({model: DEMO_NAME, prompt, max_tokens: 16, temperature: 0});
        count(r.usage);
        alone.push(r.choices[0].text);
      }
      const together = await Promise.all(prompts.map(async prompt => drain(await client.completions.create(
          {model: DEMO_NAME, prompt, max_tokens: 16, temperature: 0, stream: true, stream_options: {include_usage: true}}),
          false)));
      for (const s of together) count(s.usage);
      assert.deepEqual(together.map(s => s.text), alone);
    });

    await t.test('bad requests: the client throws BadRequestError (400) naming the field', async () => {
      const cases = [
        [{messages: [{role: 'user', content: USER}], temperature: 5}, 'temperature'],
        [{messages: [{role: 'user', content: USER}], temperature: 5, stream: true}, 'temperature'],
        [{messages: []}, 'messages'],
        [{messages: [{role: 'user', content: USER}], n: 2}, 'n'],
        [{messages: [{role: 'wizard', content: USER}]}, 'messages[0].role'],
      ];
      for (const [params, param] of cases) {
        await assert.rejects(client.chat.completions.create({model: DEMO_NAME, ...params}), e => {
          assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
          assert.equal(e.status, 400);
          assert.equal(e.param, param);
          assert.equal(e.type, 'invalid_request_error');
          return true;
        }, JSON.stringify(params));
      }
      await assert.rejects(client.completions.create({model: DEMO_NAME, prompt: 'a', max_tokens: 0}), e =>
        e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
    });

    await t.test('/health and /metrics', async () => {
      const h = await fetch(srv.url + '/health');
      assert.equal(h.status, 200);
      assert.deepEqual(await h.json(), {status: 'ok'});
      const m = await (await fetch(srv.url + '/metrics')).text();
      const metric = name => {
        const v = new RegExp(`^${name} (\\S+)$`, 'm').exec(m);
        assert.ok(v, `${name} in\n${m}`);
        return Number(v[1]);
      };
      assert.equal(metric('moeflux_requests_finished_total'), finished);
      assert.equal(metric('moeflux_generated_tokens_total'), generated);
      assert.equal(metric('moeflux_slots_busy'), 0);
      assert.equal(metric('moeflux_queue_depth'), 0);
    });
  } catch (e) {
    console.error(srv.log());
    throw e;
  } finally {
    const {code, signal} = await srv.stop();
    assert.equal(signal, null, srv.log());
    assert.equal(code, 0, srv.log());
  }
});

test('a server with --api-key: the client throws AuthenticationError (401) for a wrong key', {timeout: 120000}, async () => {
  const srv = await startServer(exe, ['--api-key', 'sesame']);
  try {
    for (const key of ['wrong', 'Sesame']) {
      const client = clientFor(srv, key);
      await assert.rejects(client.models.list(), e => e instanceof OpenAI.AuthenticationError && e.status === 401);
      await assert.rejects(client.chat.completions.create(
          {model: DEMO_NAME, messages: [{role: 'user', content: USER}], max_tokens: 2, stream: true}),
      e => e instanceof OpenAI.AuthenticationError && e.status === 401);
    }
    const client = clientFor(srv, 'sesame');
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    assert.deepEqual(models, [DEMO_NAME]);
    const r = await client.chat.completions.create(
        {model: DEMO_NAME, messages: [{role: 'user', content: USER}], max_tokens: 3, temperature: 0});
    assert.equal(r.usage.completion_tokens, 3);
    // No key at all: 401 in OpenAI's error JSON; /health asks none.
    const none = await fetch(srv.url + '/v1/models');
    assert.equal(none.status, 401);
    assert.equal((await none.json()).error.type, 'invalid_request_error');
    assert.equal((await fetch(srv.url + '/health')).status, 200);
  } catch (e) {
    console.error(srv.log());
    throw e;
  } finally {
    const {code} = await srv.stop();
    assert.equal(code, 0, srv.log());
  }
});
