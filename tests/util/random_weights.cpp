// Random weights of every QWeight format (see random_weights.h).
#include "util/random_weights.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/group_lanes.h"

namespace moeflux::test {

uint16_t f32_to_f16_bits(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (a < 6.103515625e-05f)  // subnormal: multiples of 2^-24
    return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int man = int(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  int exp = e - 1 + 15;
  if (man == 1024) man = 0, ++exp;
  if (exp >= 31) return uint16_t(sign | 0x7bff);  // clamp to the largest finite
  return uint16_t(sign | uint16_t(exp << 10) | uint16_t(man));
}

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

namespace {
// Stores bf16 values (exact as f32) as t.
std::vector<uint8_t> store_as(const std::vector<uint16_t>& bf, DType t) {
  std::vector<uint8_t> out(bf.size() * dtype_size(t));
  for (size_t i = 0; i < bf.size(); ++i) {
    const float f = bf16_to_f32(bf[i]);
    if (t == DType::F32) std::memcpy(out.data() + 4 * i, &f, 4);
    else if (t == DType::BF16) std::memcpy(out.data() + 2 * i, &bf[i], 2);
    else {
      const uint16_t h = f32_to_f16_bits(f);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}
}  // namespace

OwnedWeight random_affine(int64_t rows, int64_t cols, int bits, int group_size, DType sdtype,
                          uint32_t seed) {
  OwnedWeight o;
  const auto v = randn(size_t(rows * cols), seed, 0.05f);
  const int64_t wpr = cols * bits / 32, ng = cols / group_size;
  std::vector<uint32_t> packed(size_t(rows * wpr));
  std::vector<uint16_t> sc(size_t(rows * ng)), bi(size_t(rows * ng));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row_affine_ref(v.data() + r * cols, cols, bits, group_size, packed.data() + r * wpr,
                            sc.data() + r * ng, bi.data() + r * ng);
  o.data.resize(packed.size() * 4);
  std::memcpy(o.data.data(), packed.data(), o.data.size());
  o.scales = store_as(sc, sdtype);
  o.biases = store_as(bi, sdtype);
  QWeight& w = o.w;
  w.format = WFormat::Affine, w.dtype = DType::U32, w.rows = rows, w.cols = cols;
  w.bits = bits, w.group_size = group_size, w.sdtype = sdtype;
  w.data = o.data.data(), w.scales = o.scales.data(), w.biases = o.biases.data();
  return o;
}

OwnedWeight in_group_lanes(const OwnedWeight& o) {
  OwnedWeight l{o.w, std::vector<uint8_t>(o.data.size()), o.scales, o.biases};
  convert_group_lanes(o.w, 0, o.w.rows, true, l.data.data());
  l.w.data = l.data.data();
  l.w.scales = l.scales.data(), l.w.biases = l.biases.data();
  l.w.group_lanes = true;
  return l;
}

OwnedWeight random_dense(int64_t rows, int64_t cols, DType dtype, uint32_t seed) {
  OwnedWeight o;
  const auto v = randn(size_t(rows * cols), seed, 0.05f);
  o.data.resize(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::F32) std::memcpy(o.data.data() + 4 * i, &v[i], 4);
    else {
      const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16_bits(v[i]);
      std::memcpy(o.data.data() + 2 * i, &h, 2);
    }
  }
  o.w.format = WFormat::Dense, o.w.dtype = dtype, o.w.rows = rows, o.w.cols = cols;
  o.w.data = o.data.data();
  return o;
}

OwnedWeight random_fp8(int64_t rows, int64_t cols, int block_rows, int block_cols, DType sdtype,
                       uint32_t seed, bool nan_free) {
  OwnedWeight o;
  std::mt19937 rng(seed);
  o.data.resize(size_t(rows * cols));
  for (auto& b : o.data) {
    do b = uint8_t(rng() & 0xff);
    while (nan_free && (b & 0x7f) == 0x7f);
  }
  const int64_t nbr = (rows + block_rows - 1) / block_rows, nbc = (cols + block_cols - 1) / block_cols;
  std::vector<uint16_t> sc(size_t(nbr * nbc));
  std::uniform_real_distribution<float> u(1e-3f, 1e-2f);
  for (auto& s : sc) s = f32_to_bf16(u(rng));
  o.scales = store_as(sc, sdtype);
  QWeight& w = o.w;
  w.format = WFormat::Fp8Block, w.dtype = DType::F8_E4M3, w.rows = rows, w.cols = cols;
  w.block_rows = block_rows, w.block_cols = block_cols, w.sdtype = sdtype;
  w.data = o.data.data(), w.block_scales = o.scales.data();
  return o;
}

}  // namespace moeflux::test
