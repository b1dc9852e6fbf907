// Sizes of a loaded model for benchmarks and `inspect`-like reports: bytes and parameters of
// all weights, and the weight bytes / multiply-adds one token touches (dense weights, one
// embedding row, and n_experts_active routed experts per MoE layer).
#pragma once
#include <cstdint>

#include "model/model.h"

namespace moeflux {

struct ModelStats {
  uint64_t weight_bytes = 0;       // every tensor
  uint64_t params = 0;             // weight elements (quantised ones counted unpacked)
  uint64_t bytes_per_token = 0;    // weight bytes read to decode one token
  uint64_t params_per_token = 0;   // weight elements used by one token (2 flops each)
};

ModelStats model_stats(const Model& m);

}  // namespace moeflux
