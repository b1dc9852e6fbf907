// Token sampling: repetition / presence / frequency penalties, temperature, top-k, top-p,
// min-p, seeded. Order: penalties -> (temperature 0: argmax) -> temperature -> top-k ->
// top-p -> min-p -> draw. The generator is a fixed mt19937_64 with our own uniform mapping,
// so the same seed gives the same tokens on every platform.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

namespace moeflux {

struct SamplingParams {
  float temperature = 0.8f;        // 0: greedy
  int top_k = 40;                  // 0: off
  float top_p = 0.95f;             // 1: off; in (0, 1]
  float min_p = 0.05f;             // 0: off; in [0, 1]
  float repeat_penalty = 1.0f;     // 1: off; > 0 (CTRL / transformers style)
  float presence_penalty = 0.0f;   // OpenAI style
  float frequency_penalty = 0.0f;  // OpenAI style
  int penalty_last_n = 64;         // tokens of history the penalties look at (-1: all)
  uint64_t seed = 0;
  // Added to a token's logit before anything else (OpenAI's logit_bias: -100 bans it, 100
  // all but forces it); ids outside the logits are an error of sample().
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Error naming the parameter when a value is out of range.
  void validate() const;
  static SamplingParams greedy();
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token from logits (modified in place) given the tokens so far.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  const SamplingParams& params() const { return p_; }

  // Sampling from a shortlist: a row's largest logits and a reader of any of them (a backend
  // that keeps the logits: Engine's TopLogits), drawing the token sample() would draw from
  // the whole row. How many of the largest it needs (0: sample() on the whole row instead).
  int64_t shortlist(std::span<const int32_t> history, int64_t vocab) const;
  // Reads logits of a row: out[i] that of token ids[i]; with no ids all of them.
  using ReadLogits = std::function<void(std::span<const int32_t> ids, float* out)>;
  // vals, ids: the row's shortlist() largest in logit_order_key's order. Reads the logits of
  // the tokens the penalties and biases touch, and the whole row where the shortlist cannot
  // decide (ties at its end).
  int32_t sample_top(std::span<const float> vals, std::span<const int32_t> ids, const ReadLogits& read,
                     std::span<const int32_t> history, int64_t vocab);
  static constexpr int64_t kMaxShortlist = 1024;

 private:
  double uniform();  // [0, 1)
  // The tokens whose logits the biases and penalties change (ascending).
  std::vector<int32_t> touched(std::span<const int32_t> history, int64_t vocab) const;
  // The draw from cand_'s first n (sorted, top-k applied): softmax, top-p, min-p.
  int32_t draw(size_t n);
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

// Penalties alone (exposed for tests): in place on logits.
void apply_penalties(std::span<float> logits, std::span<const int32_t> history, const SamplingParams& p);
// The same through logit(token) -> float& for the tokens of history below vocab.
void apply_penalties(const std::function<float&(int32_t)>& logit, int64_t vocab, std::span<const int32_t> history,
                     const SamplingParams& p);

}  // namespace moeflux
