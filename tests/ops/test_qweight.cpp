// Quantised formats: affine group quantisation (2..8 bits, group 32/64/128) round trips and
// bit layout, FP8 e4m3 decoding of every byte, FP8 block-scaled rows, f16 / bf16 conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "format/qweight.h"
#include "backend/ref/ref.h"

namespace moeflux {
namespace {

TEST(QWeight, AffinePackingIsLsbFirst) {
  // 8 four-bit values 0..7 in one word: value i at bits 4i..4i+3.
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i % 16);
  std::vector<uint32_t> packed(8);
  std::vector<uint16_t> s(1), b(1);
  quantize_row_affine_ref(x.data(), 64, 4, 64, packed.data(), s.data(), b.data());
  EXPECT_EQ(bf16_to_f32(s[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(b[0]), 0.0f);
  EXPECT_EQ(packed[0], 0x76543210u);
  EXPECT_EQ(packed[1], 0xfedcba98u);
}

TEST(QWeight, AffineRoundTripAllWidths) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      const int64_t rows = 3, cols = 256;
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (auto& v : w) v = d(rng);
      const int64_t wpr = cols * bits / 32, ng = cols / group;
      std::vector<uint32_t> packed(static_cast<size_t>(rows * wpr));
      std::vector<uint16_t> sc(static_cast<size_t>(rows * ng)), bi(static_cast<size_t>(rows * ng));
      for (int64_t r = 0; r < rows; ++r)
        quantize_row_affine_ref(w.data() + r * cols, cols, bits, group, packed.data() + r * wpr,
                                sc.data() + r * ng, bi.data() + r * ng);
      QWeight q;
      q.format = WFormat::Affine, q.dtype = DType::U32, q.rows = rows, q.cols = cols;
      q.bits = bits, q.group_size = group, q.sdtype = DType::BF16;
      q.data = reinterpret_cast<const uint8_t*>(packed.data());
      q.scales = reinterpret_cast<const uint8_t*>(sc.data());
      q.biases = reinterpret_cast<const uint8_t*>(bi.data());
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequant_row_ref(q, r, row.data());
        for (int64_t c = 0; c < cols; ++c) {
          const float s = bf16_to_f32(sc[size_t(r * ng + c / group)]);
          // within half a step of the original (plus bf16 rounding of scale / bias)
          EXPECT_LE(std::fabs(row[size_t(c)] - w[size_t(r * cols + c)]), 0.5f * s + 0.02f * std::fabs(w[size_t(r * cols + c)]) + 1e-2f)
              << bits << "b g" << group;
        }
      }
    }
  }
}

TEST(QWeight, Fp8E4m3EveryByte) {
  for (int b = 0; b < 256; ++b) {
    const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
    const float v = f8e4m3_to_f32(uint8_t(b));
    if (exp == 15 && man == 7) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    double want = exp == 0 ? man / 8.0 * std::pow(2.0, -6) : (1 + man / 8.0) * std::pow(2.0, exp - 7);
    if (sign) want = -want;
    EXPECT_EQ(double(v), want) << b;
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
}

TEST(QWeight, Fp8BlockScaledRowsWithPartialBlocks) {
  const int64_t rows = 5, cols = 7;  // blocks of 2x3 -> 3 x 3 scales, partial at the edges
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(0x38 + i % 8);  // 1.0 .. 1.875
  std::vector<float> scales(9);
  for (size_t i = 0; i < 9; ++i) scales[i] = float(i + 1);
  QWeight w;
  w.format = WFormat::Fp8Block, w.dtype = DType::F8_E4M3, w.rows = rows, w.cols = cols;
  w.block_rows = 2, w.block_cols = 3, w.sdtype = DType::F32;
  w.data = q.data();
  w.block_scales = reinterpret_cast<const uint8_t*>(scales.data());
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequant_row_ref(w, r, row.data());
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(row[size_t(c)], f8e4m3_to_f32(q[size_t(r * cols + c)]) * scales[size_t((r / 2) * 3 + c / 3)]);
  }
}

TEST(QWeight, HalfConversions) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // ties to even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.14159f)), 3.140625f);
}

}  // namespace
}  // namespace moeflux
