// config.json parsing: defaults, rope parameters in both spellings, MLX quantisation with
// per-module overrides, DeepSeek FP8 block size, and clear errors for bad fields.
#include <gtest/gtest.h>

#include "core/error.h"
#include "format/config.h"

namespace moeflux {
namespace {

const char* kBase = R"({"model_type":"qwen3_moe","hidden_size":128,"num_hidden_layers":2,
  "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100)";

ModelConfig parse(const std::string& extra) { return parse_model_config(std::string(kBase) + extra + "}", "c.json"); }

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_model_config(text, "c.json");
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Config, Defaults) {
  auto c = parse("");
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.quant.kind, QuantConfig::Kind::None);
}

TEST(Config, RopeBothSpellings) {
  auto a = parse(R"(,"rope_parameters":{"rope_theta":5000.0,"partial_rotary_factor":0.25})");
  EXPECT_EQ(a.rope.theta, 5000.0);
  EXPECT_EQ(a.rope.partial_rotary_factor, 0.25);
  auto b = parse(R"(,"rope_theta":7000.0,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096})");
  EXPECT_EQ(b.rope.theta, 7000.0);
  EXPECT_EQ(b.rope.type, "yarn");
  EXPECT_EQ(b.rope.original_max_position_embeddings, 4096);
}

TEST(Config, MlxQuantisationOverrides) {
  auto c = parse(R"(,"quantization":{"group_size":64,"bits":4,"model.layers.0.mlp.gate":{"group_size":64,"bits":8},
      "lm_head":false})");
  EXPECT_EQ(c.quant.kind, QuantConfig::Kind::Affine);
  EXPECT_EQ(c.quant.for_module("model.layers.0.mlp.gate").bits, 8);
  EXPECT_EQ(c.quant.for_module("model.layers.1.mlp.gate").bits, 4);
  EXPECT_EQ(c.quant.for_module("lm_head").bits, 0);
}

TEST(Config, Fp8BlockSize) {
  auto c = parse(R"(,"quantization_config":{"quant_method":"fp8","weight_block_size":[64,32]})");
  EXPECT_EQ(c.quant.kind, QuantConfig::Kind::Fp8Block);
  EXPECT_EQ(c.quant.fp8_block_rows, 64);
  EXPECT_EQ(c.quant.fp8_block_cols, 32);
}

TEST(Config, Errors) {
  expect_error("{", "not valid JSON");
  expect_error("[]", "not a JSON object");
  expect_error(R"({"hidden_size":1})", "model_type");
  expect_error(R"({"model_type":"x","hidden_size":"big"})", "'hidden_size' must be an integer");
  expect_error(std::string(kBase) + R"(,"num_key_value_heads":3})", "not a multiple");
  expect_error(std::string(kBase) + R"(,"hidden_size":-4})", "positive");
  expect_error(std::string(kBase) + R"(,"quantization":{"bits":7,"group_size":64}})", "unsupported bits");
  expect_error(std::string(kBase) + R"(,"quantization":{"bits":4,"group_size":48}})", "group_size");
  expect_error(std::string(kBase) + R"(,"rope_parameters":{"rope_type":"weird"}})", "rope_type");
  expect_error(std::string(kBase) + R"(,"quantization_config":{"quant_method":"gptq"}})", "quant_method");
}

}  // namespace
}  // namespace moeflux
