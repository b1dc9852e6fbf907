// The group-lane code layout (backend/cpu/group_lanes.h): conversions, the reference dequantisation of
// converted rows, and every CPU op on converted weights: the AVX-512 VNNI integer matvec that
// and the AVX2 integer matvec that read the layout against the reference, and the kernels that convert rows back (the float
// ones, matmul) bit for bit against the same weight in natural order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/group_lanes.h"
#include "backend/ref/ref.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

struct Shape {
  int64_t rows, cols;
  int group_size;
};
// One block of 16 groups and more, partial last blocks (12 groups of an expert's down rows,
// 20 of 32), every eligible group size; whole blocks only at group sizes 64 and 128 (the AVX2
// kernel's lanes_rows_full), and rows of 6 and 8 groups, and of a block and 8 (Qwen3.5's and
// Qwen3-235B's expert down rows: 512 and 1536 wide).
constexpr Shape kShapes[] = {{5, 768, 64}, {67, 2048, 64}, {9, 640, 32}, {4, 2176, 128}, {3, 64, 64}, {7, 640, 64},
                             {11, 1792, 64}, {6, 4096, 128}, {7, 384, 64}, {9, 512, 64}, {5, 1536, 64}};

TEST(GroupLanes, WordPositionsFollowTheDefinition) {
  // 768 columns in groups of 64: 12 groups of 8 words, one partial block (nb = 12); word 5 of
  // group 3 (natural word 29) sits at 5 * 12 + 3.
  EXPECT_EQ(group_lane_word(29, 12, 8), 63);
  // 2176 columns in groups of 128: 17 groups of 16 words; group 16 is alone in block 1.
  EXPECT_EQ(group_lane_word(16 * 16 + 7, 17, 16), 16 * 16 + 7);
  EXPECT_EQ(group_lane_word(1 * 16 + 2, 17, 16), 2 * 16 + 1);
  for (const Shape s : kShapes) {  // a permutation of each row's words
    const int64_t words = s.cols / 8, ng = s.cols / s.group_size;
    std::vector<int> seen(static_cast<size_t>(words), 0);
    for (int64_t k = 0; k < words; ++k) ++seen[size_t(group_lane_word(k, ng, s.group_size / 8))];
    for (int64_t k = 0; k < words; ++k) EXPECT_EQ(seen[size_t(k)], 1) << s.cols << " word " << k;
  }
}

TEST(GroupLanes, ConversionRoundTripsAndDequantisesTheSame) {
  for (const Shape s : kShapes) {
    const auto o = test::random_affine(s.rows, s.cols, 4, s.group_size, DType::BF16, 7);
    const test::OwnedWeight l = test::in_group_lanes(o);
    if (s.cols > s.group_size) {
      EXPECT_NE(l.data, o.data) << o.name();  // the words did move
    }
    std::vector<uint8_t> back(o.data.size());
    convert_group_lanes(l.w, 0, s.rows, false, back.data());
    EXPECT_EQ(back, o.data) << o.name();
    std::vector<float> a(static_cast<size_t>(s.cols)), b(a.size());
    for (int64_t r = 0; r < s.rows; ++r) {
      dequant_row_ref(o.w, r, a.data());
      dequant_row_ref(l.w, r, b.data());
      ASSERT_EQ(a, b) << o.name() << " row " << r;
    }
  }
}

