// Random QWeights of every storage format for the CPU op tests and bench_ops: the weight
// owns its bytes, the QWeight views them. Affine weights come from quantize_row_affine_ref.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "format/qweight.h"

namespace moeflux::test {

struct OwnedWeight {
  QWeight w;
  std::vector<uint8_t> data, scales, biases;
  std::string name() const { return w.describe() + " s" + std::string(dtype_name(w.sdtype)); }
};

// f32 -> f16 bits, round to nearest even (normals and subnormals; test values stay finite).
uint16_t f32_to_f16_bits(float f);

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f);

// Affine `bits` / `group_size`, scales and biases stored as sdtype (BF16 / F16 / F32).
OwnedWeight random_affine(int64_t rows, int64_t cols, int bits, int group_size, DType sdtype,
                          uint32_t seed);
// o with its codes rewritten in group-lane order (backend/cpu/group_lanes.h), as a repacked pack holds
// them; scales and biases copied. PRECOND: group_lanes_eligible(o.w).
OwnedWeight in_group_lanes(const OwnedWeight& o);
// Dense F32 / F16 / BF16.
OwnedWeight random_dense(int64_t rows, int64_t cols, DType dtype, uint32_t seed);
// FP8 e4m3 with (block_rows x block_cols) scales of sdtype; `nan_free` skips the two NaN bytes.
OwnedWeight random_fp8(int64_t rows, int64_t cols, int block_rows, int block_cols, DType sdtype,
                       uint32_t seed, bool nan_free = true);

}  // namespace moeflux::test
