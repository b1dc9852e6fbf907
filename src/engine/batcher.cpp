// Batcher: the slots, the queue and one step over all busy slots.
#include "engine/batcher.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace moeflux {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

Batcher::Batcher(Engine& engine, const BatcherOptions& opt) : engine_(engine), opt_(opt) {
  if (opt.slots < 1) fail("--slots ", opt.slots, ": at least 1");
  if (opt.prefill_chunk < 1) fail("prefill chunk ", opt.prefill_chunk, ": at least 1");
  if (opt.max_queue < 1) fail("queue length ", opt.max_queue, ": at least 1");
  slots_.resize(size_t(opt.slots));
}

Batcher::~Batcher() { stop(); }

bool Batcher::submit(std::shared_ptr<GenRequest> r) {
  MF_ASSERT(r);
  if (r->prompt.empty()) fail("the prompt has no tokens");
  if (r->max_tokens < 1) fail("max_tokens ", r->max_tokens, ": at least 1");
  r->sampling.validate();
  const int64_t V = engine_.model().cfg.vocab_size;
  for (int32_t t : r->prompt)
    if (t < 0 || t >= V) fail("token id ", t, " is outside the vocabulary [0, ", V, ")");
  for (const auto& b : r->sampling.logit_bias)
    if (b.first >= V) fail("logit_bias names token ", b.first, ", outside the vocabulary [0, ", V, ")");
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || queue_.size() >= opt_.max_queue) return false;
  queue_.push_back(std::move(r));
  cv_.notify_one();
  return true;
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int n_top) {
  float m = -INFINITY;
  for (float v : logits) m = std::max(m, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - m);
  const float lse = m + float(std::log(sum));
  TokenLogprobs t;
  t.token = token;
  t.logprob = logits[size_t(token)] - lse;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  const size_t n = std::min(size_t(std::max(0, n_top)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + long(n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < n; ++i) t.top.emplace_back(ids[i], logits[size_t(ids[i])] - lse);
  return t;
}

void Batcher::admit() {
  for (;;) {
    std::shared_ptr<GenRequest> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool free = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.req; });
      if (queue_.empty() || !free) break;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      place(r);
    } catch (const std::exception& e) {  // a state that could not be copied: the request fails alone
      for (Slot& s : slots_)
        if (!s.req && s.seq) s.seq->reset();
      if (r->on_done) r->on_done(FinishReason::Error, GenUsage{int64_t(r->prompt.size()), 0}, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.queued = queue_.size();
}

namespace {
// Fewer tokens than this are prefilled again rather than copied to or from the PrefixCache.
constexpr int64_t kWorthCopying = 16;
}  // namespace

void Batcher::place(const std::shared_ptr<GenRequest>& r) {
  const std::vector<int32_t>& prompt = r->prompt;
  // The free slot whose state serves the most of the prompt; else the emptiest free one (a few
  // shared tokens, a chat template's opening, are no reason to take over another's state).
  Slot* best = nullptr;
  int64_t keep = 0, best_score = 0, best_held = 0;
  for (Slot& s : slots_) {
    if (s.req) continue;
    const int64_t k = s.seq ? reusable_prefix(s.seq->tokens(), s.seq->checkpoint_positions(), s.seq->recurrent(), prompt) : 0;
    const int64_t held = s.seq ? s.seq->pos() : 0, score = k >= kWorthCopying ? k : 0;
    if (!best || score > best_score || (score == best_score && held < best_held))
      best = &s, keep = k, best_score = score, best_held = held;
  }
  MF_ASSERT(best);
  Slot& s = *best;
  if (!s.seq) s.seq = engine_.new_sequence();
  if (!cache_) cache_ = std::make_unique<PrefixCache>(opt_.cache_bytes, s.seq->recurrent());
  PrefixCache::Match m = opt_.cache_bytes > 0 ? cache_->find(prompt) : PrefixCache::Match{};
  const bool from_cache = m.tokens >= keep + kWorthCopying;
  // What the slot holds beyond the part it keeps goes to the cache, when worth it.
  if (opt_.cache_bytes > 0 && s.seq->pos() - (from_cache ? 0 : keep) >= kWorthCopying) {
    cache_->put(s.seq->save());
    if (from_cache) m = cache_->find(prompt);  // put() may have dropped or replaced it
  }
  bool hit = false;
  if (from_cache && m.tokens > keep) s.seq->restore(*m.snapshot), keep = m.tokens, hit = true;
  keep = s.seq->rewind(keep);
  s.sampler = std::make_unique<Sampler>(r->sampling);
  s.fed = s.cached = size_t(keep), s.generated = 0;
  s.history = prompt;
  s.pending.clear();
  std::lock_guard<std::mutex> lock(mu_);
  s.req = r;
  stats_.cached_tokens += keep, stats_.cache_hits += hit;
  stats_.cache_entries = cache_->entries(), stats_.cache_bytes = cache_->bytes();
}

void Batcher::finish(Slot& s, FinishReason why, const std::string& error) {
  const GenUsage usage{int64_t(s.req->prompt.size()), s.generated, int64_t(s.cached)};
  std::shared_ptr<GenRequest> req;
  {
    std::lock_guard<std::mutex> lock(mu_);  // stats() reads the slots' occupancy
    req = std::move(s.req);
    s.req.reset();
    ++stats_.finished;
  }
  if (req->on_done) req->on_done(why, usage, error);
}

bool Batcher::step() {
  admit();
  for (Slot& s : slots_)
    if (s.req && s.req->cancel) finish(s, FinishReason::Cancelled);
  std::vector<StepItem> items;
  std::vector<Slot*> in_step;
  const int64_t max_len = engine_.model().cfg.max_seq_len;
  for (Slot& s : slots_) {
    if (!s.req) continue;
    std::span<const int32_t> ids;
    if (s.fed < s.req->prompt.size()) {
      const size_t n = std::min(s.req->prompt.size() - s.fed, size_t(opt_.prefill_chunk));
      ids = std::span<const int32_t>(s.req->prompt).subspan(s.fed, n);
    } else {
      ids = s.pending;
    }
    if (s.seq->pos() + int64_t(ids.size()) > max_len) {  // the context is full
      finish(s, s.generated > 0 ? FinishReason::Length : FinishReason::Error,
             s.generated > 0 ? "" : "the prompt does not fit the model's context");
      continue;
    }
    // The logits come whole where the request reports log-probabilities; else the sampler's
    // shortlist, when it takes one (the rest stay on the backend). A prompt chunk before the
    // last samples nothing: one logit comes.
    const bool sampled = s.fed + ids.size() >= s.req->prompt.size();
    if (!sampled) s.top.n = 1;
    else s.top.n = s.req->logprobs < 0 ? s.sampler->shortlist(s.history, engine_.model().cfg.vocab_size) : 0;
    items.push_back(StepItem{s.seq.get(), ids, {.all_logits = false, .top = s.top.n > 0 ? &s.top : nullptr}});
    in_step.push_back(&s);
  }
  if (items.empty()) return false;
  std::vector<std::vector<float>> logits;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    logits = engine_.step(items);
  } catch (const std::exception& e) {
    for (Slot* s : in_step) finish(*s, FinishReason::Error, e.what());
    return true;
  }
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t prompt_tokens = 0, generated_tokens = 0;
  for (size_t i = 0; i < in_step.size(); ++i) {
    Slot& s = *in_step[i];
    if (s.fed < s.req->prompt.size()) {
      s.fed += items[i].ids.size();
      prompt_tokens += int64_t(items[i].ids.size());
      if (s.fed < s.req->prompt.size()) continue;  // more prompt next step
      s.seq->checkpoint();  // a turn boundary: where a later prompt may part from this one
    }
    std::vector<float> raw;  // the logits before the sampler transforms them in place
    if (s.req->logprobs >= 0) raw = logits[i];
    const auto read = [&](std::span<const int32_t> ids, float* out) { engine_.kept_logits(s.top, ids, out); };
    const int32_t tok = s.top.n > 0 ? s.sampler->sample_top(s.top.vals, s.top.ids, read, s.history, engine_.model().cfg.vocab_size)
                                    : s.sampler->sample(logits[i], s.history);
    if (std::find(s.req->stop_ids.begin(), s.req->stop_ids.end(), tok) != s.req->stop_ids.end()) {
      finish(s, FinishReason::Stop);
      continue;
    }
    ++s.generated, ++generated_tokens;
    s.history.push_back(tok);
    if (s.req->logprobs >= 0 && s.req->on_logprobs) s.req->on_logprobs(token_logprobs(raw, tok, s.req->logprobs));
    if (s.req->on_token && !s.req->on_token(tok)) {
      finish(s, FinishReason::Cancelled);
      continue;
    }
    if (s.generated >= s.req->max_tokens) {
      finish(s, FinishReason::Length);
      continue;
    }
    s.pending.assign(1, tok);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps, stats_.prompt_tokens += prompt_tokens, stats_.generated_tokens += generated_tokens;
  stats_.step_s += step_s;
  return true;
}

void Batcher::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto busy = [&] { return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return bool(s.req); }); };
      cv_.wait(lock, [&] { return !running_ || !queue_.empty() || busy(); });
      if (!running_) return;
    }
    step();
  }
}

void Batcher::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  running_ = true, stopped_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_ && !thread_.joinable()) return;
    running_ = false, stopped_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  for (Slot& s : slots_)
    if (s.req) finish(s, FinishReason::Cancelled);
  std::deque<std::shared_ptr<GenRequest>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
  }
  for (auto& r : left)
    if (r->on_done) r->on_done(FinishReason::Cancelled, GenUsage{int64_t(r->prompt.size()), 0}, "");
}

BatcherStats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BatcherStats s = stats_;
  s.busy_slots = int(std::count_if(slots_.begin(), slots_.end(), [](const Slot& x) { return bool(x.req); }));
  s.queued = queue_.size();
  return s;
}

}  // namespace moeflux
