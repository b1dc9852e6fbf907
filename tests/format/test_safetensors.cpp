// safetensors header validation (every rule has a failing case), write/read round trip, and
// sharded checkpoints through model.safetensors.index.json.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "format/safetensors.h"
#include "format/tensor_store.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

std::vector<uint8_t> file_bytes(const std::string& header, size_t data_size) {
  std::vector<uint8_t> b(8 + header.size() + data_size, 0);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
  std::copy(header.begin(), header.end(), b.begin() + 8);
  return b;
}

SafetensorsHeader parse(const std::string& header, size_t data_size) {
  auto b = file_bytes(header, data_size);
  return parse_safetensors_header(b.data(), b.size(), b.size(), "t.safetensors");
}

void expect_error(const std::string& header, size_t data_size, const std::string& needle) {
  try {
    parse(header, data_size);
    ADD_FAILURE() << "no error for " << header;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Safetensors, ParsesValidHeader) {
  auto h = parse(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                 R"("b":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})", 16);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  for (const auto& t : h.tensors) {
    if (t.name == "a") { EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3})); }
    if (t.name == "b") { EXPECT_EQ(t.offset, 12u); }
  }
}

TEST(Safetensors, RejectsMalformedHeaders) {
  expect_error("{not json", 0, "not valid JSON");
  expect_error("[1,2]", 0, "not a JSON object");
  expect_error(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1, "unsupported dtype");
  expect_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "past the data section");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8, "expected 8");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 8, "begin 4 > end 0");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 8, "data_offsets");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "overlap");
  expect_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4, "too large");
  expect_error(R"({"a":5})", 0, "not an object");
}

TEST(Safetensors, RejectsLyingLengthField) {
  auto b = file_bytes("{}", 0);
  b[0] = 200;  // header length 200 in a 10-byte file
  EXPECT_THROW(parse_safetensors_header(b.data(), b.size(), b.size(), "x"), Error);
  std::vector<uint8_t> tiny{1, 2, 3};
  EXPECT_THROW(parse_safetensors_header(tiny.data(), tiny.size(), tiny.size(), "x"), Error);
}

TEST(Safetensors, WriteReadRoundTrip) {
  test::TempDir tmp;
  std::vector<float> f{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::vector<int32_t> i{7, -9, 11};
  write_safetensors(tmp.file("x.safetensors"), {out_f32("f", {2, 3}, f), out_i32("i", {3}, i)});
  auto g = test::load_golden(tmp.file("x.safetensors"));
  EXPECT_EQ(g.f32.at("f"), f);
  EXPECT_EQ(g.i32.at("i"), i);
  EXPECT_EQ(g.shape.at("f"), (std::vector<int64_t>{2, 3}));
}

TEST(TensorStore, ShardedIndex) {
  test::TempDir tmp;
  write_safetensors(tmp.file("model-00001-of-00002.safetensors"), {out_f32("a", {2}, {1, 2})});
  write_safetensors(tmp.file("model-00002-of-00002.safetensors"), {out_f32("b", {1}, {3})});
  {
    std::ofstream(tmp.file("model.safetensors.index.json"))
        << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  }
  auto s = TensorStore::open_dir(tmp.path());
  EXPECT_EQ(s->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s->get("b").shape, (std::vector<int64_t>{1}));
  EXPECT_THROW(s->get("c"), Error);
}

TEST(TensorStore, RejectsBadIndex) {
  test::TempDir tmp;
  write_safetensors(tmp.file("m1.safetensors"), {out_f32("a", {2}, {1, 2})});
  auto check = [&](const std::string& index, const std::string& needle) {
    { std::ofstream(tmp.file("model.safetensors.index.json")) << index; }
    try {
      TensorStore::open_dir(tmp.path());
      ADD_FAILURE() << "no error for " << index;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  check("{", "not valid JSON");
  check(R"({"weight_map":{"a":"../m1.safetensors"}})", "invalid file");
  check(R"({"weight_map":{"a":"missing.safetensors"}})", "cannot open");
  check(R"({"weight_map":{"zz":"m1.safetensors"}})", "listed but not in");
  EXPECT_THROW(TensorStore::open_dir(tmp.file("nope")), Error);
}

}  // namespace
}  // namespace moeflux
