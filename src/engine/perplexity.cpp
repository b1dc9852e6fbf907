// Sliding-window perplexity.
#include "engine/perplexity.h"

#include <cmath>

#include "core/error.h"
#include "engine/session.h"

namespace moeflux {

PerplexityResult perplexity(const Model& m, std::span<const int32_t> ids, int64_t ctx, int64_t stride,
                            const std::function<void(int64_t, int64_t, double)>& progress) {
  const int64_t n = int64_t(ids.size());
  if (ctx < 2) fail("perplexity: --ctx must be at least 2, got ", ctx);
  if (stride < 1 || stride > ctx) fail("perplexity: --stride must be in [1, ctx], got ", stride);
  if (ctx > m.cfg.max_seq_len) fail("perplexity: --ctx ", ctx, " exceeds the model's context ", m.cfg.max_seq_len);
  if (n < 2) fail("perplexity: need at least 2 tokens, got ", n);
  const int64_t total = (std::max<int64_t>(n - ctx, 0) + stride - 1) / stride + 1;
  const int64_t V = m.cfg.vocab_size;
  PerplexityResult r;
  double sum = 0, sum2 = 0;
  int64_t prev_end = 0;
  Session s(m);
  for (int64_t b = 0; b < n; b += stride) {
    const int64_t e = std::min(b + ctx, n);
    const int64_t targets = e - b - 1;  // positions b+1 .. e-1 are predictable in this window
    const int64_t first = std::max<int64_t>(0, targets - (e - prev_end));
    s.reset();
    auto logits = s.forward(ids.subspan(size_t(b), size_t(e - b)));
    for (int64_t t = first; t < targets; ++t) {
      const float* l = logits.data() + t * V;
      double mx = l[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(l[v]));
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
      const double nll = std::log(z) + mx - double(l[ids[size_t(b + t + 1)]]);
      sum += nll;
      sum2 += nll * nll;
      ++r.n_scored;
    }
    prev_end = e;
    ++r.n_windows;
    if (progress) progress(r.n_windows, total, std::exp(sum / double(r.n_scored)));
    if (e == n) break;
  }
  r.mean_nll = sum / double(r.n_scored);
  r.ppl = std::exp(r.mean_nll);
  const double var = std::max(0.0, sum2 / double(r.n_scored) - r.mean_nll * r.mean_nll);
  r.ppl_err = r.ppl * std::sqrt(var / double(r.n_scored));
  return r;
}

}  // namespace moeflux