// At every level and on 1 and 3 threads: matvec and matmul close to the reference (the
// integer path's x digits keep ~2^-23 of each group's largest |x|), and the same bits as the
// natural weight wherever rows are read in natural order (the float matvecs, matmul below
// AVX-512, the transposed product); the AVX-512 matmul decodes rows in the layout's order.
TEST(GroupLanes, EveryOpAtEveryIsa) {
  for (const Shape s : kShapes)
    for (DType sd : {DType::BF16, DType::F16, DType::F32}) {
      const auto o = test::random_affine(s.rows, s.cols, 4, s.group_size, sd, 11);
      const test::OwnedWeight l = test::in_group_lanes(o);
      const int64_t T = 3;
      const auto x = test::randn(size_t(T * s.cols), 12);
      std::vector<float> want(static_cast<size_t>(s.rows));
      matvec_ref(o.w, x.data(), want.data());
      for (int threads : {1, 3})
        for (CpuIsa isa : test::cpu_isas_available()) {
          set_cpu_threads(threads);
          ScopedCpuIsa scoped(isa);
          std::vector<float> yn(static_cast<size_t>(s.rows)), yl(yn.size());
          matvec(o.w, x.data(), yn.data());
          matvec(l.w, x.data(), yl.data());
          EXPECT_LE(test::rel_l2(yl, want), 1e-5) << o.name() << " " << cpu_isa_name(isa);
          if (isa != CpuIsa::Avx512Vnni) {
            EXPECT_EQ(yl, yn) << o.name() << " " << cpu_isa_name(isa);
          }
          std::vector<float> mn(static_cast<size_t>(T * s.rows)), ml(mn.size()), mref(mn.size());
          matmul(o.w, x.data(), T, mn.data());
          matmul(l.w, x.data(), T, ml.data());
          for (int64_t t = 0; t < T; ++t) matvec_ref(o.w, x.data() + t * s.cols, mref.data() + t * s.rows);
          EXPECT_LE(test::rel_l2(ml, mref), 1e-5) << o.name() << " matmul " << cpu_isa_name(isa);
          if (isa < CpuIsa::Avx512) {
            EXPECT_EQ(ml, mn) << o.name() << " matmul " << cpu_isa_name(isa);
          } else {  // rows decoded in the layout's own order: the same terms, summed in another order
            EXPECT_LE(test::rel_l2(ml, mn), 1e-6) << o.name() << " matmul " << cpu_isa_name(isa);
          }
          // The transposed product adds whole decoded rows element by element: the same bits.
          std::vector<float> tn(static_cast<size_t>(s.cols)), tl(tn.size());
          matvec_t_row_blocks(o.w, 1, 0, s.rows, s.rows, x.data(), s.rows, tn.data(), s.cols);
          matvec_t_row_blocks(l.w, 1, 0, s.rows, s.rows, x.data(), s.rows, tl.data(), s.cols);
          EXPECT_EQ(tl, tn) << o.name() << " matvec_t " << cpu_isa_name(isa);
        }
      set_cpu_threads(0);
    }
}

// A random 4-bit weight of shape s, its group-lane copy, x, and x prepared for the VNNI
// matvec of the copy (px.digits false if that failed).
struct VnniCase {
  test::OwnedWeight o;
  test::OwnedWeight l;
  std::vector<float> x;
  cpu::PreparedX px;
};
VnniCase vnni_case(const Shape s, DType sd, uint32_t seed) {
  VnniCase c{test::random_affine(s.rows, s.cols, 4, s.group_size, sd, seed), {}, test::randn(size_t(s.cols), seed + 1), {}};
  c.l = test::in_group_lanes(c.o);
  EXPECT_TRUE(cpu::kernels_avx512_vnni().prepare_special(c.l.w, c.x.data(), &c.px)) << c.o.name();
  return c;
}

