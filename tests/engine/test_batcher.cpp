// Batcher (continuous batching): 16 greedy requests of different prompt lengths and lengths
// through 4 slots (prompts prefilled in chunks, requests joining as others finish) each get
// the tokens the same prompt gets alone; the same from 16 threads against a running batcher;
// the queue bound; cancellation from a callback and from another thread; stop ids; a prompt
// longer than the context; bad requests; no requests taken after stop(). Prefix reuse: the
// next turn of a chat prefills only its new tokens (a qwen3_moe model: any common prefix; a
// hybrid one: all of the slot's tokens or its checkpoint at the end of the previous prompt); a
// prompt whose slot went to another request continues from the PrefixCache.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <thread>

#include "core/error.h"
#include "engine/batcher.h"
#include "engine/engine_cases.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "model/model.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

std::unique_ptr<Model> demo() { return load_model(std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4"); }

// Prompt i: 3 + 7 * i tokens spread over the vocabulary.
std::vector<int32_t> prompt(int i, int64_t vocab) {
  std::vector<int32_t> p;
  for (int j = 0; j < 3 + 7 * i; ++j) p.push_back(int32_t((101 + 977 * j + 31 * i) % vocab));
  return p;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason why = FinishReason::Error;
  GenUsage usage;
  int done = 0;
};

std::shared_ptr<GenRequest> request(std::vector<int32_t> p, int max_tokens, Outcome& out) {
  auto r = std::make_shared<GenRequest>();
  r->prompt = std::move(p);
  r->max_tokens = max_tokens;
  r->on_token = [&out](int32_t t) {
    out.tokens.push_back(t);
    return true;
  };
  r->on_done = [&out](FinishReason why, const GenUsage& u, const std::string&) { out.why = why, out.usage = u, ++out.done; };
  return r;
}

TEST(Batcher, SixteenRequestsThroughFourSlotsGetWhatEachGetsAlone) {
  auto m = demo();
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 4, .prefill_chunk = 16, .max_queue = 64});
  std::vector<Outcome> out(16);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(b.submit(request(prompt(i, m->cfg.vocab_size), 4 + i % 5, out[size_t(i)])));
  int steps = 0;
  while (b.step()) ++steps;
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    Session alone(*m);
    const auto want = greedy_generate(alone, prompt(i, m->cfg.vocab_size), 4 + i % 5);
    EXPECT_EQ(out[size_t(i)].tokens, want);
    EXPECT_EQ(out[size_t(i)].done, 1);
    EXPECT_EQ(out[size_t(i)].why, FinishReason::Length);
    EXPECT_EQ(out[size_t(i)].usage.prompt_tokens, int64_t(prompt(i, m->cfg.vocab_size).size()));
    EXPECT_EQ(out[size_t(i)].usage.completion_tokens, 4 + i % 5);
  }
  const BatcherStats st = b.stats();
  EXPECT_EQ(st.finished, 16);
  EXPECT_EQ(st.busy_slots, 0);
  EXPECT_EQ(st.steps, steps);
  EXPECT_LT(steps, 16 * 8);  // requests shared steps
}

TEST(Batcher, ConcurrentClientsAgainstARunningBatcher) {
  auto m = demo();
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 8, .prefill_chunk = 32, .max_queue = 64});
  b.start();
  std::vector<std::future<std::vector<int32_t>>> got;
  for (int i = 0; i < 16; ++i)
    got.push_back(std::async(std::launch::async, [&, i] {
      auto done = std::make_shared<std::promise<void>>();
      auto tokens = std::make_shared<std::vector<int32_t>>();
      auto r = std::make_shared<GenRequest>();
      r->prompt = prompt(i, m->cfg.vocab_size);
      r->max_tokens = 6;
      r->on_token = [tokens](int32_t t) {
        tokens->push_back(t);
        return true;
      };
      r->on_done = [done](FinishReason, const GenUsage&, const std::string&) { done->set_value(); };
      EXPECT_TRUE(b.submit(r));
      done->get_future().wait();
      return *tokens;
    }));
  for (int i = 0; i < 16; ++i) {
    Session alone(*m);
    EXPECT_EQ(got[size_t(i)].get(), greedy_generate(alone, prompt(i, m->cfg.vocab_size), 6)) << "request " << i;
  }
  b.stop();
}

