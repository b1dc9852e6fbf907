// bf16 -> quantised conversion against the engine's own reference: every quantised linear in
// the pack must equal quantize_row_affine_ref of the source rows bit for bit (FP8: within the
// e4m3 rounding bound of its block scale), and the pack's logits must equal those of a
// checkpoint holding the dequantised weights (dequant_row_ref) as f32, and stay near golden.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "backend/cpu/cpu_pool.h"
#include "convert/encode.h"
#include "core/thread_pool.h"
#include "engine/session.h"
#include "format/pack_store.h"
#include "model/model.h"
#include "model/weight_loader.h"
#include "pack/pack_test_util.h"
#include "util/random_weights.h"

namespace moeflux {
namespace {

struct QCase {
  const char* fixture;
  const char* args;
  double golden_tol;  // loose: quantisation error of these tiny random models vs the bf16 golden
};

class PackQuantize : public ::testing::TestWithParam<QCase> {};

// The pack's weight `name` (a linear) as a QWeight, through the engine's loader.
QWeight pack_linear(const PackStore& p, const ModelConfig& c, const std::string& module, const TensorInfo& src) {
  WeightLoader w(p, c);
  return w.linear(module, src.shape[0], src.shape[1]);
}

TEST_P(PackQuantize, MatchesReferenceQuantisation) {
  test::TempDir tmp;
  const std::string pack = tmp.file("pack");
  const std::string fdir = test::fixture_dir(GetParam().fixture);
  test::convert_fixture(GetParam().fixture, pack, GetParam().args);
  auto src = TensorStore::open_dir(fdir);
  auto p = PackStore::open(pack);
  const ModelConfig pc = p->model_config();
  std::vector<OutTensor> fake;  // the dequantised model, as a checkpoint
  size_t quantised = 0;
  for (const auto& name : src->names()) {
    const TensorInfo& s = src->get(name);
    OutTensor o{name, s.dtype, s.shape, std::vector<uint8_t>(s.data, s.data + s.nbytes)};
    const std::string module = name.substr(0, name.size() - 7);
    const bool linear = s.shape.size() == 2 && name.size() > 7 && name.ends_with(".weight");
    if (!linear || !p->find(module + ".weight")) {
      fake.push_back(std::move(o));
      continue;
    }
    const QWeight q = pack_linear(*p, pc, module, s);
    const int64_t rows = s.shape[0], cols = s.shape[1];
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(cols));
    std::vector<float> deq(static_cast<size_t>(rows * cols));
    if (q.format == WFormat::Dense) {
      ASSERT_TRUE(name.ends_with(".gate.weight")) << name << " was not quantised";
      ASSERT_EQ(std::memcmp(q.data, s.data, s.nbytes), 0) << name;
      fake.push_back(std::move(o));
      continue;
    }
    ++quantised;
    const int64_t ng = q.format == WFormat::Affine ? cols / q.group_size : 0;
    std::vector<uint32_t> words(static_cast<size_t>(q.format == WFormat::Affine ? cols * q.bits / 32 : 0));
    std::vector<uint16_t> sc(static_cast<size_t>(ng)), bi(static_cast<size_t>(ng));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) x[size_t(c)] = load_f32(s.dtype, s.data, size_t(r * cols + c));
      dequant_row_ref(q, r, deq.data() + r * cols);
      if (q.format == WFormat::Affine) {
        quantize_row_affine_ref(x.data(), cols, q.bits, q.group_size, words.data(), sc.data(), bi.data());
        ASSERT_EQ(std::memcmp(q.data + size_t(r) * q.row_bytes(), words.data(), q.row_bytes()), 0) << name << " row " << r;
        ASSERT_EQ(std::memcmp(q.scales + size_t(r * ng) * 2, sc.data(), size_t(ng) * 2), 0) << name << " row " << r;
        ASSERT_EQ(std::memcmp(q.biases + size_t(r * ng) * 2, bi.data(), size_t(ng) * 2), 0) << name << " row " << r;
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          const float scale = load_f32(q.sdtype, q.block_scales,
                                       size_t((r / 128) * ((cols + 127) / 128) + c / 128));
          // e4m3: 3 mantissa bits -> relative error <= 2^-4, absolute <= 2^-9 * scale near zero
          ASSERT_LE(std::fabs(deq[size_t(r * cols + c)] - x[size_t(c)]),
                    std::fabs(x[size_t(c)]) / 16 + scale * std::ldexp(1.0f, -9)) << name;
        }
      }
    }
    fake.push_back(out_f32(name, s.shape, deq));
  }
  EXPECT_GT(quantised, size_t(10));
  const std::string ref = tmp.file("ref");
  std::filesystem::create_directory(ref);
  std::filesystem::copy_file(fdir + "/config.json", ref + "/config.json");
  write_safetensors(ref + "/model.safetensors", fake);
  auto g = test::load_golden(fdir + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  auto mp = load_model(pack);
  auto mr = load_model(ref);
  Session sp(*mp), sr(*mr);
  const auto lp = sp.forward(ids), lr = sr.forward(ids);
  EXPECT_LE(test::rel_l2(lp, lr), 1e-5);
  EXPECT_LE(test::rel_l2(lp, g.f32.at("logits")), GetParam().golden_tol);
}