// The integer matvec reads the layout itself: x prepared in group-lane order, and the rows as
// close to the reference as the natural order's integer loop (the float fallback would pass the
// test above too).
TEST(GroupLanes, IntegerMatvecReadsTheLayout) {
  if (cpu_isa_detected() < CpuIsa::Avx512Vnni) GTEST_SKIP() << "no AVX512-VNNI";
  const cpu::Kernels& k = cpu::kernels_avx512_vnni();
  for (const Shape s : kShapes) {
    VnniCase c = vnni_case(s, DType::BF16, 21);
    const auto& o = c.o;
    const auto& x = c.x;
    const test::OwnedWeight& l = c.l;
    cpu::PreparedX& px = c.px;
    EXPECT_TRUE(px.digits && px.group_lanes) << o.name();
    std::vector<float> y(static_cast<size_t>(s.rows), NAN), yn(y.size(), NAN), want(y.size());
    k.matvec_rows(l.w, px, y.data(), 0, s.rows);
    matvec_ref(o.w, x.data(), want.data());
    // No less accurate than the natural order's integer loop (the same x digits).
    cpu::PreparedX pn;
    ASSERT_TRUE(k.prepare_special(o.w, x.data(), &pn));
    EXPECT_FALSE(pn.group_lanes);
    k.matvec_rows(o.w, pn, yn.data(), 0, s.rows);
    EXPECT_LE(test::rel_l2(y, want), std::max(2 * test::rel_l2(yn, want), 1e-6)) << o.name();
    // A non-finite x leaves the weight to the float kernels, which read it in natural order.
    auto xn = x;
    xn[1] = INFINITY;
    EXPECT_FALSE(k.prepare_special(l.w, xn.data(), &px));
  }
}

// x's digits in group-lane order are the natural order's digits moved: the byte of digit k (0:
// the 2^16 one) of column 8 t + 2 j + e of group g (e = 0 lo, 1 hi) sits at step (g / 16) wg + t,
// vector 2 k + e, lane g % 16, byte j; in natural order at chunk col / 128, vector 2 k + e, byte
// (col % 128) / 2. Lanes past a partial block's groups are zero.
TEST(GroupLanes, VnniPrepareMovesTheNaturalDigits) {
  if (cpu_isa_detected() < CpuIsa::Avx512Vnni) GTEST_SKIP() << "no AVX512-VNNI";
  const cpu::Kernels& k = cpu::kernels_avx512_vnni();
  for (const Shape s : kShapes) {
    VnniCase c = vnni_case(s, DType::BF16, 41);
    cpu::PreparedX pn;
    ASSERT_TRUE(k.prepare_special(c.o.w, c.x.data(), &pn));
    const int64_t gs = s.group_size, wg = gs / 8, ng = s.cols / gs;
    const auto& xl = c.px.xd;
    ASSERT_EQ(int64_t(xl.size()), (ng + 15) / 16 * wg * 384) << c.o.name();
    std::vector<bool> seen(xl.size());
    for (int64_t col = 0; col < s.cols; ++col)
      for (int64_t kd = 0; kd < 3; ++kd) {
        const int64_t g = col / gs, t = col % gs / 8, j = col % 8 / 2, v = 2 * kd + col % 2;
        const size_t at = size_t(((g / 16) * wg + t) * 384 + v * 64 + g % 16 * 4 + j);
        ASSERT_EQ(xl[at], pn.xd[size_t(col / 128 * 384 + v * 64 + col % 128 / 2)]) << c.o.name() << " column " << col << " digit " << kd;
        seen[at] = true;
      }
    for (size_t i = 0; i < xl.size(); ++i) {
      if (!seen[i]) {
        ASSERT_EQ(xl[i], 0) << c.o.name() << " byte " << i;
      }
    }
    EXPECT_EQ(c.px.dx, pn.dx) << c.o.name();
    EXPECT_EQ(c.px.gsum, pn.gsum) << c.o.name();
  }
}

