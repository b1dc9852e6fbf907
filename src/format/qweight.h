// QWeight: a view of one weight matrix (rows = output features, cols = input features) in
// any of the storage formats the engine reads, plus its reference dequantisation.
//   Dense:    row-major F32 / F16 / BF16.
//   Affine:   MLX group quantisation. Per group of `group_size` consecutive inputs of a row,
//             w = q * scale + bias. q is `bits` wide, packed LSB-first as a little-endian
//             bit stream of u32 words (8 x 4-bit or 4 x 8-bit per word; 3/5/6-bit straddle
//             words). scales / biases: (rows, cols / group_size) of `sdtype`.
//   Fp8Block: DeepSeek FP8: F8_E4M3 row-major weights, w = q * scale_inv[r / br][c / bc]
//             with f32 (or bf16) block scales of (ceil(rows / br), ceil(cols / bc)).
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace moeflux {

enum class WFormat : uint8_t { Dense, Affine, Fp8Block };

struct QWeight {
  WFormat format = WFormat::Dense;
  DType dtype = DType::F32;  // element type of Dense; F8_E4M3 for Fp8Block; U32 for Affine
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  // Affine
  int bits = 0, group_size = 0;
  DType sdtype = DType::BF16;
  const uint8_t* scales = nullptr;  // (rows, cols / group_size)
  const uint8_t* biases = nullptr;  // (rows, cols / group_size)
  // 4-bit affine only: each row's code words in group-lane order (backend/cpu/group_lanes.h), the CPU
  // integer matvec's layout; false: the natural order above.
  bool group_lanes = false;
  // Fp8Block
  int block_rows = 0, block_cols = 0;
  const uint8_t* block_scales = nullptr;  // (ceil(rows / block_rows), ceil(cols / block_cols)) of sdtype

  size_t row_bytes() const;   // bytes of one row of `data`
  size_t data_bytes() const { return row_bytes() * size_t(rows); }
  std::string describe() const;  // "bf16 [64, 128]", "affine q4 g64 [64, 128]"
};

// out[0..cols) = row r of w, dequantised to f32.
void dequant_row_ref(const QWeight& w, int64_t r, float* out);

// Affine group quantisation of one row (the converter's and tests' reference, MLX rounding:
// scale = (max - min) / (2^bits - 1), bias = min, both rounded to bf16 first).
// packed: cols * bits / 32 u32 words; scales / biases: cols / group_size bf16 values.
void quantize_row_affine_ref(const float* x, int64_t cols, int bits, int group_size,
                             uint32_t* packed, uint16_t* scales, uint16_t* biases);

}  // namespace moeflux
