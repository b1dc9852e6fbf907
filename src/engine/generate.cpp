// Greedy decoding.
#include "engine/generate.h"

namespace moeflux {

std::vector<int32_t> greedy_continue(Session& s, std::span<const float> last_logits, int n) {
  std::vector<int32_t> out;
  std::vector<float> logits(last_logits.begin(), last_logits.end());
  for (int i = 0; i < n; ++i) {
    int32_t next = argmax(logits);
    out.push_back(next);
    if (i + 1 < n) logits = s.forward(std::span<const int32_t>(&next, 1), {.all_logits = false});
  }
  return out;
}

std::vector<int32_t> greedy_generate(Session& s, std::span<const int32_t> prompt, int n) {
  s.reset();
  auto logits = s.forward(prompt, {.all_logits = false});
  return greedy_continue(s, logits, n);
}

}  // namespace moeflux
