// Optimised CPU ops (backend/cpu/cpu_ops.h) against the reference ops, at every ISA level this
// machine has (each forced in turn, so AVX2 is tested on AVX-512 machines too): every QWeight
// format and bit width over ragged shapes, matmul over T tokens, attention, the fused expert,
// and exact fp8 / affine decoding (the thread pool: test_thread_pool.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "backend/cpu/tuning_switch.h"
#include "backend/cpu/ceilings.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "backend/ref/linear_attn.h"
#include "backend/ref/ref.h"
#include "util/random_weights.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using test::OwnedWeight;

// Float reordering only: each output may differ from the reference by a few ulps of
// sum_c |w_rc x_c| (the magnitude its rounding errors scale with; worst case cols * 2^-24).
constexpr double kDotTol = 1e-5;

// Where the level `isa` runs w's matvec with x in integers per quantisation group
// (Avx512Vnni: int8 digits, kernels_avx512_vnni.cpp; Avx2: int16 and an int8 rest,
// kernels_avx2_int.cpp): the bound on |x - its integer form| as a fraction of the group's largest
// |x| (0.75 of a step: 0.5 for the rounding, the rest for the float product it is rounded from).
// 0 where x stays f32.
double int_x_error(CpuIsa isa, const QWeight& w) {
  if (w.format != WFormat::Affine || (w.bits != 4 && w.bits != 8)) return 0;
  const int64_t gs = w.group_size;
  if (isa == CpuIsa::Avx512Vnni) {
    const int64_t chunk = w.bits == 4 ? 128 : 64;
    const bool takes = gs % 32 == 0 && w.cols % gs == 0 && (chunk % gs == 0 || gs % chunk == 0);
    return takes ? 0.75 / cpu::digit_qmax(w.bits) : 0;
  }
  if (isa == CpuIsa::Avx2) return gs % (256 / w.bits) == 0 && w.cols % gs == 0 ? cpu::kWordXError : 0;
  return 0;
}

// Bound on the integer path's error per output: sum_c |w_c - b_g(c)| * err * max|x| over c's group.
std::vector<double> int_x_bound(const QWeight& w, const float* x, double err_frac) {
  std::vector<double> bound(static_cast<size_t>(w.rows), 0.0);
  std::vector<float> row(static_cast<size_t>(w.cols));
  std::vector<double> err(static_cast<size_t>(w.cols));
  const int64_t gs = w.group_size, ng = w.cols / gs;
  for (int64_t g = 0; g < ng; ++g) {
    float m = 0;
    for (int64_t c = g * gs; c < (g + 1) * gs; ++c) m = std::max(m, std::fabs(x[c]));
    for (int64_t c = g * gs; c < (g + 1) * gs; ++c) err[size_t(c)] = err_frac * double(m);
  }
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row_ref(w, r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) {
      const float b = load_f32(w.sdtype, w.biases, size_t(r * ng + c / gs));
      bound[size_t(r)] += std::fabs(double(row[size_t(c)]) - b) * err[size_t(c)];
    }
  }
  return bound;
}

// Reference y (T, rows) and per-output magnitude sum_c |w_rc x_tc|.
struct RefOut {
  std::vector<float> y, mag;
};
RefOut ref_matmul(const QWeight& w, const float* x, int64_t T) {
  RefOut o{std::vector<float>(static_cast<size_t>(T * w.rows)), std::vector<float>(static_cast<size_t>(T * w.rows))};
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t t = 0; t < T; ++t) matvec_ref(w, x + t * w.cols, o.y.data() + t * w.rows);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row_ref(w, r, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double m = 0;
      for (int64_t c = 0; c < w.cols; ++c) m += std::fabs(double(row[size_t(c)]) * x[t * w.cols + c]);
      o.mag[size_t(t * w.rows + r)] = float(m);
    }
  }
  return o;
}

// max over outputs of |y - ref| / magnitude
double max_scaled_err(const std::vector<float>& y, const RefOut& ref) {
  double e = 0;
  for (size_t i = 0; i < y.size(); ++i)
    e = std::max(e, std::isfinite(y[i]) ? std::fabs(double(y[i]) - ref.y[i]) / (ref.mag[i] + 1e-30) : INFINITY);
  return e;
}

// y from the level `isa` vs the reference: within the integer bound where that path runs,
// else within float rounding.
void expect_matvec_close(const OwnedWeight& o, const float* x, const RefOut& want, const std::vector<float>& y,
                         CpuIsa isa) {
  if (const double frac = int_x_error(isa, o.w)) {
    const auto bound = int_x_bound(o.w, x, frac);
    int bad = 0;
    for (size_t r = 0; r < y.size(); ++r)
      bad += !(std::fabs(double(y[r]) - want.y[r]) <= 1.001 * bound[r] + kDotTol * want.mag[r]);
    EXPECT_EQ(bad, 0) << o.name() << " isa " << cpu_isa_name(isa);
    return;
  }
  EXPECT_LE(max_scaled_err(y, want), kDotTol) << o.name() << " isa " << cpu_isa_name(isa);
  if (o.w.rows >= 67) {
    EXPECT_LE(test::rel_l2(y, want.y), kDotTol) << o.name() << " isa " << cpu_isa_name(isa);
  }
}

// matvec at every ISA level vs matvec_ref.
void check_matvec(const OwnedWeight& o, uint32_t seed) {
  const auto x = test::randn(size_t(o.w.cols), seed);
  const RefOut want = ref_matmul(o.w, x.data(), 1);
  for (CpuIsa isa : test::cpu_isas_available()) {
    ScopedCpuIsa scoped(isa);
    std::vector<float> y(static_cast<size_t>(o.w.rows), NAN);
    matvec(o.w, x.data(), y.data());
    expect_matvec_close(o, x.data(), want, y, isa);
  }
}

// The QWeights of owned weights, in order.
std::vector<const QWeight*> views(const std::vector<OwnedWeight>& os) {
  std::vector<const QWeight*> ws;
  for (const auto& o : os) ws.push_back(&o.w);
  return ws;
}

// matvec_multi over weights sharing x (ragged row counts, one parallel region) vs matvec_ref
// of each, on 1 and 3 threads; `mixed` weights of different layouts take the one-by-one path.
void check_matvec_multi(const std::vector<OwnedWeight>& os, uint32_t seed) {
  const int64_t cols = os[0].w.cols;
  const auto x = test::randn(size_t(cols), seed);
  std::vector<RefOut> want;
  for (const auto& o : os) want.push_back(ref_matmul(o.w, x.data(), 1));
  const std::vector<const QWeight*> ws = views(os);
  for (int threads : {1, 3})
    for (CpuIsa isa : test::cpu_isas_available()) {
      set_cpu_threads(threads);
      ScopedCpuIsa scoped(isa);
      std::vector<std::vector<float>> ys;
      std::vector<float*> yp;
      for (const auto& o : os) ys.emplace_back(static_cast<size_t>(o.w.rows), NAN);
      for (auto& y : ys) yp.push_back(y.data());
      matvec_multi(int(os.size()), ws.data(), x.data(), yp.data());
      for (size_t i = 0; i < os.size(); ++i) expect_matvec_close(os[i], x.data(), want[i], ys[i], isa);
    }
  set_cpu_threads(0);
}