TEST(Batcher, QueueBoundCancellationStopIdsAndErrors) {
  auto m = demo();
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 2, .prefill_chunk = 8, .max_queue = 3});
  const auto p = prompt(2, m->cfg.vocab_size);
  Session alone(*m);
  const auto want = greedy_generate(alone, p, 8);
  // The queue holds three: a fourth is refused until they have joined the slots.
  std::vector<Outcome> out(4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.submit(request(p, 8, out[size_t(i)])));
  EXPECT_FALSE(b.submit(request(p, 8, out[3])));
  while (b.step()) {
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[size_t(i)].tokens, want) << "request " << i;
  EXPECT_EQ(out[3].done, 0);

  // A stop id ends a request before the token is reported.
  Outcome stopped;
  auto r_stop = request(p, 8, stopped);
  r_stop->stop_ids = {want[2]};
  ASSERT_TRUE(b.submit(r_stop));
  while (b.step()) {
  }
  EXPECT_EQ(stopped.why, FinishReason::Stop);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(want.begin(), want.begin() + 2));
  EXPECT_EQ(stopped.usage.completion_tokens, 2);

  // Cancelled by its callback after two tokens, or from outside; the slot goes to the next.
  Outcome cb, outside, other;
  auto r_cb = request(p, 8, cb);
  r_cb->on_token = [&cb](int32_t t) {
    cb.tokens.push_back(t);
    return cb.tokens.size() < 2;
  };
  auto r_out = request(p, 8, outside);
  ASSERT_TRUE(b.submit(r_cb));
  ASSERT_TRUE(b.submit(r_out));
  b.step();
  r_out->cancel = true;
  ASSERT_TRUE(b.submit(request(prompt(3, m->cfg.vocab_size), 5, other)));
  while (b.step()) {
  }
  EXPECT_EQ(cb.why, FinishReason::Cancelled);
  EXPECT_EQ(cb.tokens.size(), 2u);
  EXPECT_EQ(outside.why, FinishReason::Cancelled);
  EXPECT_EQ(outside.done, 1);
  EXPECT_EQ(other.why, FinishReason::Length);
  Session again(*m);
  EXPECT_EQ(other.tokens, greedy_generate(again, prompt(3, m->cfg.vocab_size), 5));

  // Bad requests are refused at submit; a prompt longer than the context ends in an error.
  Outcome bad;
  EXPECT_THROW(b.submit(request({}, 4, bad)), Error);
  EXPECT_THROW(b.submit(request(p, 0, bad)), Error);
  EXPECT_THROW(b.submit(request({int32_t(m->cfg.vocab_size)}, 4, bad)), Error);
  auto hot = request(p, 4, bad);
  hot->sampling.temperature = -1;
  EXPECT_THROW(b.submit(hot), Error);
  Outcome too_long;
  ASSERT_TRUE(b.submit(request(std::vector<int32_t>(size_t(m->cfg.max_seq_len) + 1, 5), 4, too_long)));
  while (b.step()) {
  }
  EXPECT_EQ(too_long.why, FinishReason::Error);
  EXPECT_EQ(too_long.done, 1);
  EXPECT_THROW(Batcher(engine, BatcherOptions{.slots = 0}), Error);
}

// After stop() a running batcher refuses new requests (nothing would run them: a caller waiting
// for on_done would wait for ever) until start() again; stop() ends what waits as cancelled.
TEST(Batcher, StopRefusesRequestsUntilStartAgain) {
  auto m = demo();
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 1, .prefill_chunk = 8, .max_queue = 4});
  const auto p = prompt(1, m->cfg.vocab_size);
  Outcome queued, refused, again;
  ASSERT_TRUE(b.submit(request(p, 4, queued)));  // not started: it waits
  b.start();
  b.stop();
  EXPECT_EQ(queued.done, 1);
  EXPECT_FALSE(b.submit(request(p, 4, refused)));
  EXPECT_EQ(refused.done, 0);
  b.start();
  ASSERT_TRUE(b.submit(request(p, 4, again)));
  b.stop();
  EXPECT_EQ(again.done, 1);
  EXPECT_TRUE(again.why == FinishReason::Length || again.why == FinishReason::Cancelled);
}