INSTANTIATE_TEST_SUITE_P(
    All, PackQuantize,
    ::testing::Values(QCase{"qwen3_moe", "", 0.4}, QCase{"mixtral", "", 0.4},
                      QCase{"qwen3_moe", "--bits 8 --expert-bits 3", 0.5}, QCase{"mixtral", "--bits fp8", 0.25},
                      QCase{"qwen3_moe", "--bits 2 --group-size 32", 1.5}),
    [](const ::testing::TestParamInfo<QCase>& i) {
      std::string n = std::string(i.param.fixture) + "_" + std::to_string(i.index);
      for (auto& c : n)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

// Conversion splits a weight's rows over the CPU pool: the bytes of every output part are the
// same on one thread and on three (1000 rows of 256 bf16 columns: several chunks of rows), and
// the affine parts are the reference quantisation of every row.
TEST(EncodeLinear, SameBytesOnAnyThreadCount) {
  const test::OwnedWeight src = test::random_dense(1000, 256, DType::BF16, 11);
  const Target targets[] = {{Target::Kind::Affine, 4, 64}, {Target::Kind::Affine, 8, 32}, {Target::Kind::Fp8, 0, 64}};
  for (const Target& t : targets) {
    set_cpu_threads(1);
    const std::vector<OutPart> one = encode_linear(src.w, t);
    set_cpu_threads(3);
    const std::vector<OutPart> three = encode_linear(src.w, t);
    set_cpu_threads(0);
    ASSERT_EQ(one.size(), three.size()) << t.describe();
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(one[i].nbytes, three[i].nbytes) << t.describe() << one[i].suffix;
      EXPECT_EQ(0, std::memcmp(one[i].data, three[i].data, one[i].nbytes)) << t.describe() << one[i].suffix;
    }
    if (t.kind != Target::Kind::Affine) continue;
    const int64_t ng = 256 / t.group_size, words = 256 * t.bits / 32;
    std::vector<float> row(256);
    std::vector<uint32_t> q(static_cast<size_t>(words));
    std::vector<uint16_t> sc(static_cast<size_t>(ng)), bi(static_cast<size_t>(ng));
    for (int64_t r = 0; r < 1000; ++r) {
      dequant_row_ref(src.w, r, row.data());
      quantize_row_affine_ref(row.data(), 256, t.bits, t.group_size, q.data(), sc.data(), bi.data());
      ASSERT_EQ(0, std::memcmp(q.data(), three[0].data + r * words * 4, size_t(words) * 4)) << t.describe() << " row " << r;
      ASSERT_EQ(0, std::memcmp(sc.data(), three[1].data + r * ng * 2, size_t(ng) * 2)) << t.describe() << " row " << r;
    }
  }
}

// Every finite e4m3 value encodes back to itself; values between round to the nearest.
TEST(Fp8Encode, RoundTripsAndRounds) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    const float v = f8e4m3_to_f32(uint8_t(b));
    const uint8_t e = f32_to_f8e4m3(v);
    if (v == 0) EXPECT_EQ(e & 0x7f, 0);
    else EXPECT_EQ(e, b) << v;
  }
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);   // saturates to 448
  EXPECT_EQ(f32_to_f8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.0625f)), 1.0f);   // tie -> even mantissa
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.1875f)), 1.25f);  // tie -> even mantissa
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.1f)), 1.125f);
}

}  // namespace
}  // namespace moeflux