TEST(OpsCpu, IsaLevelsAndNames) {
  if (!std::getenv("MOEFLUX_CPU_ISA")) {
    EXPECT_EQ(cpu_isa(), cpu_isa_default());
  }
  EXPECT_EQ(cpu_isa_default(), cpu_isa_detected());
  for (CpuIsa i : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Avx512Vnni})
    EXPECT_EQ(cpu_isa_from_name(cpu_isa_name(i)), i);
  EXPECT_FALSE(cpu_isa_from_name("sse9").has_value());
  if (cpu_isa_detected() < CpuIsa::Avx512Vnni) {
    EXPECT_THROW(set_cpu_isa(CpuIsa::Avx512Vnni), Error);
  }
  EXPECT_GE(physical_core_count(), 1);
}

// The read ceiling's buffer: whole 2 MiB pages, at least what was asked, reusable across
// measurements (moeflux bench measures before and after its tests on one buffer).
TEST(OpsCpu, ReadBufferIsWholePagesAndReusable) {
  const bench::ReadBuffer buf(size_t(3) << 20);
  const size_t bytes = buf.floats() * sizeof(float);
  EXPECT_GE(bytes, size_t(3) << 20);
  EXPECT_EQ(bytes % (size_t(2) << 20), 0u);
  for (int i = 0; i < 2; ++i) {
    const double gbs = bench::read_bandwidth_gbs(buf, 2, 1);
    EXPECT_TRUE(std::isfinite(gbs) && gbs > 0.0) << gbs;
  }
}

TEST(OpsCpu, MatvecAffineEveryWidthAndGroup) {
  uint32_t seed = 1;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      for (int64_t rows : {1, 7, 67, 513})
        for (int64_t cols : {64, 192, 2048}) {
          if (cols % group != 0) continue;
          check_matvec(test::random_affine(rows, cols, bits, group, DType::BF16, seed), seed + 1);
          seed += 2;
        }
}

// Reading 4 rows side by side (matvec_row_streams), adjacent or spread over the range
// (matvec_row_spread: 67 and 513 rows of 2048 4- and 8-bit columns have quarters of >= 16 KiB),
// gives the same bits as one row at a time, at every ISA and thread count (so the choice per
// CPU changes speed only), including row counts that leave a tail of 1-3 rows.
TEST(OpsCpu, MatvecRowStreamsAreBitIdentical) {
  const bool prev_spread = matvec_row_spread();
  uint32_t seed = 900;
  for (int bits : {2, 4, 8})
    for (int64_t rows : {7, 67, 513})
      for (int64_t cols : {192, 2048}) {
        const auto o = test::random_affine(rows, cols, bits, 64, DType::BF16, seed++);
        const auto x = test::randn(size_t(cols), seed++);
        for (int threads : {1, 3})
          for (CpuIsa isa : test::cpu_isas_available()) {
            set_cpu_threads(threads);
            ScopedCpuIsa scoped(isa);
            std::vector<float> y1(size_t(rows), NAN), y4(size_t(rows), NAN), y4s(size_t(rows), NAN);
            set_matvec_row_streams(1);
            matvec(o.w, x.data(), y1.data());
            set_matvec_row_streams(4);
            set_matvec_row_spread(false);
            matvec(o.w, x.data(), y4.data());
            set_matvec_row_spread(true);
            matvec(o.w, x.data(), y4s.data());
            EXPECT_EQ(std::memcmp(y1.data(), y4.data(), y1.size() * sizeof(float)), 0)
                << o.name() << " isa " << cpu_isa_name(isa) << " threads " << threads;
            EXPECT_EQ(std::memcmp(y1.data(), y4s.data(), y1.size() * sizeof(float)), 0)
                << o.name() << " spread, isa " << cpu_isa_name(isa) << " threads " << threads;
          }
      }
  set_matvec_row_streams(0);
  set_matvec_row_spread(prev_spread);
  set_cpu_threads(0);
  EXPECT_THROW(set_matvec_row_streams(2), Error);
}

// The prefetch distances' tuning switches (bench --alternate MOEFLUX_CODES_DISTANCE /
// _PARAMS_DISTANCE) move the code prefetch to its other distance and change no bit of a
// matvec, at every ISA; so does the row spread's.
TEST(OpsCpu, PrefetchDistanceSwitchesChangeSpeedOnly) {
  TuningSwitch* codes = TuningSwitch::find("MOEFLUX_CODES_DISTANCE");
  TuningSwitch* params = TuningSwitch::find("MOEFLUX_PARAMS_DISTANCE");
  TuningSwitch* spread = TuningSwitch::find("MOEFLUX_MATVEC_SPREAD");
  ASSERT_TRUE(codes && params && spread);
  const bool c0 = codes->on(), p0 = params->on(), s0 = spread->on();
  codes->set(true);
  const int64_t set_ahead = matvec_codes_ahead();
  codes->set(false);
  if (!std::getenv("MOEFLUX_CODES_AHEAD") && !std::getenv("MOEFLUX_CODES_AHEAD_ALT")) {
    EXPECT_NE(matvec_codes_ahead(), set_ahead);  // defaults: 1.5 or 2 KiB, and 4 KiB
  }
  uint32_t seed = 950;
  for (int bits : {4, 8}) {
    const auto o = test::random_affine(513, 2048, bits, 64, DType::BF16, seed++);
    const auto x = test::randn(2048, seed++);
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> ref(513, NAN);
      codes->set(true), params->set(true), spread->set(true);
      matvec(o.w, x.data(), ref.data());
      for (int flips = 1; flips < 8; ++flips) {
        codes->set(!(flips & 1)), params->set(!(flips & 2)), spread->set(!(flips & 4));
        std::vector<float> y(513, NAN);
        matvec(o.w, x.data(), y.data());
        EXPECT_EQ(std::memcmp(ref.data(), y.data(), y.size() * sizeof(float)), 0)
            << o.name() << " isa " << cpu_isa_name(isa) << " flips " << flips;
      }
    }
  }
  codes->set(c0), params->set(p0), spread->set(s0);
}

// Rel L2 of one matvec at level `isa` against the reference at the Qwen3-30B-A3B expert shape
// (768 x 2048, 4-bit, groups of 64), recorded as the test's property `name` and printed.
double expert_shape_rel_l2(CpuIsa isa, const char* name) {
  const auto o = test::random_affine(768, 2048, 4, 64, DType::BF16, 21);
  const auto x = test::randn(2048, 22);
  std::vector<float> want(768), y(768);
  matvec_ref(o.w, x.data(), want.data());
  ScopedCpuIsa scoped(isa);
  matvec(o.w, x.data(), y.data());
  const double e = test::rel_l2(y, want);
  ::testing::Test::RecordProperty(name, std::to_string(e));
  std::printf("%s: matvec rel_l2 vs reference at 768x2048 q4g64: %.3g (NMSE %.3g)\n", name, e, e * e);
  return e;
}

