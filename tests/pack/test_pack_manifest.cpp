// Manifest parser unit tests: a valid manifest round-trips through pack_manifest_to_json, and
// malformed fields are rejected with messages naming them.
#include <gtest/gtest.h>

#include "core/error.h"
#include "format/pack_manifest.h"
#include "format/pack_store.h"

namespace moeflux {
namespace {

PackManifest sample() {
  PackManifest m;
  m.architecture = "mixtral";
  m.config = {{"model_type", "mixtral"}, {"hidden_size", 128}, {"num_hidden_layers", 1},
              {"num_attention_heads", 4}, {"vocab_size", 4}};
  m.source_layout = "hf";
  m.dense_size = 64 + 512;
  m.dense.push_back(PackTensor{"model.norm.weight", DType::BF16, {128}, 0, 256, 0x1234, {}});
  m.dense.push_back(PackTensor{"lm_head.weight", DType::U32, {4, 32}, 64, 512, 7,
                               PackQuant{PackQuant::Format::Affine, 4, 64, 0, 0, DType::BF16}});
  m.dense[0].nbytes = 256;
  m.dense_size = 64 + 512;
  m.dense[1].offset = 256;
  m.dense_size = 256 + 512;
  ExpertLayer l;
  l.layer = 0;
  l.prefix = "model.layers.0.block_sparse_moe";
  l.file = "experts/layer_000.bin";
  l.size = 8192;
  l.layouts.push_back({PackTensor{"w1.weight", DType::BF16, {8, 16}, 0, 256, 0, {}}});
  l.records = {PackRecord{0, 4096, 16, 99, 0}, PackRecord{4096, 4096, 16, 98, 0}};
  m.experts.push_back(l);
  return m;
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_pack_manifest(text, "m.json");
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string with(const std::string& from, const std::string& to) {
  std::string s = pack_manifest_to_json(sample());
  const size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

TEST(PackManifest, RoundTrips) {
  const PackManifest a = sample();
  const PackManifest b = parse_pack_manifest(pack_manifest_to_json(a), "m.json");
  EXPECT_EQ(b.dense, a.dense);
  ASSERT_EQ(b.experts.size(), 1u);
  EXPECT_EQ(b.experts[0].layouts, a.experts[0].layouts);
  EXPECT_EQ(b.experts[0].records[1].crc32, 98u);
  EXPECT_EQ(b.config, a.config);
  EXPECT_EQ(b.version, 2);
  EXPECT_EQ(b.checksum, PackChecksum::Crc32c);
  PackManifest old = sample();  // version 1: zlib's CRC-32
  old.version = 1;
  old.checksum = PackChecksum::Crc32;
  const PackManifest c = parse_pack_manifest(pack_manifest_to_json(old), "m.json");
  EXPECT_EQ(c.version, 1);
  EXPECT_EQ(c.checksum, PackChecksum::Crc32);
}

TEST(PackManifest, RuntimeConfigCarriesQuantisation) {
  const ModelConfig c = pack_model_config(sample(), "m.json");
  EXPECT_EQ(c.quant.kind, QuantConfig::Kind::Affine);
  EXPECT_EQ(c.quant.for_module("lm_head").bits, 4);
  EXPECT_EQ(c.raw.at("moeflux_source_layout"), "hf");
}

TEST(PackManifest, RejectsBadFields) {
  expect_error(with("\"nbytes\": 512", "\"nbytes\": 500"), "nbytes 500 does not match");
  expect_error(with("\"dtype\": \"U32\"", "\"dtype\": \"U7\""), "unknown dtype 'U7'");
  expect_error(with("\"size\": 8192", "\"size\": 4096"), "runs past the end of experts/layer_000.bin");
  expect_error(with("\"file\": \"experts/layer_000.bin\"", "\"file\": \"../x.bin\""), "invalid file name '../x.bin'");
  expect_error(with("\"bits\": 4", "\"bits\": 7"), "unsupported bits 7");
  expect_error(with("\"model_type\": \"mixtral\"", "\"model_type\": \"qwen3_moe\""), "does not match architecture");
  expect_error(with("\"offset\": 256", "\"offset\": 128"), "overlap");
  expect_error(with("\"checksum\": \"crc32c\"", "\"checksum\": \"md5\""), "unsupported checksum 'md5'");
  expect_error(with("\"checksum\": \"crc32c\"", "\"checksum\": \"crc32\""), "version 2 packs use crc32c");
  expect_error(with("\"version\": 2", "\"version\": 0"), "unsupported pack version 0");
  expect_error("[]", "not a JSON object");
}

}  // namespace
}  // namespace moeflux