// Logprobs: each reported token's log-softmax under the logits alone gives (the first token's
// against a Session's own logits), with the most likely tokens, most likely first.
TEST(Batcher, LogprobsOfEachToken) {
  auto m = demo();
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 2, .prefill_chunk = 16, .max_queue = 8});
  const auto p = prompt(2, m->cfg.vocab_size);
  Outcome out;
  auto r = request(p, 4, out);
  std::vector<TokenLogprobs> lps;
  r->logprobs = 3;
  r->on_logprobs = [&lps](const TokenLogprobs& t) { lps.push_back(t); };
  ASSERT_TRUE(b.submit(r));
  while (b.step()) {
  }
  ASSERT_EQ(lps.size(), 4u);
  Session alone(*m);
  const std::vector<float> logits = alone.forward(p, {.all_logits = false});
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - double(logits[size_t(out.tokens[0])]));
  EXPECT_NEAR(lps[0].logprob, -std::log(sum), 1e-4);
  for (size_t i = 0; i < lps.size(); ++i) {
    EXPECT_EQ(lps[i].token, out.tokens[i]);
    ASSERT_EQ(lps[i].top.size(), 3u);
    EXPECT_EQ(lps[i].top[0].first, out.tokens[i]);  // greedy: the most likely
    EXPECT_FLOAT_EQ(lps[i].top[0].second, lps[i].logprob);
    EXPECT_LE(lps[i].logprob, 0.0f);
    EXPECT_GE(lps[i].top[0].second, lps[i].top[1].second);
    EXPECT_GE(lps[i].top[1].second, lps[i].top[2].second);
  }
}

// Runs the batcher until idle; the outcome of r.
Outcome run_one(Batcher& b, std::vector<int32_t> p, int max_tokens) {
  Outcome o;
  EXPECT_TRUE(b.submit(request(std::move(p), max_tokens, o)));
  while (b.step()) {
  }
  EXPECT_EQ(o.done, 1);
  return o;
}

std::vector<int32_t> greedy_alone(const Model& m, const std::vector<int32_t>& p, int n) {
  Session alone(m);
  return greedy_generate(alone, p, n);
}

// The next turn of a conversation (the previous prompt, the answer, new tokens) continues the
// slot's state: only the new tokens are prefilled, and the answer is the one the whole prompt
// gets alone. A prompt that does not extend a slot's tokens starts afresh.
TEST(Batcher, ANextTurnPrefillsOnlyItsNewTokens) {
  auto m = demo();
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 2, .prefill_chunk = 16, .max_queue = 8});
  const auto first = prompt(3, m->cfg.vocab_size);
  const Outcome one = run_one(b, first, 6);
  ASSERT_EQ(one.tokens.size(), 6u);
  std::vector<int32_t> second = first;
  second.insert(second.end(), one.tokens.begin(), one.tokens.end() - 1);  // the last answer token was never fed
  second.insert(second.end(), {int32_t(17), int32_t(29), int32_t(311)});
  const int64_t prefilled_before = b.stats().prompt_tokens;
  const Outcome two = run_one(b, second, 5);
  EXPECT_EQ(two.usage.cached_tokens, int64_t(first.size() + one.tokens.size() - 1));
  EXPECT_EQ(b.stats().prompt_tokens - prefilled_before, 3);
  EXPECT_EQ(two.tokens, greedy_alone(*m, second, 5));
  // Not an extension: a fresh state, the same tokens as alone.
  const auto other = prompt(4, m->cfg.vocab_size);
  const Outcome three = run_one(b, other, 4);
  EXPECT_EQ(three.usage.cached_tokens, 0);
  EXPECT_EQ(three.tokens, greedy_alone(*m, other, 4));
}