// The integer paths' error at that shape, at f32 rounding level: x in int8 digits (Avx512Vnni),
// and x as int16 and an int8 rest, within 2^-21 of each group's largest |x| (Avx2).
TEST(OpsCpu, DigitXErrorAtExpertShape) {
  if (cpu_isa_detected() < CpuIsa::Avx512Vnni) GTEST_SKIP() << "no AVX512-VNNI";
  EXPECT_LE(expert_shape_rel_l2(CpuIsa::Avx512Vnni, "digit_x_rel_l2"), kDotTol);
}
TEST(OpsCpu, WordXErrorAtExpertShape) {
  if (cpu_isa_detected() < CpuIsa::Avx2) GTEST_SKIP() << "no AVX2";
  EXPECT_LE(expert_shape_rel_l2(CpuIsa::Avx2, "word_x_rel_l2"), kDotTol);
}

// The AVX2 integer path holds a 4-bit weight's x as q in int16 with |q| < 2^15: a group whose
// largest |x| lies just below a power of two (where x / dx would round to 2^15) takes the next
// step up, in both orders of the codes; without that, q wraps to -2^15 there.
TEST(OpsCpu, WordXAtTheTopOfAnExponent) {
  if (cpu_isa_detected() < CpuIsa::Avx2) GTEST_SKIP() << "no AVX2";
  const auto o = test::random_affine(40, 2048, 4, 64, DType::BF16, 61);
  const test::OwnedWeight l = test::in_group_lanes(o);
  auto x = test::randn(2048, 62);
  const float top = std::nextafter(1.0f, 0.0f);  // 1 - 2^-24
  for (int64_t g = 0; g < 32; ++g) {
    for (int64_t c = 0; c < 64; ++c) x[size_t(g * 64 + c)] *= 0.25f;  // |x| < 1 in most groups
    x[size_t(g * 64 + g % 64)] = g % 2 ? top : -top;
    x[size_t(g * 64 + (g + 7) % 64)] = (g % 3 ? 1.0f : -1.0f) * std::ldexp(top, -int(g % 5));
  }
  std::vector<float> want(40), y(40), yl(40);
  matvec_ref(o.w, x.data(), want.data());
  ScopedCpuIsa scoped(CpuIsa::Avx2);
  matvec(o.w, x.data(), y.data());
  matvec(l.w, x.data(), yl.data());
  EXPECT_LE(test::rel_l2(y, want), 1e-5);
  EXPECT_EQ(y, yl);
}

TEST(OpsCpu, MatvecMultiMatchesReference) {
  // q / k / v at decode: same layout, ragged rows; big enough (> 256 KiB) to run in parallel.
  std::vector<OwnedWeight> qkv;
  qkv.push_back(test::random_affine(1031, 2048, 4, 64, DType::BF16, 31));
  qkv.push_back(test::random_affine(7, 2048, 4, 64, DType::BF16, 32));
  qkv.push_back(test::random_affine(130, 2048, 4, 64, DType::BF16, 33));
  check_matvec_multi(qkv, 34);
  std::vector<OwnedWeight> q8;
  q8.push_back(test::random_affine(67, 192, 8, 32, DType::F16, 35));
  q8.push_back(test::random_affine(513, 192, 8, 32, DType::F16, 36));
  check_matvec_multi(q8, 37);
  // Different layouts (4-bit, 3-bit, bf16): one by one.
  std::vector<OwnedWeight> mixed;
  mixed.push_back(test::random_affine(67, 640, 4, 64, DType::BF16, 38));
  mixed.push_back(test::random_affine(67, 640, 3, 64, DType::BF16, 39));
  mixed.push_back(test::random_dense(513, 640, DType::BF16, 40));
  check_matvec_multi(mixed, 41);
}

// The epilogue sees each weight's rows once, in ranges of whole `align` blocks, after they
// were computed (it checks them against matvec_multi's), on 1, 3 and 16 threads and every ISA
// (threads share blocks: each runs on the thread that finishes the block's last rows).
TEST(OpsCpu, MatvecMultiEpilogueRunsOnWholeComputedBlocks) {
  std::vector<OwnedWeight> os;
  os.push_back(test::random_affine(4096, 2048, 4, 64, DType::BF16, 51));  // q (> 256 KiB: threads)
  os.push_back(test::random_affine(512, 2048, 4, 64, DType::BF16, 52));   // k
  os.push_back(test::random_affine(128, 2048, 4, 64, DType::BF16, 53));   // v
  const int64_t align = 128;
  const auto x = test::randn(2048, 54);
  const std::vector<const QWeight*> ws = views(os);
  for (int threads : {1, 3, 16})
    for (CpuIsa isa : test::cpu_isas_available()) {
      set_cpu_threads(threads);
      ScopedCpuIsa scoped(isa);
      std::vector<std::vector<float>> want, got;
      std::vector<float*> wp, gp;
      for (const auto& o : os) {
        want.emplace_back(size_t(o.w.rows), NAN), got.emplace_back(size_t(o.w.rows), NAN);
        wp.push_back(want.back().data()), gp.push_back(got.back().data());
      }
      matvec_multi(3, ws.data(), x.data(), wp.data());
      std::vector<std::vector<std::atomic<int>>> seen;
      for (const auto& o : os) seen.emplace_back(size_t(o.w.rows / align));
      std::atomic<int> bad{0};
      matvec_multi_epilogue(3, ws.data(), x.data(), gp.data(), align, [&](int i, int64_t r0, int64_t r1) {
        if (r0 % align || r1 % align || r0 >= r1) ++bad;
        for (int64_t r = r0; r < r1; ++r) bad += std::memcmp(&got[size_t(i)][size_t(r)], &want[size_t(i)][size_t(r)], 4) != 0;
        for (int64_t b = r0 / align; b < r1 / align; ++b) seen[size_t(i)][size_t(b)]++;
      });
      EXPECT_EQ(bad.load(), 0) << "threads " << threads << " isa " << cpu_isa_name(isa);
      for (const auto& s : seen)
        for (const auto& c : s) EXPECT_EQ(c.load(), 1) << "threads " << threads << " isa " << cpu_isa_name(isa);
    }
  set_cpu_threads(0);
}

TEST(OpsCpu, RmsnormMatchesReference) {
  for (int64_t n : {1, 7, 128, 2048, 2049})
    for (bool weighted : {true, false}) {
      const auto x = test::randn(size_t(n), uint32_t(n)), w = test::randn(size_t(n), uint32_t(n + 1));
      std::vector<float> want(static_cast<size_t>(n));
      rmsnorm_ref(x.data(), weighted ? w.data() : nullptr, n, 1e-6f, want.data());
      for (CpuIsa isa : test::cpu_isas_available()) {
        ScopedCpuIsa scoped(isa);
        std::vector<float> y = x;  // in place
        rmsnorm(y.data(), weighted ? w.data() : nullptr, n, 1e-6f, y.data());
        EXPECT_LE(test::rel_l2(y, want), 1e-6) << n << " isa " << cpu_isa_name(isa);
        if (isa == CpuIsa::Scalar) {
          EXPECT_EQ(std::memcmp(y.data(), want.data(), size_t(n) * 4), 0) << n;  // the same loops
        }
      }
    }
}

