// YaRN as transformers 5 computes it: the whole inverse-frequency table against the formula in
// double, the attention factor's three sources (attention_factor; mscale / mscale_all_dim when
// both are set; else 0.1 ln(factor) + 1), and the config defaults (factor from
// max_position_embeddings / original_max_position_embeddings, original from max_position_embeddings).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "format/config.h"
#include "backend/ref/ref.h"

namespace moeflux {
namespace {

ModelConfig parse_rope_json(const std::string& rope, int64_t max_pos = 163840) {
  return parse_model_config(R"({"model_type":"x","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,
      "vocab_size":10,"max_position_embeddings":)" + std::to_string(max_pos) + R"(,"rope_parameters":)" + rope + "}",
                            "config.json");
}

// transformers' _compute_yarn_parameters inverse frequencies, in double.
std::vector<double> yarn_inv_freq(double base, int64_t dim, double factor, double beta_fast, double beta_slow,
                                  double orig, bool truncate) {
  auto corr = [&](double rot) { return dim * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(base)); };
  double lo = corr(beta_fast), hi = corr(beta_slow);
  if (truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0), hi = std::min(hi, double(dim - 1));
  if (lo == hi) hi += 0.001;
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pf = std::pow(base, double(2 * i) / double(dim));
    const double ramp = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);
    const double extra = 1.0 - ramp;
    f[size_t(i)] = 1.0 / (factor * pf) * (1.0 - extra) + 1.0 / pf * extra;
  }
  return f;
}

double mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

TEST(RopeYarn, TableMatchesFormula) {
  struct Case {
    const char* json;
    int64_t dim;
    double base, factor, fast, slow, orig;
    bool truncate;
  };
  const Case cases[] = {
      {R"({"rope_type":"yarn","rope_theta":10000.0,"factor":40,"original_max_position_embeddings":4096})", 16, 1e4, 40,
       32, 1, 4096, true},
      {R"({"rope_type":"yarn","rope_theta":50000.0,"factor":4,"original_max_position_embeddings":32768,
           "beta_fast":16,"beta_slow":2,"truncate":false})", 64, 5e4, 4, 16, 2, 32768, false},
      {R"({"rope_type":"yarn","rope_theta":1000000.0,"factor":32,"original_max_position_embeddings":4096})", 64, 1e6,
       32, 32, 1, 4096, true},
  };
  for (const auto& c : cases) {
    const ModelConfig cfg = parse_rope_json(c.json);
    const RopeTable t = make_rope_table(cfg.rope, c.dim);
    const auto want = yarn_inv_freq(c.base, c.dim, c.factor, c.fast, c.slow, c.orig, c.truncate);
    ASSERT_EQ(t.inv_freq.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.inv_freq[i], want[i], 2e-6 * want[i]) << c.json << " " << i;
    EXPECT_NEAR(t.attn_factor, mscale(c.factor, 1.0), 1e-6) << c.json;
  }
}

TEST(RopeYarn, AttentionFactorSources) {
  auto attn = [](const std::string& extra) {
    const std::string head = R"({"rope_type":"yarn","factor":40,"original_max_position_embeddings":4096)";
    return make_rope_table(parse_rope_json(head + extra + "}").rope, 16).attn_factor;
  };
  // Explicit attention_factor wins.
  EXPECT_FLOAT_EQ(attn(R"(,"attention_factor":1.3,"mscale":1,"mscale_all_dim":1)"), 1.3f);
  // Both mscale and mscale_all_dim: their ratio (DeepSeek-V3 sets both to 1: no cos/sin scaling).
  EXPECT_NEAR(attn(R"(,"mscale":1.0,"mscale_all_dim":0.707)"), mscale(40, 1.0) / mscale(40, 0.707), 1e-6);
  EXPECT_FLOAT_EQ(attn(R"(,"mscale":1.0,"mscale_all_dim":1.0)"), 1.0f);
  // Only mscale_all_dim (mscale absent is falsy in transformers): the default 0.1 ln(factor) + 1.
  EXPECT_NEAR(attn(R"(,"mscale_all_dim":1.0)"), mscale(40, 1.0), 1e-6);
  EXPECT_NEAR(attn(""), mscale(40, 1.0), 1e-6);
}

TEST(RopeYarn, ConfigDefaults) {
  // No factor: max_position_embeddings / original_max_position_embeddings.
  auto a = parse_rope_json(R"({"rope_type":"yarn","original_max_position_embeddings":4096})", 65536);
  EXPECT_DOUBLE_EQ(a.rope.factor, 16.0);
  // An explicit factor is kept even when it differs from that ratio (transformers 5).
  auto b = parse_rope_json(R"({"rope_type":"yarn","factor":8,"original_max_position_embeddings":4096})", 65536);
  EXPECT_DOUBLE_EQ(b.rope.factor, 8.0);
  // No original: max_position_embeddings.
  auto c = parse_rope_json(R"({"rope_type":"yarn","factor":4})", 8192);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  // beta 0 means the default, as `beta_fast or 32` does.
  auto d = parse_rope_json(R"({"rope_type":"yarn","factor":4,"beta_fast":0,"beta_slow":0})");
  EXPECT_EQ(d.rope.beta_fast, 32.0);
  EXPECT_EQ(d.rope.beta_slow, 1.0);
  EXPECT_THROW(parse_rope_json(R"({"rope_type":"yarn","factor":-2})"), Error);
}

}  // namespace
}  // namespace moeflux