// The integer paths' prepare in pieces (prepare_layout, then prepare_groups over ranges in any
// order, as threads finishing parts of x run them): the bytes of the whole prepare, in
// group-lane and natural order and for 8-bit codes, at AVX2 and AVX-512 VNNI; a range holding an
// infinity says so.
TEST(GroupLanes, IntegerPrepareInPiecesIsTheWholePrepare) {
  int levels = 0;
  for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512Vnni}) {
    if (isa > cpu_isa_detected()) continue;
    ++levels;
    const cpu::Kernels& k = isa == CpuIsa::Avx2 ? cpu::kernels_avx2() : cpu::kernels_avx512_vnni();
    // AVX-512 VNNI prepares whole: its pieces were no faster (a9dc2a6:docs/benchmarks.md).
    if (!k.prepare_layout) continue;
    ASSERT_TRUE(k.prepare_groups);
    uint32_t seed = 51;
    int checked = 0;
    for (const Shape s : kShapes)
      for (int bits : {4, 8})
        for (bool lanes : {true, false}) {
          if (bits == 8 && lanes) continue;  // the layout is 4-bit only
          const auto o = test::random_affine(s.rows, s.cols, bits, s.group_size, DType::BF16, ++seed);
          const test::OwnedWeight l = lanes ? test::in_group_lanes(o) : o;
          const QWeight& w = lanes ? l.w : o.w;
          std::vector<float> x = test::randn(size_t(s.cols), ++seed);
          const std::string name = o.name() + (lanes ? " lanes " : " natural ") + std::string(cpu_isa_name(isa));
          cpu::PreparedX whole, parts;
          const bool takes = k.prepare_special(w, x.data(), &whole);
          // Stale bytes from another shape first: the layout must not depend on what px held.
          const auto big = test::random_affine(2, 4096, 4, 64, DType::BF16, 3);
          const auto xb = test::randn(4096, 4);
          ASSERT_TRUE(k.prepare_special(big.w, xb.data(), &parts));
          ASSERT_EQ(k.prepare_layout(w, x.data(), &parts), takes) << name;
          if (!takes) continue;
          ++checked;
          // Ranges of 1, 3, 5, ... groups, run from the last to the first.
          const int64_t ng = s.cols / s.group_size;
          std::vector<std::pair<int64_t, int64_t>> ranges;
          for (int64_t g = 0, n = 1; g < ng; g += n, n += 2) ranges.emplace_back(g, std::min(ng, g + n));
          for (auto it = ranges.rbegin(); it != ranges.rend(); ++it)
            ASSERT_TRUE(k.prepare_groups(w, x.data(), it->first, it->second, &parts)) << name;
          if (isa == CpuIsa::Avx2) {
            // xw may hold more than this shape uses (it only grows): compare the used part.
            const size_t used = size_t(lanes ? 2 * group_lane_steps(s.cols, s.group_size) * (bits == 4 ? 96 : 48)
                                             : s.cols / (256 / bits) * (bits == 4 ? 96 : 48));
            ASSERT_GE(parts.xw.size(), used) << name;
            ASSERT_GE(whole.xw.size(), used) << name;
            EXPECT_TRUE(std::equal(parts.xw.begin(), parts.xw.begin() + std::ptrdiff_t(used), whole.xw.begin())) << name;
            EXPECT_TRUE(parts.words && !parts.digits) << name;
          } else {
            EXPECT_EQ(parts.xd, whole.xd) << name;
            EXPECT_TRUE(parts.digits && !parts.words) << name;
          }
          EXPECT_EQ(parts.dx, whole.dx) << name;
          EXPECT_EQ(parts.gsum, whole.gsum) << name;
          EXPECT_FALSE(parts.interleaved) << name;
          EXPECT_EQ(parts.group_lanes, whole.group_lanes) << name;
          EXPECT_EQ(parts.stride, whole.stride) << name;
          EXPECT_EQ(parts.gstride, whole.gstride) << name;
          EXPECT_EQ(parts.x, x.data()) << name;
          // An infinity in the last group: its range fails, the others do not.
          x[size_t(s.cols - 1)] = INFINITY;
          ASSERT_TRUE(k.prepare_layout(w, x.data(), &parts));
          EXPECT_FALSE(k.prepare_groups(w, x.data(), ng - 1, ng, &parts)) << name;
          if (ng > 1) {
            EXPECT_TRUE(k.prepare_groups(w, x.data(), 0, ng - 1, &parts)) << name;
          }
        }
    EXPECT_GE(checked, 10) << cpu_isa_name(isa);  // the integer path took most shapes
  }
  if (levels == 0) GTEST_SKIP() << "no level here prepares in pieces";
}

