// Reference DeepSeek-V3 "noaux_tc" router: sigmoid scores, bias-corrected group-limited
// selection, unbiased weights. Tested in tests/ops/test_route_grouped.cpp against a brute-force
// enumeration of the same rule.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "backend/ref/ref.h"

namespace moeflux {

void route_sigmoid_grouped_ref(const float* logits, const float* bias, const GroupedRouteParams& p,
                               int32_t* ids, float* weights) {
  const int64_t n = p.n_experts, per_group = n / p.n_group;
  // PRECOND: validated from config.json by the architecture (n_experts % n_group == 0,
  // two or more experts per group, topk_group <= n_group, k within the kept groups).
  MF_ASSERT(n % p.n_group == 0 && per_group >= 2 && p.topk_group <= p.n_group &&
            p.k <= p.topk_group * per_group);
  std::vector<float> s(static_cast<size_t>(n)), choice(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    s[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[size_t(e)] = s[size_t(e)] + (bias ? bias[e] : 0.0f);
  }
  // Group score: sum of the two best choice scores in the group.
  std::vector<float> group_score(static_cast<size_t>(p.n_group));
  int32_t best2[2];
  for (int64_t g = 0; g < p.n_group; ++g) {
    topk_ref(choice.data() + g * per_group, per_group, 2, best2);
    group_score[size_t(g)] = choice[size_t(g * per_group + best2[0])] + choice[size_t(g * per_group + best2[1])];
  }
  std::vector<int32_t> kept(static_cast<size_t>(p.topk_group));
  topk_ref(group_score.data(), p.n_group, p.topk_group, kept.data());
  // Experts of dropped groups compete with a choice score of 0, not -inf: transformers'
  // masked_fill(..., 0.0). With a negative bias a dropped expert can then win, as it does there.
  std::vector<float> masked(static_cast<size_t>(n), 0.0f);
  for (int32_t g : kept)
    for (int64_t i = 0; i < per_group; ++i) masked[size_t(g * per_group + i)] = choice[size_t(g * per_group + i)];
  topk_ref(masked.data(), n, p.k, ids);
  float sum = 0.0f;
  for (int64_t i = 0; i < p.k; ++i) sum += (weights[i] = s[size_t(ids[i])]);
  const float denom = p.renorm ? sum + 1e-20f : 1.0f;
  for (int64_t i = 0; i < p.k; ++i) weights[i] = weights[i] / denom * p.scaling;
}

}  // namespace moeflux
