// The hybrid architectures beyond the golden comparisons: config validation (bad configs give
// moeflux::Error naming the field), transformers' config defaults (layer schedule from
// full_attention_interval, partial_rotary_factor 0.25), prefill + decode against token-by-token
// decode, and LayerState::buffers() carrying a sequence's state into a fresh state.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/session.h"
#include "model/model.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class HybridTest : public ::testing::TestWithParam<std::string> {
 protected:
  // A copy of the fixture whose config.json `edit` may change.
  std::string copy_with(const std::function<void(json&)>& edit) {
    const std::string dir = tmp_.file("m" + std::to_string(n_copies_++));
    fs::create_directories(dir);
    const std::string src = test::fixture_dir(GetParam());
    fs::copy_file(src + "/model.safetensors", dir + "/model.safetensors");
    std::ifstream in(src + "/config.json");
    json cfg = json::parse(in);
    edit(cfg);
    std::ofstream(dir + "/config.json") << cfg.dump(2);
    return dir;
  }
  void expect_load_error(const std::function<void(json&)>& edit, const std::string& needle) {
    const std::string dir = copy_with(edit);
    try {
      load_model(dir);
      ADD_FAILURE() << "loaded without error; wanted '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "wanted '" << needle << "' in: " << e.what();
    }
  }
  test::TempDir tmp_;
  int n_copies_ = 0;
};

TEST_P(HybridTest, BadConfigsNameTheField) {
  expect_load_error([](json& c) { c["layer_types"].erase(0); }, "layer_types has 3 entries but num_hidden_layers is 4");
  expect_load_error([](json& c) { c["layer_types"][1] = "sliding_attention"; },
                    "layer_types[1] is 'sliding_attention'");
  expect_load_error([](json& c) { c["linear_num_value_heads"] = 3; },
                    "linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)");
  expect_load_error([](json& c) { c["linear_conv_kernel_dim"] = 0; },
                    "'linear_conv_kernel_dim' must be a positive integer");
  expect_load_error([](json& c) { c.erase("linear_key_head_dim"); }, "missing field 'linear_key_head_dim'");
  expect_load_error([](json& c) { c["hidden_act"] = "gelu"; }, "hidden_act 'gelu' is not supported");
  // Consistent config, but the checkpoint disagrees: the shape error names the tensor.
  expect_load_error([](json& c) { c["linear_num_value_heads"] = 6; }, "linear_attn.");
}

TEST_P(HybridTest, TransformersConfigDefaults) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  // Without layer_types the schedule is full attention every 4th layer (as the fixture's), and
  // partial_rotary_factor defaults to 0.25: the model still reproduces the goldens.
  const std::string dir = copy_with([](json& c) {
    c.erase("layer_types");
    c.erase("partial_rotary_factor");
    c["rope_parameters"].erase("partial_rotary_factor");
  });
  auto m = load_model(dir);
  Session s(*m);
  EXPECT_LE(test::rel_l2(s.forward(g.i32.at("input_ids")), g.f32.at("logits")), 1e-4);
  // full_attention_interval 2 makes layer 1 full attention, which this checkpoint lacks.
  expect_load_error([](json& c) {
    c.erase("layer_types");
    c["full_attention_interval"] = 2;
  }, "model.layers.1.self_attn.");
}

TEST_P(HybridTest, PrefillThenDecodeEqualsTokenByToken) {
  auto m = load_model(test::fixture_dir(GetParam()));
  const auto ids = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors").i32.at("input_ids");
  const size_t N = 17;
  Session a(*m), b(*m);
  std::vector<float> la = a.forward(std::span<const int32_t>(ids).first(N)), lb;
  for (size_t i = N; i < ids.size(); ++i) {
    auto l = a.forward(std::span<const int32_t>(ids).subspan(i, 1));
    la.insert(la.end(), l.begin(), l.end());
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto l = b.forward(std::span<const int32_t>(ids).subspan(i, 1));
    lb.insert(lb.end(), l.begin(), l.end());
  }
  // Batched prefill (matmul) and single-token decode (matvec) sum in different orders.
  EXPECT_LE(test::rel_l2(la, lb), 1e-5);
}

TEST_P(HybridTest, StateBuffersCarryTheSequence) {
  auto m = load_model(test::fixture_dir(GetParam()));
  const int64_t dim = m->cfg.dim, N = 9, M = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>((N + M) * dim));
  for (auto& v : x) v = nd(rng);
  Backend& be = *m->backend;
  // One sequence's rows through a mixer: `in` at positions pos0 .., appended to st.
  auto run = [&](const Mixer& mixer, Act in, int64_t pos0, LayerState& st, Act out) {
    const SeqRows seq{0, in.rows, pos0, &st};
    mixer.forward(be, in, {&seq, 1}, out);
  };
  // Rows [r0, r0 + n) of a (N + M, dim) host matrix.
  auto rows = [&](std::vector<float>& v, int64_t r0, int64_t n) {
    return Act{v.data() + r0 * dim, n, dim, Device::Host};
  };
  for (size_t l = 0; l < m->layers.size(); ++l) {
    const Mixer& mixer = *m->layers[l].mixer;
    auto full = mixer.make_state(be), first = mixer.make_state(be), restored = mixer.make_state(be);
    std::vector<float> want(x.size()), out(x.size());
    run(mixer, rows(x, 0, N + M), 0, *full, rows(want, 0, N + M));
    run(mixer, rows(x, 0, N), 0, *first, rows(out, 0, N));
    auto from = first->buffers(), to = restored->buffers();
    ASSERT_EQ(from.size(), to.size());
    for (size_t i = 0; i < from.size(); ++i) {
      EXPECT_STREQ(from[i].name, to[i].name);
      if (!to[i].grows) {
        ASSERT_EQ(to[i].data->size(), from[i].data->size()) << from[i].name;
      }
      *to[i].data = *from[i].data;
    }
    EXPECT_EQ(restored->bytes(), first->bytes());
    first->clear();  // the copy must not share storage with the original
    run(mixer, rows(x, N, M), N, *restored, rows(out, N, M));
    EXPECT_LE(test::rel_l2(out, want), 1e-6) << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Hybrid, HybridTest,
                         ::testing::Values("qwen3_next/q4", "qwen3_5_moe_text", "qwen3_5_moe_text/q4"),
                         test::param_name);

}  // namespace
}  // namespace moeflux
