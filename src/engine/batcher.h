// Batcher: continuous batching of generation requests over one Engine (the core of
// `moeflux serve`). Up to `slots` requests are stepped together, each with its own Sequence
// and Sampler: a step carries the next decode token of every decoding request and a prompt chunk
// of at most `prefill_chunk` tokens of each prefilling one, so that long prompts do not starve
// running decodes. Requests join between steps from a bounded queue; a finished, stopped or
// cancelled request frees its slot at once. A slot keeps its sequence after its request ends:
// a request whose prompt starts with tokens a free slot holds (the next turn of a chat: the
// previous prompt, the answer, the new message) continues that state and prefills only the
// rest. A slot's state that another request takes over goes to a host-memory PrefixCache,
// which serves later prompts the same way. Hybrid models' recurrent state cannot be cut back:
// a checkpoint at the end of each prompt (a turn boundary) is where they can return to.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"

namespace moeflux {

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct GenUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens a slot already held (not prefilled again)
};

// The log-probabilities of a generated token under the model (log-softmax of its logits, before
// any sampling transform) and of the most likely tokens.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // the `logprobs` most likely, most likely first
};

struct GenRequest {
  std::vector<int32_t> prompt;  // at least one token
  int max_tokens = 16;          // generated tokens at most (> 0)
  SamplingParams sampling = SamplingParams::greedy();
  std::vector<int32_t> stop_ids;  // a sampled id among these ends the request (not reported)
  // Each generated token, on the batcher's thread; false cancels the request (client gone).
  std::function<bool(int32_t token)> on_token;
  // logprobs >= 0: on_logprobs gets each reported token's TokenLogprobs (with `logprobs`
  // alternatives) just before on_token.
  int logprobs = -1;
  std::function<void(const TokenLogprobs&)> on_logprobs;
  // Once, when the request ends; `error` explains FinishReason::Error.
  std::function<void(FinishReason, const GenUsage&, const std::string& error)> on_done;
  std::atomic<bool> cancel{false};  // set from any thread: the request ends at the next step
};

struct BatcherOptions {
  int slots = 4;             // requests stepped together
  int prefill_chunk = 256;   // prompt tokens of one request per step
  size_t max_queue = 64;     // waiting requests beyond the slots
  size_t cache_bytes = 0;    // the PrefixCache's budget (0: none)
};

struct BatcherStats {
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, finished = 0;
  double step_s = 0;  // wall time spent in engine steps
  int64_t cached_tokens = 0;  // prompt tokens reused from a slot's state or the cache
  int64_t cache_hits = 0;     // requests that continued a PrefixCache snapshot
  size_t cache_entries = 0, cache_bytes = 0;
  int busy_slots = 0;
  size_t queued = 0;
};

// The TokenLogprobs of `token` under `logits` (vocab), with the n_top most likely tokens.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int n_top);

class Batcher {
 public:
  // Error for slots, prefill_chunk or max_queue below 1.
  Batcher(Engine& engine, const BatcherOptions& opt);
  ~Batcher();

  // Queues r (thread-safe). False when the queue is full or stop() has run since start() (the
  // caller answers "busy"). Error for an empty prompt, max_tokens below 1 or invalid sampling
  // parameters.
  bool submit(std::shared_ptr<GenRequest> r);

  // Admits queued requests into free slots and runs one engine step over the busy slots.
  // False when there was nothing to run.
  bool step();

  // Runs steps on a thread of its own until stop() (which finishes what is queued as
  // Cancelled).
  void start();
  void stop();

  BatcherStats stats() const;

 private:
  struct Slot {
    std::shared_ptr<GenRequest> req;
    std::unique_ptr<Sequence> seq;
    std::unique_ptr<Sampler> sampler;
    size_t fed = 0;                 // prompt tokens fed so far (or held from before: cached)
    size_t cached = 0;              // prompt tokens the sequence held when the request joined
    std::vector<int32_t> history;   // prompt + generated, for the penalties
    std::vector<int32_t> pending;   // the sampled token to feed next (decode)
    int64_t generated = 0;
    TopLogits top;                  // the step's shortlist of logits (top.n 0: the whole row)
  };
  void admit();
  // Puts r into a free slot, continuing the longest state that serves its prompt.
  void place(const std::shared_ptr<GenRequest>& r);
  void finish(Slot& s, FinishReason why, const std::string& error = {});
  void loop();

  Engine& engine_;
  BatcherOptions opt_;
  std::vector<Slot> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenRequest>> queue_;
  std::unique_ptr<PrefixCache> cache_;  // batcher thread only
  BatcherStats stats_;
  std::thread thread_;
  bool running_ = false;
  bool stopped_ = false;  // stop() ran after start(): submit refuses, as nothing would run it
};

}  // namespace moeflux
