// The forward pass: embeddings, decoder layers (mixer + ffn with pre-norms), final norm, head.
#include "engine/session.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/ref/ref.h"

namespace moeflux {

Session::Session(const Model& m) : m_(m) {
  for (const auto& l : m.layers) states_.push_back(l.mixer->make_state());
}

void Session::reset() {
  for (auto& s : states_) s->clear();
  tokens_.clear();
  broken_ = false;
}

size_t Session::state_bytes() const {
  size_t b = 0;
  for (const auto& s : states_) b += s->bytes();
  return b;
}

std::vector<float> Session::forward(std::span<const int32_t> ids, const ForwardOptions& opt) {
  const ModelConfig& c = m_.cfg;
  const int64_t T = int64_t(ids.size()), pos0 = pos();
  if (T == 0) fail("forward: no tokens given");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail("token id ", ids[i], " at index ", i, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (pos0 + T > c.max_seq_len)
    fail("context of ", pos0 + T, " tokens exceeds max_position_embeddings ", c.max_seq_len);
  if (broken_) {  // replay the tokens so far into a clean state
    const std::vector<int32_t> keep = tokens_;
    for (auto& s : states_) s->clear();
    tokens_.clear();
    try {
      if (!keep.empty()) run(keep, ForwardOptions{false, nullptr});
    } catch (...) {
      tokens_ = keep;
      throw;
    }
    broken_ = false;
  }
  try {
    return run(ids, opt);
  } catch (...) {
    broken_ = true;
    throw;
  }
}

std::vector<float> Session::run(std::span<const int32_t> ids, const ForwardOptions& opt) {
  const ModelConfig& c = m_.cfg;
  const int64_t T = int64_t(ids.size()), dim = c.dim, pos0 = pos();

  std::vector<float> x(static_cast<size_t>(T * dim)), h(static_cast<size_t>(T * dim)), y(static_cast<size_t>(T * dim));
  for (int64_t t = 0; t < T; ++t) dequant_row_ref(m_.embed, ids[size_t(t)], x.data() + t * dim);
  const int64_t L = int64_t(m_.layers.size());
  if (opt.hidden) {
    opt.hidden->assign(size_t((L + 1) * T * dim), 0.0f);
    std::copy(x.begin(), x.end(), opt.hidden->begin());
  }
  const float eps = float(c.norm_eps);
  for (int64_t l = 0; l < L; ++l) {
    const Layer& layer = m_.layers[size_t(l)];
    // x += y (unless first), then h = norm(x), token by token over the threads.
    auto add_norm = [&](const std::vector<float>& w, bool add) {
      for_tokens(T, dim * 12, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          float* xt = x.data() + t * dim;
          if (add) add_scaled(1.0f, y.data() + t * dim, xt, dim);
          rmsnorm(xt, w.data(), dim, eps, h.data() + t * dim);
        }
      });
    };
    PhaseTimer pt("layer.norms");
    add_norm(layer.attn_norm, false);
    pt.next("layer.mixer");
    layer.mixer->forward(h.data(), T, pos0, *states_[size_t(l)], y.data());
    pt.next("layer.norms");
    add_norm(layer.ffn_norm, true);
    pt.next("layer.ffn");
    layer.ffn->forward(h.data(), T, y.data());
    pt.next("layer.residual");
    add_scaled(1.0f, y.data(), x.data(), int64_t(x.size()));
    if (opt.hidden && l + 1 < L) std::copy(x.begin(), x.end(), opt.hidden->begin() + (l + 1) * T * dim);
  }
  for (int64_t t = 0; t < T; ++t) rmsnorm(x.data() + t * dim, m_.final_norm.data(), dim, eps, x.data() + t * dim);
  if (opt.hidden) std::copy(x.begin(), x.end(), opt.hidden->begin() + L * T * dim);
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());

  const int64_t first = opt.all_logits ? 0 : T - 1, V = c.vocab_size;
  PhaseTimer pt("lm_head");
  std::vector<float> logits(size_t((T - first) * V));
  matmul(m_.lm_head, x.data() + first * dim, T - first, logits.data());
  return logits;
}

int32_t argmax(std::span<const float> logits) {
  MF_ASSERT(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

}  // namespace moeflux