// The kernels' SwiGLU against the reference: within a few ulps over normal values, the
// saturated ends (|g| up to 200: e^-g clamped) and zeros, every length (vector tails).
TEST(OpsCpu, SwigluKernelsMatchReference) {
  std::vector<const cpu::Kernels*> ks{&cpu::kernels_scalar()};
  if (cpu_isa_detected() >= CpuIsa::Avx2) ks.push_back(&cpu::kernels_avx2());
  if (cpu_isa_detected() >= CpuIsa::Avx512) ks.push_back(&cpu::kernels_avx512());
  for (int64_t n : {1, 15, 16, 17, 768, 1000}) {
    auto g = test::randn(size_t(n), uint32_t(n)), u = test::randn(size_t(n), uint32_t(n + 7));
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] *= i % 5 == 0 ? 40.0f : 3.0f;  // some saturate
    if (n > 3) g[0] = 200.0f, g[1] = -200.0f, g[2] = 0.0f, g[3] = -87.0f;
    std::vector<float> want(static_cast<size_t>(n));
    swiglu_ref(g.data(), u.data(), n, want.data());
    for (const cpu::Kernels* k : ks) {
      std::vector<float> y = g;  // in place, as the experts run it
      k->swiglu(y.data(), u.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        const double w = want[size_t(i)], d = std::fabs(double(y[size_t(i)]) - w);
        EXPECT_LE(d, 1e-6 * std::fabs(w) + 1e-30) << "n " << n << " i " << i << " g " << g[size_t(i)];
      }
    }
  }
}

// The weighted combine: the same bits at every ISA as the plain loop (each product rounded,
// then added, in input order), over ragged ranges (vector tails).
TEST(OpsCpu, CombineWeightedIsTheSameBitsAtEveryIsa) {
  const int n = 8;
  const int64_t dim = 1000;
  std::vector<std::vector<float>> ys;
  std::vector<const float*> yp;
  for (int i = 0; i < n; ++i) ys.push_back(test::randn(size_t(dim), uint32_t(60 + i)));
  for (const auto& y : ys) yp.push_back(y.data());
  const auto w = test::randn(size_t(n), 70);
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, dim}, {3, 17}, {5, 998}}) {
    std::vector<float> want(static_cast<size_t>(dim), 0.0f);
    for (int i = 0; i < n; ++i)
      for (int64_t r = r0; r < r1; ++r) {
        const float p = w[size_t(i)] * ys[size_t(i)][size_t(r)];  // rounded, then added
        want[size_t(r)] += p;
      }
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> out(static_cast<size_t>(dim), 0.0f);
      combine_weighted(n, yp.data(), w.data(), out.data(), r0, r1);
      EXPECT_EQ(std::memcmp(out.data(), want.data(), size_t(dim) * 4), 0) << r0 << " " << r1 << " " << cpu_isa_name(isa);
    }
  }
}

TEST(OpsCpu, MatvecAffineScaleDtypes) {
  for (DType sd : {DType::F16, DType::F32})
    for (int bits : {4, 8, 3})
      for (int64_t cols : {64, 192, 640})
        check_matvec(test::random_affine(67, cols, bits, 32, sd, 11), 12);
}

TEST(OpsCpu, MatvecDense) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 7, 67, 513})
      for (int64_t cols : {1, 7, 64, 67, 192, 2048})
        check_matvec(test::random_dense(rows, cols, t, uint32_t(rows * cols)), 3);
}

TEST(OpsCpu, MatvecFp8Block) {
  for (DType sd : {DType::F32, DType::BF16})
    for (auto [br, bc] : {std::pair{128, 128}, std::pair{3, 5}, std::pair{2, 40}})
      for (int64_t rows : {1, 7, 67, 513})
        for (int64_t cols : {7, 64, 192, 2048})
          check_matvec(test::random_fp8(rows, cols, br, bc, sd, uint32_t(rows + cols)), 4);
}

// matmul over T tokens vs matvec_ref per token.
void check_matmul(const OwnedWeight& o, int64_t T) {
  const auto x = test::randn(size_t(T * o.w.cols), uint32_t(T));
  const RefOut want = ref_matmul(o.w, x.data(), T);
  for (CpuIsa isa : test::cpu_isas_available()) {
    ScopedCpuIsa scoped(isa);
    if (T == 1 && int_x_error(isa, o.w)) continue;  // matvec: x in integers
    std::vector<float> y(want.y.size(), NAN);
    matmul(o.w, x.data(), T, y.data());
    EXPECT_LE(max_scaled_err(y, want), kDotTol) << o.name() << " T=" << T << " isa " << cpu_isa_name(isa);
  }
}

TEST(OpsCpu, MatmulEveryFormat) {
  for (int64_t T : {1, 3, 17})
    for (int64_t rows : {1, 7, 67}) {
      for (int bits : {2, 3, 4, 8})
        for (int64_t cols : {64, 192})
          check_matmul(test::random_affine(rows, cols, bits, 32, DType::BF16, 5), T);
      check_matmul(test::random_affine(rows, 256, 4, 128, DType::F16, 6), T);
      for (DType t : {DType::F32, DType::F16, DType::BF16}) check_matmul(test::random_dense(rows, 67, t, 7), T);
      check_matmul(test::random_fp8(rows, 192, 128, 128, DType::F32, 8), T);
      check_matmul(test::random_fp8(rows, 67, 3, 5, DType::BF16, 9), T);
    }
  check_matmul(test::random_affine(513, 2048, 4, 64, DType::BF16, 10), 3);  // parallel rows
}

// A batch's x is prepared by the threads, a range of tokens each (prepare_x_layout, then
// prepare_x_tokens), into the buffers of earlier, larger calls: the same bits on 4 threads as
// on 1 and close to the reference, each time after an x of infinities filled the buffers (a
// token left unprepared, or prepared twice by the wrong thread, reads infinities).
TEST(OpsCpu, MatmulBatchPreparedByThreads) {
  const auto wide = test::random_affine(96, 2048, 4, 64, DType::BF16, 21);  // T * cols * 8 >= 256 KiB: split
  const auto narrow = test::random_affine(67, 192, 3, 32, DType::BF16, 23);
  const auto xw = test::randn(size_t(64 * 2048), 22);
  const auto xn = test::randn(size_t(17 * 192), 24);
  const std::vector<float> inf(xw.size(), INFINITY);
  const RefOut want_w = ref_matmul(wide.w, xw.data(), 64), want_n = ref_matmul(narrow.w, xn.data(), 17);
  for (CpuIsa isa : test::cpu_isas_available()) {
    ScopedCpuIsa scoped(isa);
    std::vector<float> y1(want_w.y.size(), NAN), y4(want_w.y.size(), NAN), yn(want_n.y.size(), NAN);
    std::vector<float> dirty(want_w.y.size());
    set_cpu_threads(4);
    matmul(wide.w, inf.data(), 64, dirty.data());
    matmul(wide.w, xw.data(), 64, y4.data());
    matmul(wide.w, inf.data(), 64, dirty.data());
    matmul(narrow.w, xn.data(), 17, yn.data());
    set_cpu_threads(1);
    matmul(wide.w, xw.data(), 64, y1.data());
    EXPECT_EQ(y1, y4) << cpu_isa_name(isa);
    EXPECT_LE(max_scaled_err(y4, want_w), kDotTol) << cpu_isa_name(isa);
    EXPECT_LE(max_scaled_err(yn, want_n), kDotTol) << cpu_isa_name(isa);
  }
  set_cpu_threads(0);
}

