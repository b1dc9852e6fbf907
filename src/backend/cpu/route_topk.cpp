// route_softmax_topk: the reference router's results without its allocations and sort.
#include <algorithm>

#include "core/error.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/ref/ref.h"

namespace moeflux {

void route_softmax_topk(const float* logits, int64_t n_experts, int64_t k, bool renorm, int32_t* ids,
                        float* weights) {
  MF_ASSERT(k >= 0 && k <= n_experts);
  constexpr int64_t kMaxExperts = 1024, kMaxK = 64;
  if (n_experts > kMaxExperts || k > kMaxK) return route_softmax_topk_ref(logits, n_experts, k, renorm, ids, weights);
  if (k == 0) return;
  float p[kMaxExperts];  // the reference's softmax, on the stack
  std::copy_n(logits, n_experts, p);
  softmax_ref(p, n_experts);
  // The k best by topk_ref's order (higher p first, then lower id), kept sorted by insertion.
  auto better = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  int64_t count = 0;
  for (int32_t i = 0; i < int32_t(n_experts); ++i) {
    if (count == k && !better(i, ids[k - 1])) continue;
    int64_t j = count < k ? count++ : k - 1;
    for (; j > 0 && better(i, ids[j - 1]); --j) ids[j] = ids[j - 1];
    ids[j] = i;
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += (weights[i] = p[ids[i]]);
  if (renorm)
    for (int64_t i = 0; i < k; ++i) weights[i] /= sum;
}

}  // namespace moeflux