// One slot: a conversation loses it to another request, and its next turn continues from the
// PrefixCache (with the cache off: prefilled afresh). The answers are those alone.
TEST(Batcher, APromptThatLostItsSlotContinuesFromThePrefixCache) {
  auto m = demo();
  const int64_t V = m->cfg.vocab_size;
  for (const size_t cache : {size_t(64) << 20, size_t(0)}) {
    SCOPED_TRACE("cache bytes " + std::to_string(cache));
    Engine engine(*m);
    Batcher b(engine, BatcherOptions{.slots = 1, .prefill_chunk = 16, .max_queue = 8, .cache_bytes = cache});
    const auto a = prompt(5, V);
    const Outcome one = run_one(b, a, 4);
    ASSERT_EQ(one.tokens.size(), 4u);
    const Outcome other = run_one(b, prompt(6, V), 4);  // takes the slot: a's state goes to the cache
    EXPECT_EQ(other.usage.cached_tokens, 0);
    EXPECT_EQ(b.stats().cache_entries, cache ? 1u : 0u);
    std::vector<int32_t> next = a;
    next.insert(next.end(), one.tokens.begin(), one.tokens.end() - 1);
    next.insert(next.end(), {int32_t(17), int32_t(29)});
    const int64_t prefilled = b.stats().prompt_tokens;
    const Outcome two = run_one(b, next, 5);
    EXPECT_EQ(two.usage.cached_tokens, cache ? int64_t(a.size() + 3) : 0);
    EXPECT_EQ(b.stats().prompt_tokens - prefilled, cache ? 2 : int64_t(next.size()));
    EXPECT_EQ(b.stats().cache_hits, cache ? 1 : 0);
    EXPECT_EQ(two.tokens, greedy_alone(*m, next, 5));
    EXPECT_LE(b.stats().cache_bytes, cache);
  }
}

// A hybrid model (GatedDeltaNet layers): its next turn continues all of the slot's tokens; a
// prompt that parts from them right after the previous prompt returns to the checkpoint taken
// there; one that parts earlier starts afresh. The answers are those alone.
TEST(Batcher, AHybridModelsNextTurnContinuesItsRecurrentState) {
  auto m = test::load("qwen3_next/q4");
  const auto ids = test::base_ids("qwen3_next/q4", *m);
  ASSERT_GE(ids.size(), 20u);
  Engine engine(*m);
  Batcher b(engine, BatcherOptions{.slots = 1, .prefill_chunk = 16, .max_queue = 8});
  const std::vector<int32_t> first(ids.begin(), ids.begin() + 12);
  const Outcome one = run_one(b, first, 5);
  ASSERT_EQ(one.tokens.size(), 5u);
  std::vector<int32_t> second = first;
  second.insert(second.end(), one.tokens.begin(), one.tokens.end() - 1);
  second.insert(second.end(), {ids[13], ids[15], ids[17]});
  int64_t prefilled = b.stats().prompt_tokens;
  const Outcome two = run_one(b, second, 4);
  EXPECT_EQ(two.usage.cached_tokens, int64_t(first.size() + 4));
  EXPECT_EQ(b.stats().prompt_tokens - prefilled, 3);
  EXPECT_EQ(two.tokens, greedy_alone(*m, second, 4));

  std::vector<int32_t> third = first;
  third.insert(third.end(), {ids[18], ids[19]});
  prefilled = b.stats().prompt_tokens;
  const Outcome three = run_one(b, third, 4);
  EXPECT_EQ(three.usage.cached_tokens, int64_t(first.size()));
  EXPECT_EQ(b.stats().prompt_tokens - prefilled, 2);
  EXPECT_EQ(three.tokens, greedy_alone(*m, third, 4));

  std::vector<int32_t> fourth(first.begin(), first.begin() + 6);
  fourth.push_back(ids[16]);
  const Outcome four = run_one(b, fourth, 3);
  EXPECT_EQ(four.usage.cached_tokens, 0);
  EXPECT_EQ(four.tokens, greedy_alone(*m, fourth, 3));
}

}  // namespace
}  // namespace moeflux