// matmul_multi (a layer's q / k / v over a batch): the same bits as a matmul per weight, rows
// of all of them shared out in one region; weights of mixed layouts fall back to matmuls.
TEST(OpsCpu, MatmulMultiIsSeparateMatmuls) {
  const auto q = test::random_affine(256, 2048, 4, 64, DType::BF16, 31);
  const auto k = test::random_affine(67, 2048, 4, 64, DType::BF16, 32);
  const auto v = test::random_affine(64, 2048, 4, 64, DType::BF16, 33);
  const auto d = test::random_dense(64, 2048, DType::BF16, 34);
  for (const auto& set : {std::vector<const OwnedWeight*>{&q, &k, &v}, std::vector<const OwnedWeight*>{&q, &d, &v}})
    for (int64_t T : {1, 5, 40})
      for (int threads : {1, 3})
        for (CpuIsa isa : test::cpu_isas_available()) {
          ScopedCpuIsa scoped(isa);
          set_cpu_threads(threads);
          const auto x = test::randn(size_t(T * 2048), uint32_t(T));
          std::vector<std::vector<float>> each, multi;
          std::vector<const QWeight*> ws;
          std::vector<float*> ys;
          for (const OwnedWeight* o : set) {
            each.emplace_back(size_t(T * o->w.rows), NAN);
            matmul(o->w, x.data(), T, each.back().data());
            multi.emplace_back(size_t(T * o->w.rows), NAN);
            ws.push_back(&o->w);
          }
          for (auto& y : multi) ys.push_back(y.data());
          matmul_multi(int(ws.size()), ws.data(), x.data(), T, ys.data());
          for (size_t i = 0; i < set.size(); ++i)
            EXPECT_EQ(multi[i], each[i]) << set[i]->name() << " T=" << T << " threads " << threads << " "
                                         << cpu_isa_name(isa);
        }
  set_cpu_threads(0);
}

// matmul with x = identity returns W^T: each decoded weight, every finite fp8 byte, must
// equal dequant_row_ref (to 1e-6: the fused q*s+b rounds once where the reference rounds twice).
TEST(OpsCpu, MatmulIdentityDecodesEveryWeight) {
  const int64_t cols = 256;
  std::vector<float> eye(static_cast<size_t>(cols * cols), 0.0f);
  for (int64_t i = 0; i < cols; ++i) eye[size_t(i * cols + i)] = 1.0f;
  auto fp8 = test::random_fp8(16, cols, 4, 128, DType::F32, 1, false);
  for (int64_t i = 0; i < 16 * cols; ++i) {  // every byte but the NaNs (NaN * 0 would spread)
    const uint8_t b = uint8_t(i);
    fp8.data[size_t(i)] = (b & 0x7f) == 0x7f ? uint8_t(b & 0x80) : b;
  }
  const std::vector<OwnedWeight> ws = [&] {
    std::vector<OwnedWeight> v;
    v.push_back(std::move(fp8));
    v.push_back(test::random_affine(16, cols, 4, 64, DType::BF16, 2));
    v.push_back(test::random_affine(16, cols, 8, 32, DType::F32, 3));
    v.push_back(test::random_affine(16, cols, 2, 128, DType::BF16, 4));
    return v;
  }();
  for (const auto& o : ws) {
    std::vector<float> want(static_cast<size_t>(16 * cols));
    for (int64_t r = 0; r < 16; ++r) dequant_row_ref(o.w, r, want.data() + r * cols);
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> y(static_cast<size_t>(cols * 16));  // (T = cols, rows = 16)
      matmul(o.w, eye.data(), cols, y.data());
      int bad = 0;
      for (int64_t r = 0; r < 16; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const float a = y[size_t(c * 16 + r)], b = want[size_t(r * cols + c)];
          const bool ok = std::isnan(b) ? std::isnan(a) : std::fabs(a - b) <= 1e-6f * std::fabs(b) + 1e-9f;
          bad += !ok;
        }
      EXPECT_EQ(bad, 0) << o.name() << " isa " << cpu_isa_name(isa);
    }
  }
}

// An fp8 NaN byte (S.1111.111) makes its row's output NaN and leaves the others finite.
TEST(OpsCpu, Fp8NanPropagates) {
  for (int64_t cols : {40, 128}) {
    auto o = test::random_fp8(8, cols, 4, 16, DType::F32, 5);
    o.data[size_t(3 * cols + cols - 1)] = 0x7f;  // row 3, last column (a vector tail)
    o.data[size_t(5 * cols + 2)] = 0xff;         // row 5
    const auto x = test::randn(size_t(cols), 6);
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> y(8);
      matvec(o.w, x.data(), y.data());
      for (int r = 0; r < 8; ++r)
        EXPECT_EQ(std::isnan(y[size_t(r)]), r == 3 || r == 5) << r << " isa " << cpu_isa_name(isa);
    }
  }
}

TEST(OpsCpu, AttentionMatchesReference) {
  struct Case { int64_t n_ctx, n_heads, n_kv_heads, head_dim, v_dim; };
  for (const Case& c : {Case{1, 4, 4, 64, 64}, Case{7, 8, 2, 128, 128}, Case{67, 16, 4, 72, 40},
                        Case{513, 32, 4, 128, 128}, Case{9, 6, 2, 40, 272} /* v_dim > 256: the generic loop */}) {
    const auto q = test::randn(size_t(c.n_heads * c.head_dim), 1);
    const auto k = test::randn(size_t(c.n_ctx * c.n_kv_heads * c.head_dim), 2);
    const auto v = test::randn(size_t(c.n_ctx * c.n_kv_heads * c.v_dim), 3);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    std::vector<float> want(static_cast<size_t>(c.n_heads * c.v_dim));
    attention_ref(q.data(), k.data(), v.data(), c.n_ctx, c.n_heads, c.n_kv_heads, c.head_dim, c.v_dim, scale, want.data());
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> out(want.size(), NAN);
      attention(q.data(), k.data(), v.data(), c.n_ctx, c.n_heads, c.n_kv_heads, c.head_dim, c.v_dim, scale, out.data());
      EXPECT_LE(test::rel_l2(out, want), 1e-5) << c.n_ctx << " isa " << cpu_isa_name(isa);
    }
  }
}

