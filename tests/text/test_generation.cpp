// Text generation on the shipped demo model: perplexity against transformers, greedy equals
// temperature 0 and the greedy decoder, same seed same text, stop strings not emitted.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "engine/generate.h"
#include "engine/perplexity.h"
#include "text/generation.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

const std::string kDemo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";

struct Demo {
  std::unique_ptr<Model> model = load_model(kDemo);
  Tokenizer tok = Tokenizer::load(kDemo);
};

Demo& demo() {
  static Demo d;
  return d;
}

// tools/train_demo.py computed the held-out perplexity with transformers on exactly these
// (dequantised 4-bit) weights; the issue asks for agreement within 1%.
TEST(DemoText, PerplexityMatchesTransformers) {
  auto ref = nlohmann::json::parse(read_text_file(test::data_dir() + "/demo/results.json"));
  auto ids = demo().tok.encode(read_text_file(test::data_dir() + "/demo/heldout.txt"));
  EXPECT_EQ(int64_t(ids.size()), ref["heldout_tokens"].get<int64_t>());
  auto r = perplexity(*demo().model, ids, ref["ppl_ctx"].get<int64_t>(), ref["ppl_stride"].get<int64_t>());
  EXPECT_EQ(r.n_scored, ref["ppl_tokens_scored"].get<int64_t>());
  const double want = ref["ppl_q4"].get<double>();
  EXPECT_NEAR(r.ppl, want, 0.01 * want);
  std::printf("moeflux perplexity %.4f, transformers %.4f\n", r.ppl, want);
}

GenerateStats gen(const std::string& prompt, GenerateOptions opt) {
  Session s(*demo().model);
  return generate_text(s, demo().tok, demo().tok.encode(prompt), opt, nullptr);
}

TEST(DemoText, GreedyEqualsTemperatureZeroAndGreedyDecoder) {
  GenerateOptions opt;
  opt.max_tokens = 24;
  opt.sampling = SamplingParams::greedy();
  auto a = gen("The jury said that the", opt);
  opt.sampling = SamplingParams{};  // defaults, but temperature 0 overrides the rest
  opt.sampling.temperature = 0.0f;
  auto b = gen("The jury said that the", opt);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  Session s(*demo().model);
  EXPECT_EQ(greedy_generate(s, demo().tok.encode("The jury said that the"), 24), a.tokens);
  EXPECT_EQ(a.text, demo().tok.decode(a.tokens));
}

TEST(DemoText, SameSeedSameText) {
  GenerateOptions opt;
  opt.max_tokens = 32;
  opt.sampling.seed = 1234;
  auto a = gen("It was a cold morning", opt), b = gen("It was a cold morning", opt);
  EXPECT_EQ(a.text, b.text);
  opt.sampling.seed = 99;
  auto c = gen("It was a cold morning", opt);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(DemoText, StopStringIsNotEmitted) {
  GenerateOptions opt;
  opt.max_tokens = 40;
  opt.sampling = SamplingParams::greedy();
  auto full = gen("The jury said that the", opt);
  // stop at the second word of the greedy continuation
  const size_t sp = full.text.find(' ', 1);
  ASSERT_NE(sp, std::string::npos) << full.text;
  const std::string stop = full.text.substr(sp, 4);
  opt.stop = {stop};
  auto st = gen("The jury said that the", opt);
  EXPECT_EQ(st.stop_reason, "stop");
  EXPECT_EQ(st.text, full.text.substr(0, sp));
  EXPECT_EQ(st.text.find(stop), std::string::npos);
}

TEST(DemoText, EosEndsGeneration) {
  GenerateOptions opt;
  opt.max_tokens = 40;
  opt.sampling = SamplingParams::greedy();
  auto full = gen("The jury said that the", opt);
  opt.eos_ids = {full.tokens.at(3)};  // pretend the 4th greedy token is the end of sequence
  auto st = gen("The jury said that the", opt);
  EXPECT_EQ(st.stop_reason, "eos");
  EXPECT_EQ(st.generated_tokens, 4);
}

}  // namespace
}  // namespace moeflux
