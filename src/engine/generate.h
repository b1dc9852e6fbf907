// Greedy generation on top of a Session (sampling arrives with the run / chat commands).
#pragma once
#include <span>
#include <vector>

#include "engine/session.h"

namespace moeflux {

// Given the logits of the last position already fed to `s`, picks argmax, feeds it, and
// repeats: returns n tokens. The last generated token is not fed back.
std::vector<int32_t> greedy_continue(Session& s, std::span<const float> last_logits, int n);

// Prefill `prompt` into a fresh state of `s`, then greedy_continue for n tokens.
std::vector<int32_t> greedy_generate(Session& s, std::span<const int32_t> prompt, int n);

}  // namespace moeflux
