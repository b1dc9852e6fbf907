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

void apply_penalties(std::span<float> logits, std::span<const int32_t> history, const SamplingParams& p) {
  if (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  size_t first = 0;
  if (p.penalty_last_n >= 0 && history.size() > size_t(p.penalty_last_n)) first = history.size() - size_t(p.penalty_last_n);
  std::unordered_map<int32_t, int> count;
  for (size_t i = first; i < history.size(); ++i)
    if (history[i] >= 0 && size_t(history[i]) < logits.size()) ++count[history[i]];
  for (const auto& [tok, n] : count) {
    float& l = logits[size_t(tok)];
    l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= p.presence_penalty + p.frequency_penalty * float(n);
  }
}

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
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
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

}  // namespace moeflux
