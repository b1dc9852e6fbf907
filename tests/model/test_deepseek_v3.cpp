// deepseek_v3 beyond the shared fixture suite: both MLA attention paths against the goldens
// and each other (Session and `moeflux logits --mla`), latent cache size per token, the q_proj
// (q_lora_rank null) variant against the LoRA path, the MLX router gate kept in bf16, and
// config errors for impossible routing / MLA shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/session.h"
#include "format/safetensors.h"
#include "model/blocks/ffn.h"
#include "model/blocks/mla.h"
#include "model/model.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;
constexpr double kTol = 1e-4;

std::vector<float> decode_all(Session& s, const std::vector<int32_t>& ids) {
  std::vector<float> logits;
  for (int32_t id : ids) {
    auto l = s.forward(std::span<const int32_t>(&id, 1));
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

class MlaPaths : public ::testing::TestWithParam<std::string> {};

// Decode token by token (the latent cache grows one entry per step) and prefill, each path
// against the HF golden, then the two paths against each other.
TEST_P(MlaPaths, NaiveAndAbsorbedBothMatchGolden) {
  auto model = load_model(test::fixture_dir(GetParam()));
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  const auto& want = g.f32.at("logits");
  std::vector<float> decoded[2];
  for (MlaPath path : {MlaPath::Naive, MlaPath::Absorbed}) {
    ASSERT_EQ(set_mla_path(*model, path), int(model->cfg.n_layers));
    Session s(*model);
    auto& d = decoded[path == MlaPath::Naive ? 0 : 1];
    d = decode_all(s, ids);
    EXPECT_LE(test::rel_l2(d, want), kTol) << mla_path_name(path) << " decode";
    s.reset();
    EXPECT_LE(test::rel_l2(s.forward(ids), want), kTol) << mla_path_name(path) << " prefill";
  }
  const double between = test::rel_l2(decoded[0], decoded[1]);
  EXPECT_LE(between, 1e-5);
  EXPECT_GT(between, 0.0) << "the switch must change the computation (different summation orders)";
  std::printf("[ %s ] naive vs absorbed decode logits: rel L2 %.3g\n", GetParam().c_str(), between);
}

TEST_P(MlaPaths, LongSequenceBothPaths) {
  auto model = load_model(test::fixture_dir(GetParam()));
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden_long.safetensors");
  const auto& ids = g.i32.at("input_ids");
  for (MlaPath path : {MlaPath::Naive, MlaPath::Absorbed}) {
    set_mla_path(*model, path);
    Session s(*model);
    // A prefill of the first half, then decode: positions up to 159 through the YaRN tables.
    const size_t half = ids.size() / 2;
    auto logits = s.forward(std::span<const int32_t>(ids).first(half));
    auto rest = decode_all(s, std::vector<int32_t>(ids.begin() + long(half), ids.end()));
    logits.insert(logits.end(), rest.begin(), rest.end());
    EXPECT_LE(test::rel_l2(logits, g.f32.at("logits")), kTol) << mla_path_name(path);
  }
}

TEST_P(MlaPaths, LogitsCommandBothPaths) {
  auto g = test::load_golden(test::fixture_dir(GetParam()) + "/golden.safetensors");
  test::TempDir tmp;
  std::string ids;
  for (auto x : g.i32.at("input_ids")) ids += (ids.empty() ? "" : ",") + std::to_string(x);
  for (const char* path : {"naive", "absorbed"}) {
    std::string out;
    const std::string cmd = test::moeflux_exe() + " logits --model " + test::fixture_dir(GetParam()) + " --ids " +
                            ids + " --decode --mla " + path + " --out " + tmp.file("l.safetensors");
    ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
    EXPECT_LE(test::rel_l2(test::load_golden(tmp.file("l.safetensors")).f32.at("logits"), g.f32.at("logits")), kTol)
        << path;
  }
  std::string out;
  EXPECT_NE(test::run_command(test::moeflux_exe() + " logits --model " + test::fixture_dir(GetParam()) +
                                  " --ids 1 --mla folded --out " + tmp.file("x.safetensors"),
                              &out),
            0);
  EXPECT_NE(out.find("--mla"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(DeepseekV3, MlaPaths, ::testing::Values("deepseek_v3", "deepseek_v3/q4", "deepseek_v3/fp8"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The latent cache holds (kv_lora_rank + qk_rope_head_dim) floats per token and layer, against
// n_heads * (qk_head_dim + v_head_dim) for a cache of expanded keys and values.
TEST(DeepseekV3, LatentCacheBytesPerToken) {
  auto model = load_model(test::fixture_dir("deepseek_v3"));
  ConfigReader r = model->cfg.reader();
  const int64_t per_token = r.get_pos_int("kv_lora_rank") + r.get_pos_int("qk_rope_head_dim");
  const int64_t expanded = model->cfg.n_heads * (r.get_pos_int("qk_nope_head_dim") + r.get_pos_int("qk_rope_head_dim") +
                                                 r.get_pos_int("v_head_dim"));
  const std::vector<int32_t> ids{5, 17, 300, 2, 9, 41, 8};
  for (MlaPath path : {MlaPath::Naive, MlaPath::Absorbed}) {
    set_mla_path(*model, path);
    // One layer's state through the Mixer interface.
    const Layer& l0 = model->layers[0];
    Backend& be = *model->backend;
    auto st = l0.mixer->make_state(be);
    const int64_t dim = model->cfg.dim;
    std::vector<float> x(static_cast<size_t>(3 * dim), 0.5f), y(static_cast<size_t>(3 * dim));
    for (const SeqRows seq : {SeqRows{0, 3, 0, st.get()}, SeqRows{0, 1, 3, st.get()}})
      l0.mixer->forward(be, Act{x.data(), seq.rows, dim, Device::Host}, {&seq, 1},
                        Act{y.data(), seq.rows, dim, Device::Host});
    EXPECT_EQ(st->bytes(), size_t(4 * per_token) * sizeof(float));
    st->clear();
    EXPECT_EQ(st->bytes(), 0u);
    // The whole session.
    Session s(*model);
    s.forward(ids);
    s.forward(std::span<const int32_t>(ids).first(1));
    const size_t n = ids.size() + 1;
    EXPECT_EQ(s.state_bytes(), size_t(model->cfg.n_layers) * n * size_t(per_token) * sizeof(float));
  }
  std::printf("latent cache: %lld values per token per layer (%lld bytes f32); expanded k/v would be %lld values\n",
              (long long)per_token, (long long)(per_token * 4), (long long)expanded);
}

// MLX keeps the DeepSeek router gate in bf16 while the other linears are 4-bit affine.
TEST(DeepseekV3, Q4RouterGateStaysBf16) {
  auto model = load_model(test::fixture_dir("deepseek_v3/q4"));
  int moe_layers = 0;
  for (const auto& l : model->layers) {
    const auto* moe = dynamic_cast<const MoeFfn*>(l.ffn.get());
    if (!moe) continue;
    ++moe_layers;
    EXPECT_EQ(moe->router.format, WFormat::Dense);
    EXPECT_EQ(moe->router.dtype, DType::BF16);
    EXPECT_EQ(moe->experts[0].gate.format, WFormat::Affine);
    EXPECT_EQ(moe->experts[0].gate.bits, 4);
    ASSERT_EQ(moe->shared.size(), 1u);
    EXPECT_EQ(moe->shared[0].down.format, WFormat::Affine);
  }
  EXPECT_EQ(moe_layers, model->cfg.n_layers - model->cfg.reader().get_int("first_k_dense_replace"));
  const auto* mla = dynamic_cast<const MlaAttention*>(model->layers[0].mixer.get());
  ASSERT_NE(mla, nullptr);
  EXPECT_EQ(mla->wkv_b.format, WFormat::Affine);
}

// transformers' DeepseekV3Attention: scaling = qk_head_dim^-0.5 * mscale^2 with
// mscale = 0.1 * mscale_all_dim * ln(factor) + 1; no correction without mscale_all_dim.
TEST(DeepseekV3, SoftmaxScaleCarriesYarnMscale) {
  const std::string dir = test::fixture_dir("deepseek_v3");
  std::ifstream f(dir + "/config.json");
  const auto j = nlohmann::json::parse(f);
  const double qk = double(j["qk_nope_head_dim"]) + double(j["qk_rope_head_dim"]);
  const double factor = j["rope_parameters"]["factor"], all_dim = j["rope_parameters"]["mscale_all_dim"];
  const double m = 0.1 * all_dim * std::log(factor) + 1.0;
  auto model = load_model(dir);
  for (const auto& l : model->layers) {
    const auto* a = dynamic_cast<const MlaAttention*>(l.mixer.get());
    ASSERT_NE(a, nullptr);
    EXPECT_NEAR(a->scale, m * m / std::sqrt(qk), 1e-6);
  }
  test::TempDir tmp;
  fs::create_directories(tmp.file("m"));
  fs::copy_file(dir + "/model.safetensors", tmp.file("m/model.safetensors"));
  auto j2 = j;
  j2["rope_parameters"].erase("mscale_all_dim");
  std::ofstream(tmp.file("m/config.json")) << j2.dump();
  auto plain = load_model(tmp.file("m"));
  EXPECT_NEAR(dynamic_cast<const MlaAttention*>(plain->layers[0].mixer.get())->scale, 1.0 / std::sqrt(qk), 1e-7);
}

// --- Checkpoints rewritten from the fixture (f32 tensors) for variants and bad configs. ---

struct Checkpoint {
  nlohmann::json config;
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, std::vector<int64_t>> shape;
  void write(const std::string& dir) const {
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << config.dump(2);
    std::vector<OutTensor> out;
    for (const auto& [name, v] : t) out.push_back(out_f32(name, shape.at(name), v));
    write_safetensors(dir + "/model.safetensors", out);
  }
};

Checkpoint read_fixture(const std::string& name) {
  Checkpoint c;
  const std::string dir = test::fixture_dir(name);
  std::ifstream f(dir + "/config.json");
  c.config = nlohmann::json::parse(f);
  auto g = test::load_golden(dir + "/model.safetensors");
  c.t = std::move(g.f32);
  c.shape = std::move(g.shape);
  return c;
}

// With q_lora_rank null the query is one q_proj. Check it against the (golden-tested) LoRA path
// made equivalent: q_a_proj = identity over dim, q_a_layernorm = 1, q_b_proj = the same Q. With
// input_layernorm weights of 1 the mixer input already has unit mean square, so the LoRA path's
// extra RMSNorm changes it only by the epsilon.
TEST(DeepseekV3, QProjVariantMatchesEquivalentLora) {
  Checkpoint base = read_fixture("deepseek_v3");
  const int64_t dim = base.config["hidden_size"], H = base.config["num_attention_heads"];
  const int64_t qk = int64_t(base.config["qk_nope_head_dim"]) + int64_t(base.config["qk_rope_head_dim"]);
  const int64_t L = base.config["num_hidden_layers"];
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(dim)) * 2.0f);
  Checkpoint plain = base, lora = base;
  plain.config["q_lora_rank"] = nullptr;
  lora.config["q_lora_rank"] = dim;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    std::vector<float> q(static_cast<size_t>(H * qk * dim));
    for (auto& v : q) v = nd(rng);
    for (Checkpoint* c : {&plain, &lora}) {
      c->t[p + ".input_layernorm.weight"].assign(static_cast<size_t>(dim), 1.0f);
      for (const char* n : {".q_a_proj.weight", ".q_a_layernorm.weight", ".q_b_proj.weight"})
        c->t.erase(p + ".self_attn" + n), c->shape.erase(p + ".self_attn" + n);
    }
    plain.t[p + ".self_attn.q_proj.weight"] = q;
    plain.shape[p + ".self_attn.q_proj.weight"] = {H * qk, dim};
    std::vector<float> eye(static_cast<size_t>(dim * dim), 0.0f);
    for (int64_t i = 0; i < dim; ++i) eye[size_t(i * dim + i)] = 1.0f;
    lora.t[p + ".self_attn.q_a_proj.weight"] = eye;
    lora.shape[p + ".self_attn.q_a_proj.weight"] = {dim, dim};
    lora.t[p + ".self_attn.q_a_layernorm.weight"].assign(static_cast<size_t>(dim), 1.0f);
    lora.shape[p + ".self_attn.q_a_layernorm.weight"] = {dim};
    lora.t[p + ".self_attn.q_b_proj.weight"] = q;
    lora.shape[p + ".self_attn.q_b_proj.weight"] = {H * qk, dim};
  }
  test::TempDir tmp;
  plain.write(tmp.file("plain"));
  lora.write(tmp.file("lora"));
  auto mp = load_model(tmp.file("plain")), ml = load_model(tmp.file("lora"));
  const auto* a = dynamic_cast<const MlaAttention*>(mp->layers[0].mixer.get());
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->q_lora_rank, 0);
  auto g = test::load_golden(test::fixture_dir("deepseek_v3") + "/golden.safetensors");
  const auto& ids = g.i32.at("input_ids");
  Session sl(*ml);
  const auto want = sl.forward(ids);
  for (MlaPath path : {MlaPath::Naive, MlaPath::Absorbed}) {
    set_mla_path(*mp, path);
    Session sp(*mp);
    EXPECT_LE(test::rel_l2(sp.forward(ids), want), 1e-5) << mla_path_name(path) << " prefill";
    sp.reset();
    EXPECT_LE(test::rel_l2(decode_all(sp, ids), want), 1e-5) << mla_path_name(path) << " decode";
  }
}

// rope_interleave = true (the fixture) means: take the rope dims of q and k_pe as pairs
// (x_2i, x_2i+1). Permuting those projection rows to (evens, odds) and turning the flag off must
// give the same model.
TEST(DeepseekV3, RopeInterleaveEqualsPermutedRows) {
  Checkpoint base = read_fixture("deepseek_v3");
  ASSERT_TRUE(base.config["rope_interleave"].get<bool>());
  const int64_t H = base.config["num_attention_heads"], L = base.config["num_hidden_layers"];
  const int64_t nope = base.config["qk_nope_head_dim"], P = base.config["qk_rope_head_dim"];
  const int64_t R = base.config["kv_lora_rank"];
  Checkpoint flat = base;
  flat.config["rope_interleave"] = false;
  auto permute_rows = [&](std::vector<float>& w, int64_t cols, int64_t r0) {
    const std::vector<float> old = w;
    for (int64_t i = 0; i < P; ++i) {
      const int64_t src = r0 + (i < P / 2 ? 2 * i : 2 * (i - P / 2) + 1);
      std::copy_n(old.begin() + src * cols, cols, w.begin() + (r0 + i) * cols);
    }
  };
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    auto& qb = flat.t[p + "q_b_proj.weight"];
    const int64_t qcols = flat.shape[p + "q_b_proj.weight"][1];
    for (int64_t h = 0; h < H; ++h) permute_rows(qb, qcols, h * (nope + P) + nope);
    permute_rows(flat.t[p + "kv_a_proj_with_mqa.weight"], flat.shape[p + "kv_a_proj_with_mqa.weight"][1], R);
  }
  test::TempDir tmp;
  flat.write(tmp.file("flat"));
  auto model = load_model(tmp.file("flat"));
  auto g = test::load_golden(test::fixture_dir("deepseek_v3") + "/golden.safetensors");
  Session s(*model);
  EXPECT_LE(test::rel_l2(s.forward(g.i32.at("input_ids")), g.f32.at("logits")), kTol);
  // And the permutation matters: the unpermuted rows with the flag off are another model.
  Checkpoint wrong = base;
  wrong.config["rope_interleave"] = false;
  wrong.write(tmp.file("wrong"));
  auto mw = load_model(tmp.file("wrong"));
  Session sw(*mw);
  EXPECT_GT(test::rel_l2(sw.forward(g.i32.at("input_ids")), g.f32.at("logits")), 1e-3);
}

// A config edit that must be refused with moeflux::Error naming `needle`.
void expect_config_error(const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
  test::TempDir tmp;
  const std::string dir = tmp.file("m");
  fs::create_directories(dir);
  fs::copy_file(test::fixture_dir("deepseek_v3") + "/model.safetensors", dir + "/model.safetensors");
  std::ifstream f(test::fixture_dir("deepseek_v3") + "/config.json");
  auto j = nlohmann::json::parse(f);
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump();
  try {
    load_model(dir);
    ADD_FAILURE() << "no error; wanted '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DeepseekV3, BadConfigsAreErrors) {
  expect_config_error([](auto& j) { j["n_group"] = 3; }, "not divisible by n_group");
  expect_config_error([](auto& j) { j["topk_group"] = 5; }, "topk_group (5) > n_group (4)");
  expect_config_error([](auto& j) { j["num_experts_per_tok"] = 9; }, "num_experts_per_tok (9)");
  expect_config_error([](auto& j) { j["n_group"] = 16, j["topk_group"] = 4; }, "top-2");
  expect_config_error([](auto& j) { j["n_group"] = 0; }, "'n_group' must be a positive integer");
  expect_config_error([](auto& j) { j["qk_head_dim"] = 40; }, "qk_head_dim (40)");
  expect_config_error([](auto& j) { j["qk_rope_head_dim"] = 15; }, "must be even");
  expect_config_error([](auto& j) { j.erase("kv_lora_rank"); }, "missing field 'kv_lora_rank'");
  expect_config_error([](auto& j) { j["routed_scaling_factor"] = -1.0; }, "routed_scaling_factor");
  expect_config_error([](auto& j) { j["topk_method"] = "greedy"; }, "topk_method 'greedy'");
  expect_config_error([](auto& j) { j["scoring_func"] = "softmax"; }, "scoring_func 'softmax'");
  expect_config_error([](auto& j) { j["num_key_value_heads"] = 2; }, "num_key_value_heads");
  expect_config_error([](auto& j) { j["first_k_dense_replace"] = -1; }, "first_k_dense_replace");
  // Shapes from config.json that the checkpoint does not have: named tensor, not a crash.
  expect_config_error([](auto& j) { j["kv_lora_rank"] = 32; }, "kv_a_proj_with_mqa");
  expect_config_error([](auto& j) { j["q_lora_rank"] = nullptr; }, "q_proj.weight");
  expect_config_error([](auto& j) { j["n_shared_experts"] = 2; }, "shared_experts");
}

}  // namespace
}  // namespace moeflux
