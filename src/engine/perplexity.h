// Perplexity of a token sequence with sliding windows (as llama-perplexity / the transformers
// guide): windows start every `stride` tokens and span `ctx` tokens; each window scores its
// last (end - previous end) targets (at most ctx - 1). With stride < ctx every token after the
// first is scored exactly once; with stride == ctx the windows do not overlap and the first
// token of each window is not scored (it has no context). Each window runs in a fresh session.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "model/model.h"

namespace moeflux {

struct PerplexityResult {
  double ppl = 0;       // exp(mean NLL)
  double ppl_err = 0;   // standard error of ppl (delta method on the mean NLL)
  double mean_nll = 0;
  int64_t n_scored = 0;
  int64_t n_windows = 0;
};

// progress(windows_done, windows_total, running ppl)
PerplexityResult perplexity(const Model& m, std::span<const int32_t> ids, int64_t ctx, int64_t stride,
                            const std::function<void(int64_t, int64_t, double)>& progress = {});

}  // namespace moeflux