TEST(OpsCpu, SwigluExpertMatchesReference) {
  const auto gate = test::random_affine(768, 2048, 4, 64, DType::BF16, 1);
  const auto up = test::random_affine(768, 2048, 4, 64, DType::BF16, 2);
  const auto down = test::random_affine(2048, 768, 4, 64, DType::BF16, 3);
  const auto x = test::randn(2048, 4);
  std::vector<float> g(768), u(768), want(2048);
  matvec_ref(gate.w, x.data(), g.data());
  matvec_ref(up.w, x.data(), u.data());
  swiglu_ref(g.data(), u.data(), 768, g.data());
  matvec_ref(down.w, g.data(), want.data());
  for (CpuIsa isa : test::cpu_isas_available()) {
    ScopedCpuIsa scoped(isa);
    std::vector<float> out(2048, NAN);
    swiglu_expert(gate.w, up.w, down.w, x.data(), out.data());
    // The digit-x error (bounded per matvec above) is at f32 rounding level: the same bound.
    EXPECT_LE(test::rel_l2(out, want), kDotTol) << cpu_isa_name(isa);
  }
}

// Reference SwiGLU expert over T tokens of x (T, cols).
std::vector<float> swiglu_want(const OwnedWeight& gate, const OwnedWeight& up, const OwnedWeight& down, const float* x,
                               int64_t T) {
  const int64_t h = gate.w.rows, d = down.w.rows, cols = gate.w.cols;
  std::vector<float> g(static_cast<size_t>(h)), u(static_cast<size_t>(h)), out(static_cast<size_t>(T * d));
  for (int64_t t = 0; t < T; ++t) {
    matvec_ref(gate.w, x + t * cols, g.data());
    matvec_ref(up.w, x + t * cols, u.data());
    swiglu_ref(g.data(), u.data(), h, g.data());
    matvec_ref(down.w, g.data(), out.data() + t * d);
  }
  return out;
}

// Several experts at once (decode: one x; prefill: ragged token counts per expert) match the
// reference, on 1 and 3 threads (the regions split rows across experts).
TEST(OpsCpu, BatchedExpertsMatchReference) {
  const int n = 5;
  const int64_t hidden = 512, dim = 512;  // 1.3 MB of gate + up rows: the parallel paths run
  std::vector<OwnedWeight> g, u, d;
  for (int i = 0; i < n; ++i) {
    g.push_back(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(10 + i)));
    // Expert 2's up is 8-bit: mixed quantisation within an expert takes its own prepared x.
    u.push_back(test::random_affine(hidden, dim, i == 2 ? 8 : 4, 64, DType::BF16, uint32_t(20 + i)));
    d.push_back(test::random_affine(dim, hidden, 4, 32, DType::BF16, uint32_t(30 + i)));
  }
  std::vector<const QWeight*> gp, up, dp;
  for (int i = 0; i < n; ++i) gp.push_back(&g[size_t(i)].w), up.push_back(&u[size_t(i)].w), dp.push_back(&d[size_t(i)].w);
  const int64_t T[n] = {1, 3, 8, 2, 5};
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < n; ++i) xs.push_back(test::randn(size_t(T[i] * dim), uint32_t(40 + i)));
  for (int threads : {1, 3}) {
    set_cpu_threads(threads);
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      // Decode: one token through all n experts.
      std::vector<std::vector<float>> outs(n, std::vector<float>(size_t(dim), NAN));
      std::vector<float*> op;
      for (auto& o : outs) op.push_back(o.data());
      swiglu_experts(n, gp.data(), up.data(), dp.data(), xs[0].data(), op.data());
      for (int i = 0; i < n; ++i)
        EXPECT_LE(test::rel_l2(outs[size_t(i)], swiglu_want(g[size_t(i)], u[size_t(i)], d[size_t(i)], xs[0].data(), 1)),
                  kDotTol)
            << "decode expert " << i << " isa " << cpu_isa_name(isa) << " threads " << threads;
      // Prefill: expert i over its own T[i] tokens.
      std::vector<const float*> xp;
      op.clear();
      for (int i = 0; i < n; ++i) {
        outs[size_t(i)].assign(size_t(T[i] * dim), NAN);
        xp.push_back(xs[size_t(i)].data()), op.push_back(outs[size_t(i)].data());
      }
      swiglu_experts_batch(n, gp.data(), up.data(), dp.data(), xp.data(), T, op.data());
      for (int i = 0; i < n; ++i)
        EXPECT_LE(test::rel_l2(outs[size_t(i)], swiglu_want(g[size_t(i)], u[size_t(i)], d[size_t(i)], xp[size_t(i)], T[i])),
                  kDotTol)
            << "prefill expert " << i << " isa " << cpu_isa_name(isa) << " threads " << threads;
    }
  }
  set_cpu_threads(0);
}

// An expert's result does not depend on the experts that share its call: experts of few tokens
// (the matvecs' small batches) and of many (the batched matmul) together give each the bits it
// gets alone, at every ISA. The expert cache runs experts in windows and one by one as they
// arrive, resident experts all in one call; both must compute the same.
TEST(OpsCpu, BatchedExpertsDoNotDependOnTheirCompanions) {
  const int n = 4;
  const int64_t hidden = 256, dim = 256;
  std::vector<OwnedWeight> g, u, d;
  for (int i = 0; i < n; ++i) {
    g.push_back(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(50 + i)));
    u.push_back(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(60 + i)));
    d.push_back(test::random_affine(dim, hidden, 4, 64, DType::BF16, uint32_t(70 + i)));
  }
  const int64_t T[n] = {3, kSmallBatch + 4, 1, kSmallBatch};
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < n; ++i) xs.push_back(test::randn(size_t(T[i] * dim), uint32_t(80 + i)));
  for (CpuIsa isa : test::cpu_isas_available()) {
    ScopedCpuIsa scoped(isa);
    std::vector<const QWeight*> gp, up, dp;
    std::vector<const float*> xp;
    std::vector<std::vector<float>> together(n);
    std::vector<float*> op;
    for (int i = 0; i < n; ++i) {
      gp.push_back(&g[size_t(i)].w), up.push_back(&u[size_t(i)].w), dp.push_back(&d[size_t(i)].w);
      xp.push_back(xs[size_t(i)].data());
      together[size_t(i)].assign(size_t(T[i] * dim), NAN);
      op.push_back(together[size_t(i)].data());
    }
    swiglu_experts_batch(n, gp.data(), up.data(), dp.data(), xp.data(), T, op.data());
    for (int i = 0; i < n; ++i) {
      std::vector<float> alone(size_t(T[i] * dim), NAN);
      float* o = alone.data();
      swiglu_experts_batch(1, &gp[size_t(i)], &up[size_t(i)], &dp[size_t(i)], &xp[size_t(i)], &T[i], &o);
      EXPECT_EQ(test::first_difference(together[size_t(i)], alone), -1) << "expert " << i << " isa " << cpu_isa_name(isa);
      EXPECT_LE(test::rel_l2(alone, swiglu_want(g[size_t(i)], u[size_t(i)], d[size_t(i)], xp[size_t(i)], T[i])),
                kDotTol)
          << "expert " << i << " isa " << cpu_isa_name(isa);
    }
  }
}

