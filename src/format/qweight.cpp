// Reference dequantisation and quantisation of QWeight rows (the spec the fast kernels match).
#include "format/qweight.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "format/group_lane_layout.h"

namespace moeflux {

size_t QWeight::row_bytes() const {
  switch (format) {
    case WFormat::Dense: return size_t(cols) * dtype_size(dtype);
    case WFormat::Affine: return size_t(cols) * size_t(bits) / 8;
    case WFormat::Fp8Block: return size_t(cols);
  }
  return 0;
}

std::string QWeight::describe() const {
  std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  switch (format) {
    case WFormat::Dense: return std::string(dtype_name(dtype)) + " " + shape;
    case WFormat::Affine:
      return "affine q" + std::to_string(bits) + " g" + std::to_string(group_size) + (group_lanes ? " lanes " : " ") + shape;
    case WFormat::Fp8Block:
      return "fp8 block " + std::to_string(block_rows) + "x" + std::to_string(block_cols) + " " + shape;
  }
  return shape;
}

namespace {
// Element i of a little-endian bit stream of u32 words, `bits` wide.
inline uint32_t unpack_bits(const uint8_t* words, int64_t i, int bits) {
  const uint64_t bit = uint64_t(i) * uint64_t(bits);
  const uint64_t w = bit / 32, sh = bit % 32;
  uint32_t lo;
  std::memcpy(&lo, words + 4 * w, 4);
  uint64_t v = lo >> sh;
  if (sh + bits > 32) {
    uint32_t hi;
    std::memcpy(&hi, words + 4 * (w + 1), 4);
    v |= uint64_t(hi) << (32 - sh);
  }
  return uint32_t(v & ((1u << bits) - 1u));
}
}  // namespace

void dequant_row_ref(const QWeight& w, int64_t r, float* out) {
  MF_ASSERT(r >= 0 && r < w.rows);
  const uint8_t* row = w.data + size_t(r) * w.row_bytes();
  switch (w.format) {
    case WFormat::Dense:
      for (int64_t c = 0; c < w.cols; ++c) out[c] = load_f32(w.dtype, row, size_t(c));
      return;
    case WFormat::Affine: {
      const int64_t ng = w.cols / w.group_size;
      for (int64_t g = 0; g < ng; ++g) {
        const float s = load_f32(w.sdtype, w.scales, size_t(r * ng + g));
        const float b = load_f32(w.sdtype, w.biases, size_t(r * ng + g));
        for (int64_t k = 0; k < w.group_size; ++k) {
          const int64_t c = g * w.group_size + k;
          // group-lane rows: code c is code c % 8 of natural word c / 8, moved (group_lanes.h)
          const int64_t cc = w.group_lanes ? group_lane_word(c / 8, ng, w.group_size / 8) * 8 + c % 8 : c;
          out[c] = float(unpack_bits(row, cc, w.bits)) * s + b;
        }
      }
      return;
    }
    case WFormat::Fp8Block: {
      // Decode table of the 256 e4m3 bytes: the per-element ldexp dominated FP8 matvecs.
      static const std::array<float, 256> kE4m3 = [] {
        std::array<float, 256> t{};
        for (int b = 0; b < 256; ++b) t[size_t(b)] = f8e4m3_to_f32(uint8_t(b));
        return t;
      }();
      const int64_t nbc = (w.cols + w.block_cols - 1) / w.block_cols;
      const int64_t br = r / w.block_rows;
      for (int64_t bc = 0; bc < nbc; ++bc) {
        const float s = load_f32(w.sdtype, w.block_scales, size_t(br * nbc + bc));
        const int64_t end = std::min(w.cols, (bc + 1) * w.block_cols);
        for (int64_t c = bc * w.block_cols; c < end; ++c) out[c] = kE4m3[row[c]] * s;
      }
      return;
    }
  }
}

void quantize_row_affine_ref(const float* x, int64_t cols, int bits, int group_size,
                             uint32_t* packed, uint16_t* scales, uint16_t* biases) {
  MF_ASSERT(cols % group_size == 0 && (cols * bits) % 32 == 0);
  const int nb = (1 << bits) - 1;
  std::memset(packed, 0, size_t(cols * bits / 32) * 4);
  for (int64_t g = 0; g < cols / group_size; ++g) {
    const float* v = x + g * group_size;
    float lo = v[0], hi = v[0];
    for (int k = 1; k < group_size; ++k) lo = std::min(lo, v[k]), hi = std::max(hi, v[k]);
    const uint16_t sb = f32_to_bf16(std::max((hi - lo) / float(nb), 1e-7f));
    const uint16_t bb = f32_to_bf16(lo);
    scales[g] = sb;
    biases[g] = bb;
    const float s = bf16_to_f32(sb), b = bf16_to_f32(bb);
    for (int k = 0; k < group_size; ++k) {
      const int64_t c = g * group_size + k;
      const uint32_t q = uint32_t(std::clamp(std::nearbyint((v[k] - b) / s), 0.0f, float(nb)));
      const uint64_t bit = uint64_t(c) * bits;
      packed[bit / 32] |= q << (bit % 32);
      if (bit % 32 + bits > 32) packed[bit / 32 + 1] |= q >> (32 - bit % 32);
    }
  }
}

}  // namespace moeflux
