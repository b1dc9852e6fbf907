// `moeflux synth`: the Hugging Face layout (sharded, indexed) loads in the engine; a pack
// synthesised directly is byte-identical to the Hugging Face synthesis converted; presets
// carry the real models' dimensions, so expert records have the real size; --routing-skew
// concentrates the routing on a few experts of each layer (uniform without it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "convert/synth.h"
#include "core/error.h"
#include "engine/session.h"
#include "format/pack_store.h"
#include "model/model.h"
#include "pack/pack_test_util.h"
#include "stream/streaming.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;

void run_ok(const std::string& args) {
  std::string out;
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " " + args, &out), 0) << args << "\n" << out;
}

TEST(Synth, HfConvertEqualsDirectPack) {
  test::TempDir tmp;
  const std::string small = "--preset qwen3-30b-a3b --layers 2 --experts 4 --vocab 512 --seed 7 --quiet";
  run_ok("synth " + small + " --shard-gb 0.03 --out " + tmp.file("hf"));
  EXPECT_TRUE(fs::exists(tmp.file("hf/model.safetensors.index.json")));
  size_t shards = 0;
  for (const auto& e : fs::directory_iterator(tmp.file("hf"))) shards += e.path().extension() == ".safetensors";
  EXPECT_GE(shards, 2u);  // 30 MB shards
  run_ok("convert --quiet " + tmp.file("hf") + " " + tmp.file("p1"));
  run_ok("synth " + small + " --format pack --out " + tmp.file("p2"));
  for (const char* f : {"manifest.json", "dense.bin", "experts/layer_000.bin", "experts/layer_001.bin"})
    EXPECT_TRUE(test::read_file(tmp.file("p1/") + f) == test::read_file(tmp.file("p2/") + f)) << f;
  // Both load and agree; logits are finite.
  auto mh = load_model(tmp.file("hf"));
  auto mp = load_model(tmp.file("p2"));
  Session sh(*mh), sp(*mp);
  const std::vector<int32_t> ids{1, 2, 3, 4};
  const auto lh = sh.forward(ids), lp = sp.forward(ids);
  for (float v : lp) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LE(test::rel_l2(lp, lh), 0.3);  // 4-bit pack vs bf16 checkpoint
  run_ok("verify --quiet " + tmp.file("p2"));
}

TEST(Synth, DifferentSeedsDiffer) {
  test::TempDir tmp;
  const std::string small = "--preset qwen3-30b-a3b --layers 1 --experts 2 --vocab 64 --quiet --format pack --bits 8";
  run_ok("synth " + small + " --seed 1 --out " + tmp.file("a"));
  run_ok("synth " + small + " --seed 2 --out " + tmp.file("b"));
  EXPECT_NE(test::read_file(tmp.file("a/dense.bin")), test::read_file(tmp.file("b/dense.bin")));
}

// The published dimensions (config.json of Qwen/Qwen3.5-397B-A17B) and the record they imply
// at 4-bit, group 64: gate/up (1024 x 4096) and down (4096 x 1024), each with bf16 scales and
// biases.
TEST(Synth, Qwen35RecordHasRealSize) {
  const auto c = synth_config(SynthOptions{.preset = "qwen3.5-397b-a17b"});
  EXPECT_EQ(c["hidden_size"], 4096);
  EXPECT_EQ(c["moe_intermediate_size"], 1024);
  EXPECT_EQ(c["num_experts"], 512);
  EXPECT_EQ(c["num_experts_per_tok"], 10);
  EXPECT_EQ(c["num_hidden_layers"], 60);
  const uint64_t D = 4096, I = 1024;
  const uint64_t per_matrix = D * I / 2 + 2 * (D * I / 64) * 2;  // q4 words + scales + biases
  test::TempDir tmp;
  run_ok("synth --preset qwen3.5-397b-a17b --layers 1 --experts 2 --vocab 256 --quiet --format pack --out " +
         tmp.file("p"));
  const auto m = PackStore::open(tmp.file("p"))->manifest();
  ASSERT_EQ(m.experts.size(), 1u);
  for (const auto& r : m.experts[0].records) EXPECT_EQ(r.size, align_up(3 * per_matrix, kRecordAlign));
}

TEST(Synth, EveryPresetHasExpertsAndShapes) {
  for (const auto& p : synth_presets()) {
    const auto c = synth_config(SynthOptions{.preset = p, .layers = 2, .experts = 4});
    const auto ts = synth_tensors(c);
    size_t experts = 0;
    for (const auto& t : ts) experts += t.name.find(".experts.3.") != std::string::npos;
    EXPECT_EQ(experts, p == "deepseek-v3" ? 3u : 6u) << p;  // DeepSeek keeps its first layer dense
    EXPECT_EQ(ts.front().name, "model.embed_tokens.weight") << p;
  }
  EXPECT_THROW(synth_config(SynthOptions{.preset = "llama"}), Error);
}

// Share of a layer's routings that went to its most used quarter of the experts, over a prefill
// of 128 tokens spread over the vocabulary, for a one-layer model of 32 experts (8 per token).
double top_quarter_share(const std::string& skew) {
  test::TempDir tmp;
  run_ok("synth --preset qwen3-30b-a3b --layers 1 --experts 32 --vocab 512 --quiet --format pack --routing-skew " + skew +
         " --out " + tmp.file("p"));
  StreamOptions o;
  o.budget = "100%";
  auto m = load_model(tmp.file("p"), o);
  ExpertCache* c = expert_cache(*m);
  EXPECT_NE(c, nullptr);
  if (!c) return 0;
  std::vector<int32_t> ids;
  for (int i = 0; i < 128; ++i) ids.push_back(int32_t((7 + 131 * i) % 512));
  Session s(*m);
  s.forward(ids, {.all_logits = false});
  std::vector<uint64_t> n = c->access_counts().at(0);
  std::sort(n.rbegin(), n.rend());
  uint64_t top = 0, all = 0;
  for (size_t e = 0; e < n.size(); ++e) all += n[e], top += e < n.size() / 4 ? n[e] : 0;
  return all ? double(top) / double(all) : 0;
}

TEST(Synth, RoutingSkewConcentratesTheRouting) {  // layer 0 over 128 tokens: the weakest case
  const double uniform = top_quarter_share("0"), skewed = top_quarter_share("3");
  std::printf("routing to the top quarter of the experts: %.2f uniform, %.2f with skew 3\n", uniform, skewed);
  EXPECT_LT(uniform, 0.4);
  EXPECT_GT(skewed, 0.5);
}

}  // namespace
}  // namespace moeflux