// Decode's fused experts (one region: x prepared, gate / up, h prepared by the block that
// completes it, then down and the weighted combine per block of output rows) equal
// swiglu_experts followed by combine_weighted bitwise, on 1, 3 and 5 threads at every ISA, and
// the reference within the dot tolerance; also for mixed layouts (the unfused fallback), a
// single expert, and weights in group-lane order.
TEST(OpsCpu, FusedExpertsAndCombineAreBitIdenticalToUnfused) {
  const int64_t hidden = 512, dim = 576;  // 2.4 MB of gate + up rows; dim not a multiple of the row blocks
  std::vector<OwnedWeight> g, u, d, gl, ul, dl;
  for (int i = 0; i < 8; ++i) {
    g.push_back(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(110 + i)));
    u.push_back(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(120 + i)));
    d.push_back(test::random_affine(dim, hidden, 4, 64, DType::BF16, uint32_t(130 + i)));
    gl.push_back(test::in_group_lanes(g.back())), ul.push_back(test::in_group_lanes(u.back()));
    dl.push_back(test::in_group_lanes(d.back()));
  }
  const OwnedWeight up8 = test::random_affine(hidden, dim, 8, 64, DType::BF16, 140);
  const auto x = test::randn(size_t(dim), 141), wts = test::randn(8, 142);
  struct Case { int n; bool mixed, lanes; };
  for (const Case c : {Case{8, false, false}, Case{8, true, false}, Case{1, false, false}, Case{3, false, false},
                       Case{8, false, true}}) {
    std::vector<const QWeight*> gp, up, dp;
    for (int i = 0; i < c.n; ++i) {
      const size_t j = size_t(i);
      gp.push_back(c.lanes ? &gl[j].w : &g[j].w), dp.push_back(c.lanes ? &dl[j].w : &d[j].w);
      up.push_back(c.mixed && i == 2 ? &up8.w : c.lanes ? &ul[j].w : &u[j].w);
    }
    // The reference: each expert through the reference ops, combined in order.
    std::vector<float> want(size_t(dim), 0.0f);
    for (int i = 0; i < c.n; ++i) {
      const auto y = swiglu_want(g[size_t(i)], c.mixed && i == 2 ? up8 : u[size_t(i)], d[size_t(i)], x.data(), 1);
      for (int64_t r = 0; r < dim; ++r) want[size_t(r)] += wts[size_t(i)] * y[size_t(r)];
    }
    for (int threads : {1, 3, 5}) {
      set_cpu_threads(threads);
      for (CpuIsa isa : test::cpu_isas_available()) {
        ScopedCpuIsa scoped(isa);
        std::vector<std::vector<float>> ys(size_t(c.n), std::vector<float>(size_t(dim), NAN));
        std::vector<float*> op;
        std::vector<const float*> cp;
        for (auto& y : ys) op.push_back(y.data()), cp.push_back(y.data());
        swiglu_experts(c.n, gp.data(), up.data(), dp.data(), x.data(), op.data());
        std::vector<float> unfused(size_t(dim), NAN), fused(size_t(dim), NAN);
        combine_weighted(c.n, cp.data(), wts.data(), unfused.data(), 0, dim);
        swiglu_experts_combined(c.n, gp.data(), up.data(), dp.data(), x.data(), wts.data(), fused.data());
        EXPECT_EQ(fused, unfused) << "n " << c.n << (c.mixed ? " mixed" : "") << (c.lanes ? " lanes" : "") << " isa "
                                  << cpu_isa_name(isa) << " threads " << threads;
        EXPECT_LE(test::rel_l2(fused, want), kDotTol) << "n " << c.n << " isa " << cpu_isa_name(isa);
      }
    }
  }
  set_cpu_threads(0);
}

// An x with an infinity (group-lane weights, whose integer paths refuse it): the fused experts
// leave it to the float path as the unfused ops do, with the same results (NaN where they have
// NaN).
TEST(OpsCpu, FusedExpertsTakeANonFiniteXAsUnfused) {
  const int64_t hidden = 256, dim = 2048;  // two blocks of 16 groups, the infinity in the second
  std::vector<OwnedWeight> g, u, d;
  std::vector<const QWeight*> gp, up, dp;
  for (int i = 0; i < 4; ++i) {
    g.push_back(test::in_group_lanes(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(150 + i))));
    u.push_back(test::in_group_lanes(test::random_affine(hidden, dim, 4, 64, DType::BF16, uint32_t(160 + i))));
    d.push_back(test::in_group_lanes(test::random_affine(dim, hidden, 4, 64, DType::BF16, uint32_t(170 + i))));
  }
  for (int i = 0; i < 4; ++i) gp.push_back(&g[size_t(i)].w), up.push_back(&u[size_t(i)].w), dp.push_back(&d[size_t(i)].w);
  auto x = test::randn(size_t(dim), 171);
  x[1500] = INFINITY;
  const auto wts = test::randn(4, 172);
  set_cpu_threads(3);
  for (CpuIsa isa : test::cpu_isas_available()) {
    ScopedCpuIsa scoped(isa);
    std::vector<std::vector<float>> ys(4, std::vector<float>(size_t(dim), 0.0f));
    std::vector<float*> op;
    std::vector<const float*> cp;
    for (auto& y : ys) op.push_back(y.data()), cp.push_back(y.data());
    swiglu_experts(4, gp.data(), up.data(), dp.data(), x.data(), op.data());
    std::vector<float> unfused(size_t(dim), 0.0f), fused(size_t(dim), 0.0f);
    combine_weighted(4, cp.data(), wts.data(), unfused.data(), 0, dim);
    swiglu_experts_combined(4, gp.data(), up.data(), dp.data(), x.data(), wts.data(), fused.data());
    int64_t nan = 0;
    for (int64_t r = 0; r < dim; ++r) {
      const float a = fused[size_t(r)], b = unfused[size_t(r)];
      nan += std::isnan(b);
      ASSERT_TRUE(std::isnan(a) ? std::isnan(b) : a == b) << "row " << r << " isa " << cpu_isa_name(isa);
    }
    EXPECT_GT(nan, 0) << cpu_isa_name(isa);  // the infinity reached the output
  }
  set_cpu_threads(0);
}

// T causal queries in one call equal attention_ref of each query over its own context, with and
// without a sliding window, after a cached prefix.
TEST(OpsCpu, CausalAttentionMatchesPerQueryReference) {
  struct Case { int64_t len0, T, window, n_heads, n_kv_heads, head_dim; };
  for (const Case& c : {Case{0, 9, 0, 4, 2, 64}, Case{5, 17, 0, 8, 2, 40}, Case{30, 12, 16, 4, 4, 32},
                        Case{0, 40, 7, 16, 4, 128}, Case{300, 1, 0, 32, 4, 128}, Case{200, 2, 64, 12, 4, 64}}) {
    const int64_t n = c.len0 + c.T, kd = c.n_kv_heads * c.head_dim, qd = c.n_heads * c.head_dim;
    const auto q = test::randn(size_t(c.T * qd), 1), k = test::randn(size_t(n * kd), 2), v = test::randn(size_t(n * kd), 3);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    std::vector<float> want(static_cast<size_t>(c.T * qd));
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t ctx = c.len0 + t + 1, first = c.window > 0 && ctx > c.window ? ctx - c.window : 0;
      attention_ref(q.data() + t * qd, k.data() + first * kd, v.data() + first * kd, ctx - first, c.n_heads, c.n_kv_heads,
                    c.head_dim, c.head_dim, scale, want.data() + t * qd);
    }
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> one;  // on one thread; more threads split the head groups differently
      for (int threads : {1, 3, 16}) {
        set_cpu_threads(threads);
        std::vector<float> out(want.size(), NAN);
        attention_causal(q.data(), k.data(), v.data(), c.T, c.len0, c.window, c.n_heads, c.n_kv_heads, c.head_dim,
                         c.head_dim, scale, out.data());
        EXPECT_LE(test::rel_l2(out, want), 1e-5) << c.len0 << "+" << c.T << " isa " << cpu_isa_name(isa);
        if (one.empty()) one = out;
        EXPECT_EQ(out, one) << c.len0 << "+" << c.T << " isa " << cpu_isa_name(isa) << " threads " << threads;
      }
    }
  }
  set_cpu_threads(0);
}

