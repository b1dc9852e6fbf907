// Sampling chain (see sampler.h for the order and conventions).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "engine/session.h"

namespace moeflux {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail("temperature must be >= 0, got ", temperature);
  if (top_k < 0) fail("top-k must be >= 0 (0 turns it off), got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top-p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min-p must be in [0, 1], got ", min_p);
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    fail("repeat penalty must be > 0, got ", repeat_penalty);
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty))
    fail("presence / frequency penalties must be finite numbers");
  if (penalty_last_n < -1) fail("penalty window must be >= -1, got ", penalty_last_n);
  for (const auto& [id, bias] : logit_bias)
    if (id < 0 || !std::isfinite(bias)) fail("logit bias ", bias, " of token ", id, ": a token id >= 0 and a finite bias");
}

SamplingParams SamplingParams::greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

namespace {
bool penalizes(const SamplingParams& p) {
  return p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// The penalty window's tokens below vocab and how often each occurs.
std::unordered_map<int32_t, int> window_counts(std::span<const int32_t> history, int64_t vocab, const SamplingParams& p) {
  size_t first = 0;
  if (p.penalty_last_n >= 0 && history.size() > size_t(p.penalty_last_n)) first = history.size() - size_t(p.penalty_last_n);
  std::unordered_map<int32_t, int> count;
  for (size_t i = first; i < history.size(); ++i)
    if (history[i] >= 0 && history[i] < vocab) ++count[history[i]];
  return count;
}
}  // namespace

void apply_penalties(const std::function<float&(int32_t)>& logit, int64_t vocab, std::span<const int32_t> history,
                     const SamplingParams& p) {
  if (!penalizes(p)) return;
  for (const auto& [tok, n] : window_counts(history, vocab, p)) {
    float& l = logit(tok);
    l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= p.presence_penalty + p.frequency_penalty * float(n);
  }
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> history, const SamplingParams& p) {
  apply_penalties([&](int32_t t) -> float& { return logits[size_t(t)]; }, int64_t(logits.size()), history, p);
}

namespace {
// sample()'s order of candidates: larger first, equal ones by the lower id.
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
}  // namespace

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { p_.validate(); }

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  for (const auto& [id, bias] : p_.logit_bias) {
    if (size_t(id) >= logits.size()) fail("logit bias of token ", id, ": the vocabulary has ", logits.size());
    logits[size_t(id)] += bias;
  }
  apply_penalties(logits, history, p_);
  if (p_.temperature == 0.0f) return argmax(logits);
  cand_.clear();
  for (size_t i = 0; i < logits.size(); ++i) cand_.emplace_back(logits[i] / p_.temperature, int32_t(i));
  size_t n = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  return draw(n);
}

int32_t Sampler::draw(size_t n) {
  // softmax over the kept candidates (sorted, so [0] is the max)
  std::vector<double> prob(n);
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += (prob[i] = std::exp(double(cand_[i].first - cand_[0].first)));
  for (auto& q : prob) q /= z;
  if (p_.top_p < 1.0f) {
    double c = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      c += prob[i];
      if (c >= double(p_.top_p)) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p_.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && prob[keep] >= double(p_.min_p) * prob[0]) ++keep;
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += prob[i];
  double r = uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    r -= prob[i];
    if (r < 0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

std::vector<int32_t> Sampler::touched(std::span<const int32_t> history, int64_t vocab) const {
  std::vector<int32_t> t;
  for (const auto& [id, bias] : p_.logit_bias) {
    if (id >= vocab) fail("logit bias of token ", id, ": the vocabulary has ", vocab);
    t.push_back(id);
  }
  if (penalizes(p_))
    for (const auto& [tok, n] : window_counts(history, vocab, p_)) t.push_back(tok);
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

int64_t Sampler::shortlist(std::span<const int32_t> history, int64_t vocab) const {
  // Greedy: the best token the biases and penalties leave alone. Top-k: k of them, and a margin
  // so that the k-th rarely ties with the last of the list.
  constexpr int64_t kMargin = 16;
  int64_t n = 0;
  if (p_.temperature == 0.0f) n = 1;
  else if (p_.top_k > 0) n = p_.top_k + kMargin;
  else return 0;
  for (const auto& [id, bias] : p_.logit_bias)
    if (id >= vocab) return 0;  // sample() names the error
  n += int64_t(touched(history, vocab).size());
  return n <= kMaxShortlist && n < vocab ? n : 0;
}

int32_t Sampler::sample_top(std::span<const float> vals, std::span<const int32_t> ids, const ReadLogits& read,
                            std::span<const int32_t> history, int64_t vocab) {
  MF_ASSERT(vals.size() == ids.size() && !vals.empty());
  const std::vector<int32_t> S = touched(history, vocab);
  std::vector<float> picked(S.size());
  if (!S.empty()) read(S, picked.data());
  // The shortlist and the touched tokens with their logits as sample() changes them. The
  // others keep theirs: those not listed are at most the list's last, and after it by id.
  cand_.clear();
  std::unordered_map<int32_t, size_t> where;
  size_t untouched = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    where.emplace(ids[i], cand_.size());
    cand_.emplace_back(vals[i], ids[i]);
    untouched += !std::binary_search(S.begin(), S.end(), ids[i]);
  }
  for (size_t i = 0; i < S.size(); ++i)
    if (auto [it, added] = where.emplace(S[i], cand_.size()); added) cand_.emplace_back(picked[i], S[i]);
    else cand_[it->second].first = picked[i];
  for (const auto& [id, bias] : p_.logit_bias) cand_[where.at(id)].first += bias;
  apply_penalties([&](int32_t t) -> float& { return cand_[where.at(t)].first; }, vocab, history, p_);
  const size_t k = p_.temperature == 0.0f ? 1 : size_t(p_.top_k);
  bool decided = p_.temperature == 0.0f || p_.top_k > 0;
  decided = decided && untouched >= k;  // the k-th is at least the best untouched one left out
  if (decided && p_.temperature == 0.0f)  // argmax: the largest, the lower id among equal ones
    return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;
  if (decided) {
    for (auto& c : cand_) c.first /= p_.temperature;
    std::partial_sort(cand_.begin(), cand_.begin() + ptrdiff_t(k), cand_.end(), by_logit);
    // a token left out has at most the list's last logit: below the k-th after the division
    if (cand_[k - 1].first > vals.back() / p_.temperature) return draw(k);
  }
  std::vector<float> all(static_cast<size_t>(vocab));
  read({}, all.data());
  return sample(all, history);
}

}  // namespace moeflux