// The AVX2 integer matvec reads the layout itself too: x prepared in group-lane order (half
// blocks of 8 groups), and the same integer sums per group as in natural order, so the same bits
// (partial blocks of 12 and 1 groups, whose last half runs two rows at once, group sizes 64 and
// 128; 32 takes the float path).
TEST(GroupLanes, Avx2IntegerMatvecReadsTheLayout) {
  if (cpu_isa_detected() < CpuIsa::Avx2) GTEST_SKIP() << "no AVX2";
  const cpu::Kernels& k = cpu::kernels_avx2();
  for (const Shape s : kShapes)
    for (DType sd : {DType::BF16, DType::F32}) {
      const auto o = test::random_affine(s.rows, s.cols, 4, s.group_size, sd, 41);
      const test::OwnedWeight l = test::in_group_lanes(o);
      const auto x = test::randn(size_t(s.cols), 42);
      cpu::PreparedX pl, pn;
      const bool takes = s.group_size % 64 == 0;
      ASSERT_EQ(k.prepare_special(l.w, x.data(), &pl), takes) << o.name();
      if (!takes) continue;
      EXPECT_TRUE(pl.words && pl.group_lanes) << o.name();
      ASSERT_TRUE(k.prepare_special(o.w, x.data(), &pn));
      EXPECT_FALSE(pn.group_lanes);
      std::vector<float> y(static_cast<size_t>(s.rows), NAN), yn(y.size(), NAN), want(y.size());
      k.matvec_rows(l.w, pl, y.data(), 0, s.rows);
      k.matvec_rows(o.w, pn, yn.data(), 0, s.rows);
      EXPECT_EQ(y, yn) << o.name();
      matvec_ref(o.w, x.data(), want.data());
      EXPECT_LE(test::rel_l2(y, want), 1e-5) << o.name();
      // Row ranges split anywhere (rows read in pairs or alone): the same bits.
      for (int64_t cut : {int64_t(1), s.rows / 2}) {
        std::vector<float> z(y.size(), NAN);
        k.matvec_rows(l.w, pl, z.data(), 0, cut);
        k.matvec_rows(l.w, pl, z.data(), cut, s.rows);
        EXPECT_EQ(z, y) << o.name() << " cut " << cut;
      }
    }
}

// The layout's rows are read in the natural order's row blocks (four side by side, spread
// over the range, or single rows with split accumulators): every policy and split of the range
// gives the same bits.
TEST(GroupLanes, IntegerMatvecSameBitsForEveryRowBlock) {
  if (cpu_isa_detected() < CpuIsa::Avx512Vnni) GTEST_SKIP() << "no AVX512-VNNI";
  const cpu::Kernels& k = cpu::kernels_avx512_vnni();
  const bool spread0 = matvec_row_spread();
  for (const Shape s : kShapes) {
    const VnniCase c = vnni_case(s, DType::F16, 31);
    const auto& o = c.o;
    const test::OwnedWeight& l = c.l;
    const cpu::PreparedX& px = c.px;
    std::vector<float> first;
    for (int rows : {4, 1})
      for (bool spread : {true, false})
        for (int64_t cut : {int64_t(0), s.rows / 3}) {
          set_matvec_row_streams(rows);
          set_matvec_row_spread(spread);
          std::vector<float> y(static_cast<size_t>(s.rows), NAN);
          k.matvec_rows(l.w, px, y.data(), 0, cut);
          k.matvec_rows(l.w, px, y.data(), cut, s.rows);
          if (first.empty()) first = y;
          EXPECT_EQ(y, first) << o.name() << " rows " << rows << " spread " << spread << " cut " << cut;
        }
  }
  set_matvec_row_streams(0);
  set_matvec_row_spread(spread0);
}

}  // namespace
}  // namespace moeflux