// Absorbed MLA attention against its reference, at DeepSeek-like rank / rope widths.
TEST(OpsCpu, MlaAbsorbedAttentionMatchesReference) {
  struct Case { int64_t n_ctx, n_heads, rank, rope; };
  for (const Case& c : {Case{1, 4, 64, 16}, Case{9, 8, 128, 32}, Case{300, 16, 512, 64}}) {
    const auto qc = test::randn(size_t(c.n_heads * c.rank), 1, 0.1f), qp = test::randn(size_t(c.n_heads * c.rope), 2, 0.1f);
    const auto lat = test::randn(size_t(c.n_ctx * c.rank), 3), kp = test::randn(size_t(c.n_ctx * c.rope), 4);
    std::vector<float> want(static_cast<size_t>(c.n_heads * c.rank));
    mla_attention_absorbed_ref(qc.data(), qp.data(), lat.data(), kp.data(), c.n_ctx, c.n_heads, c.rank, c.rope, 0.07f,
                               want.data());
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> out(want.size(), NAN);
      mla_attention_absorbed(qc.data(), qp.data(), lat.data(), kp.data(), c.n_ctx, c.n_heads, c.rank, c.rope, 0.07f,
                             out.data());
      EXPECT_LE(test::rel_l2(out, want), 1e-5) << c.n_ctx << " isa " << cpu_isa_name(isa);
    }
  }
}

// The per-head products of absorbed MLA (W_kb^T q_nope, W_vb ctx) against the row references,
// per block, for the formats kv_b comes in (4-bit affine, bf16, fp8 blocks), ragged widths,
// 1 and 3 threads.
TEST(OpsCpu, RowBlockProductsMatchReference) {
  struct Case { int64_t blocks, nope, v, cols; };
  for (const Case& c : {Case{2, 8, 8, 64}, Case{5, 16, 24, 192}, Case{16, 128, 128, 512}}) {
    const int64_t kvd = c.nope + c.v, rows = c.blocks * kvd;
    std::vector<OwnedWeight> ws;
    ws.push_back(test::random_affine(rows, c.cols, 4, 64, DType::BF16, uint32_t(c.cols)));
    ws.push_back(test::random_dense(rows, c.cols, DType::BF16, uint32_t(c.cols + 1)));
    ws.push_back(test::random_fp8(rows, c.cols, 128, 128, DType::F32, uint32_t(c.cols + 2)));
    const auto q = test::randn(size_t(c.blocks * c.nope), 7), ctx = test::randn(size_t(c.blocks * c.cols), 8);
    for (const auto& o : ws) {
      std::vector<float> want_t(static_cast<size_t>(c.blocks * c.cols)), want(static_cast<size_t>(c.blocks * c.v));
      for (int64_t b = 0; b < c.blocks; ++b) {
        matvec_t_rows_ref(o.w, b * kvd, c.nope, q.data() + b * c.nope, want_t.data() + b * c.cols);
        matvec_rows_ref(o.w, b * kvd + c.nope, c.v, ctx.data() + b * c.cols, want.data() + b * c.v);
      }
      for (int threads : {1, 3})
        for (CpuIsa isa : test::cpu_isas_available()) {
          set_cpu_threads(threads);
          ScopedCpuIsa scoped(isa);
          std::vector<float> got_t(want_t.size(), NAN), got(want.size(), NAN);
          matvec_t_row_blocks(o.w, c.blocks, 0, kvd, c.nope, q.data(), c.nope, got_t.data(), c.cols);
          matvec_row_blocks(o.w, c.blocks, c.nope, kvd, c.v, ctx.data(), c.cols, got.data(), c.v);
          EXPECT_LE(test::rel_l2(got_t, want_t), 1e-5) << o.name() << " isa " << cpu_isa_name(isa);
          EXPECT_LE(test::rel_l2(got, want), 1e-5) << o.name() << " isa " << cpu_isa_name(isa);
        }
    }
  }
  set_cpu_threads(0);
}

// The SIMD gated delta step against the reference over several steps (state carried over).
TEST(OpsCpu, GatedDeltaStepMatchesReference) {
  for (auto [kd, vd] : {std::pair<int64_t, int64_t>{16, 24}, {128, 128}, {64, 100}}) {
    for (CpuIsa isa : test::cpu_isas_available()) {
      ScopedCpuIsa scoped(isa);
      std::vector<float> s_ref(static_cast<size_t>(kd * vd), 0.0f), s_opt = s_ref;
      for (int step = 0; step < 5; ++step) {
        const auto q = test::randn(size_t(kd), uint32_t(1 + step), 0.1f), k = test::randn(size_t(kd), uint32_t(11 + step), 0.1f);
        const auto v = test::randn(size_t(vd), uint32_t(21 + step));
        std::vector<float> want(static_cast<size_t>(vd)), got(static_cast<size_t>(vd), NAN);
        gated_delta_step_ref(s_ref.data(), q.data(), k.data(), v.data(), -0.3f, 0.7f, kd, vd, want.data());
        gated_delta_step(s_opt.data(), q.data(), k.data(), v.data(), -0.3f, 0.7f, kd, vd, got.data());
        EXPECT_LE(test::rel_l2(got, want), 1e-5) << kd << "x" << vd << " step " << step << " isa " << cpu_isa_name(isa);
        EXPECT_LE(test::rel_l2(s_opt, s_ref), 1e-5) << kd << "x" << vd << " step " << step;
      }
    }
  }
}

TEST(OpsCpu, ThreadCountDoesNotChangeResults) {
  const auto o = test::random_affine(2048, 2048, 4, 64, DType::BF16, 1);  // 2 MiB: parallel
  const auto x = test::randn(2048, 2);
  std::vector<float> y1(2048), y4(2048);
  set_cpu_threads(1);
  matvec(o.w, x.data(), y1.data());
  set_cpu_threads(4);
  EXPECT_EQ(cpu_thread_pool().size(), 4);
  matvec(o.w, x.data(), y4.data());
  set_cpu_threads(0);
  EXPECT_EQ(y1, y4);  // rows are independent: bitwise equal
}

}  // namespace
}  // namespace moeflux
