// Conversion round trips: each fixture converted to a pack must reproduce the Hugging Face
// goldens through the engine (rel L2 1e-4) when its quantisation is kept (MLX q4 sources by
// default, bf16 sources with --bits 16 --expert-bits 16), including via `moeflux logits`.
// Kept tensors must be bit-identical to the source. Adding an architecture = one line in
// INSTANTIATE_TEST_SUITE_P once the engine reads its fixture.
#include <gtest/gtest.h>

#include <cstring>

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
  auto gl = test::load_golden(test::fixture_dir(GetParam().fixture) + "/golden_long.safetensors");
  s.reset();
  EXPECT_LE(test::rel_l2(s.forward(gl.i32.at("input_ids")), gl.f32.at("logits")), kTol);
}

// Every source tensor the pack keeps is byte-identical; stacked MLX experts become slices.
TEST_P(PackRoundTrip, KeptTensorsAreBitExact) {
  test::TempDir tmp;
  const std::string pack = tmp.file("pack");
  test::convert_fixture(GetParam().fixture, pack, GetParam().args);
  auto src = TensorStore::open_dir(test::fixture_dir(GetParam().fixture));
  auto dst = PackStore::open(pack);
  size_t compared = 0;
  for (const auto& name : src->names()) {
    const TensorInfo& s = src->get(name);
    if (const TensorInfo* d = dst->find(name)) {
      ASSERT_EQ(d->nbytes, s.nbytes) << name;
      EXPECT_EQ(std::memcmp(d->data, s.data, s.nbytes), 0) << name;
      ++compared;
      continue;
    }
    const size_t p = name.find(".switch_mlp.");
    ASSERT_NE(p, std::string::npos) << "tensor '" << name << "' missing from the pack";
    const int64_t n = s.shape.at(0);
    const uint64_t slice = s.nbytes / uint64_t(n);
    for (int64_t e = 0; e < n; ++e) {
      const std::string en = name.substr(0, p) + ".experts." + std::to_string(e) + "." + name.substr(p + 12);
      const TensorInfo& d = dst->get(en);
      ASSERT_EQ(d.nbytes, slice) << en;
      EXPECT_EQ(std::memcmp(d.data, s.data + uint64_t(e) * slice, slice), 0) << en;
      ++compared;
    }
  }
  EXPECT_GT(compared, src->names().size() / 2);
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

}  // namespace
}  // namespace moeflux
