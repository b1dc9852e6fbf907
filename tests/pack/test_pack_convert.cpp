// Conversion round trips: each fixture converted to a pack must reproduce the Hugging Face
// goldens through the engine (rel L2 1e-4) when its quantisation is kept (MLX q4 sources by
// default, bf16 sources with --bits 16 --expert-bits 16), including via `moeflux logits`.
// Kept tensors must be bit-identical to the source. Adding an architecture = one line in
// INSTANTIATE_TEST_SUITE_P once the engine reads its fixture.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/session.h"
#include "format/pack_store.h"
#include "model/model.h"
#include "pack/pack_test_util.h"

namespace moeflux {
namespace {

constexpr double kTol = 1e-4;

struct Case {
  const char* fixture;
  const char* args;
};

class PackRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(PackRoundTrip, LogitsMatchGolden) {
  test::TempDir tmp;
  const std::string pack = tmp.file("pack");
  test::convert_fixture(GetParam().fixture, pack, GetParam().args);
  auto g = test::load_golden(test::fixture_dir(GetParam().fixture) + "/golden.safetensors");
  auto model = load_model(pack);
  Session s(*model);
  EXPECT_LE(test::rel_l2(s.forward(g.i32.at("input_ids")), g.f32.at("logits")), kTol);
  // golden_long ships with every quantised form (q4, fp8) and deepseek_v3's bf16 one only; a
  // quantised form without it is a lost file, not a skip.
  const std::string long_path = test::fixture_dir(GetParam().fixture) + "/golden_long.safetensors";
  const bool has_long = std::filesystem::exists(long_path);
  if (std::strchr(GetParam().fixture, '/')) {
    ASSERT_TRUE(has_long) << long_path;
  }
  if (!has_long) return;
  auto gl = test::load_golden(long_path);
  s.reset();
  EXPECT_LE(test::rel_l2(s.forward(gl.i32.at("input_ids")), gl.f32.at("logits")), kTol);
}

// Every source tensor the pack keeps is byte-identical; stacked MLX experts become slices.
// Returns how many were compared; with `allow_requantised`, a float linear may instead have
// become affine (`.scales` present in the pack).
size_t compare_kept(const std::string& fixture, const std::string& pack, bool allow_requantised) {
  auto src = TensorStore::open_dir(test::fixture_dir(fixture));
  auto dst = PackStore::open(pack);
  size_t compared = 0;
  for (const auto& name : src->names()) {
    const TensorInfo& s = src->get(name);
    const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    if (const TensorInfo* d = dst->find(name)) {
      if (allow_requantised && d->dtype == DType::U32 && s.dtype != DType::U32 && dst->has(module + ".scales"))
        continue;
      EXPECT_EQ(d->nbytes, s.nbytes) << name;
      if (d->nbytes == s.nbytes) {
        EXPECT_EQ(std::memcmp(d->data, s.data, s.nbytes), 0) << name;
      }
      ++compared;
      continue;
    }
    const size_t p = name.find(".switch_mlp.");
    EXPECT_NE(p, std::string::npos) << "tensor '" << name << "' missing from the pack";
    if (p == std::string::npos) continue;
    const int64_t n = s.shape.at(0);
    const uint64_t slice = s.nbytes / uint64_t(n);
    for (int64_t e = 0; e < n; ++e) {
      const std::string en = name.substr(0, p) + ".experts." + std::to_string(e) + "." + name.substr(p + 12);
      const TensorInfo* d = dst->find(en);
      EXPECT_TRUE(d && d->nbytes == slice) << en;
      if (d && d->nbytes == slice) {
        EXPECT_EQ(std::memcmp(d->data, s.data + uint64_t(e) * slice, slice), 0) << en;
      }
      ++compared;
    }
  }
  return compared;
}

TEST_P(PackRoundTrip, KeptTensorsAreBitExact) {
  test::TempDir tmp;
  const std::string pack = tmp.file("pack");
  test::convert_fixture(GetParam().fixture, pack, GetParam().args);
  EXPECT_GT(compare_kept(GetParam().fixture, pack, false), size_t(30));
}

TEST_P(PackRoundTrip, LogitsCommandOnPack) {
  test::TempDir tmp;
  const std::string pack = tmp.file("pack");
  test::convert_fixture(GetParam().fixture, pack, GetParam().args);
  auto g = test::load_golden(test::fixture_dir(GetParam().fixture) + "/golden.safetensors");
  std::string ids;
  for (int32_t id : g.i32.at("input_ids")) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  std::string out;
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " logits --model " + pack + " --ids " + ids + " --out " +
                                  tmp.file("l.safetensors"),
                              &out),
            0)
      << out;
  EXPECT_LE(test::rel_l2(test::load_golden(tmp.file("l.safetensors")).f32.at("logits"), g.f32.at("logits")), kTol);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = std::string(info.param.fixture) + (*info.param.args ? "_bits16" : "");
  for (auto& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Qwen3Moe, PackRoundTrip,
                         ::testing::Values(Case{"qwen3_moe/q4", ""}, Case{"qwen3_moe", "--bits 16 --expert-bits 16"}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Mixtral, PackRoundTrip,
                         ::testing::Values(Case{"mixtral/q4", ""}, Case{"mixtral", "--bits 16 --expert-bits 16"}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Hybrid, PackRoundTrip,
                         ::testing::Values(Case{"qwen3_next/q4", ""}, Case{"qwen3_5_moe_text/q4", ""},
                                           Case{"qwen3_5_moe_text", "--bits 16 --expert-bits 16"}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(DeepseekV3, PackRoundTrip,
                         ::testing::Values(Case{"deepseek_v3/q4", ""}, Case{"deepseek_v3/fp8", ""},
                                           Case{"deepseek_v3", "--bits 16 --expert-bits 16"}),
                         case_name);

// Architectures the engine does not run yet (other branches) still convert: classification is
// by name only. Quantised sources (MLX q4, DeepSeek FP8) are kept bit for bit; bf16 sources
// keep everything but the linears they quantise; the packs verify.
class PackConvertOnly : public ::testing::TestWithParam<const char*> {};

TEST_P(PackConvertOnly, ConvertsAndVerifies) {
  test::TempDir tmp;
  const std::string pack = tmp.file("pack");
  test::convert_fixture(GetParam(), pack);
  const bool quantised_source = std::string(GetParam()).find('/') != std::string::npos;
  EXPECT_GT(compare_kept(GetParam(), pack, !quantised_source), size_t(quantised_source ? 30 : 5));
  std::string out;
  EXPECT_EQ(test::run_command(test::moeflux_exe() + " verify --quiet " + pack, &out), 0) << out;
  EXPECT_FALSE(PackStore::open(pack)->manifest().experts.empty());
}

INSTANTIATE_TEST_SUITE_P(OtherArchs, PackConvertOnly,
                         ::testing::Values("qwen3_next/q4", "qwen3_5_moe_text", "qwen3_5_moe_text/q4",
                                           "deepseek_v3", "deepseek_v3/q4", "deepseek_v3/fp8"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           for (auto& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace moeflux
