// Faults while a model streams experts: an expert file that becomes unreadable or truncated
// mid-run fails that forward pass with a message naming the layer and expert; once the file is
// back the same session continues exactly as an undisturbed one. A corrupted record is caught
// before use (by default), at load for a resident copy, as it is read for the expert cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "format/pack_store.h"
#include "stream/expert_cache.h"
#include "stream_test_util.h"

namespace moeflux {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Copy of a fixture pack that a test may damage.
std::string private_pack(const test::TempDir& dir, const std::string& fixture) {
  const std::string dst = dir.file("pack");
  std::filesystem::copy(test::fixture_pack(fixture), dst, std::filesystem::copy_options::recursive);
  return dst;
}

std::vector<int32_t> golden_ids(const std::string& fixture) {
  return test::load_golden(test::fixture_dir(fixture) + "/golden.safetensors").i32.at("input_ids");
}

// The logits an undisturbed session gives for ids after `prefix`.
std::vector<float> clean_logits(const std::string& pack, const std::vector<int32_t>& prefix,
                                const std::vector<int32_t>& ids) {
  auto m = load_model(pack);
  Session s(*m);
  s.forward(prefix);
  return s.forward(ids);
}

std::string error_of(Session& s, const std::vector<int32_t>& ids) {
  try {
    s.forward(ids);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(StreamFaults, TruncatedExpertFileFailsThenRecovers) {
  for (IoMode io : {IoMode::Buffered, IoMode::Direct}) {
    SCOPED_TRACE(std::string(io_mode_name(io)));
    test::TempDir dir(test::scratch_dir());
    const std::string pack = private_pack(dir, "qwen3_moe/q4");
    const auto ids = golden_ids("qwen3_moe/q4");
    const std::vector<int32_t> first(ids.begin(), ids.begin() + 6), second(ids.begin() + 6, ids.end());
    StreamOptions o;
    o.budget = "1";  // every expert is read from the file each time
    o.cache.io = io;
    auto m = load_model(pack, o, test::cpu_backend(Repack::Off));  // file order, as the mapped reference
    Session s(*m);
    s.forward(first);
    const PackManifest& man = dynamic_cast<const PackStore&>(*m->store).manifest();
    const std::string file = pack + "/" + man.experts[0].file;
    const std::string saved = slurp(file);
    std::filesystem::resize_file(file, man.experts[0].records[1].offset + 100);
    const std::string err = error_of(s, second);
    EXPECT_NE(err.find("layer " + std::to_string(man.experts[0].layer) + " expert "), std::string::npos) << err;
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
    EXPECT_EQ(s.pos(), int64_t(first.size()));  // the failed pass left the tokens as they were
    std::ofstream(file, std::ios::binary | std::ios::trunc) << saved;
    std::vector<float> got;
    ASSERT_NO_THROW(got = s.forward(second));
    EXPECT_EQ(test::first_difference(got, clean_logits(pack, first, second)), -1);
  }
}

TEST(StreamFaults, InjectedReadErrorNamesLayerAndExpert) {
  test::TempDir dir(test::scratch_dir());
  const std::string pack = private_pack(dir, "deepseek_v3/fp8");
  const auto ids = golden_ids("deepseek_v3/fp8");
  const std::vector<int32_t> first(ids.begin(), ids.begin() + 5), second(ids.begin() + 5, ids.end());
  StreamOptions o;
  o.budget = "1";
  auto m = load_model(pack, o);
  const PackManifest& man = dynamic_cast<const PackStore&>(*m->store).manifest();
  Session s(*m);
  s.forward(first);
  const int64_t layer = man.experts.back().layer;
  expert_cache(*m)->set_fault_hook([&](int l, int) {
    if (l == int(man.experts.size()) - 1) throw std::runtime_error("injected EIO");
  });
  const std::string err = error_of(s, second);
  EXPECT_NE(err.find("layer " + std::to_string(layer) + " expert "), std::string::npos) << err;
  EXPECT_NE(err.find("injected EIO"), std::string::npos) << err;
  expert_cache(*m)->set_fault_hook(nullptr);
  std::vector<float> got;
  ASSERT_NO_THROW(got = s.forward(second));
  EXPECT_EQ(test::first_difference(got, clean_logits(pack, first, second)), -1);
}

// Flips two bytes of every record of the pack's first MoE layer, so whatever the routing, a
// damaged record is needed; returns that layer's number.
int64_t damage_first_layer(const std::string& pack) {
  const PackManifest man = PackStore::open(pack)->manifest();
  std::fstream f(pack + "/" + man.experts[0].file, std::ios::binary | std::ios::in | std::ios::out);
  for (const auto& r : man.experts[0].records) {
    f.seekp(std::streamoff(r.offset + 64));
    f.put('\x5a');
    f.put('\xa5');
  }
  return man.experts[0].layer;
}

// Records are checked by default: a resident copy at load, the expert cache as it reads.
TEST(StreamFaults, VerifyCatchesACorruptedRecordBeforeUse) {
  test::TempDir dir(test::scratch_dir());
  const std::string pack = private_pack(dir, "mixtral/q4");
  const auto ids = golden_ids("mixtral/q4");
  const std::string where = "layer " + std::to_string(damage_first_layer(pack)) + " expert ";
  StreamOptions o;
  ASSERT_TRUE(o.cache.verify);
  ASSERT_EQ(pack_map_mode(pack, o), MapMode::Resident);
  try {
    load_model(pack, o);
    ADD_FAILURE() << "a damaged resident pack loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert record damaged: " + where + "0: checksum mismatch"),
              std::string::npos)
        << e.what();
  }
  o.budget = "30%";
  auto m = load_model(pack, o);
  ASSERT_TRUE(expert_cache(*m));
  Session s(*m);
  const std::string err = error_of(s, ids);
  EXPECT_NE(err.find("checksum mismatch (crc32c "), std::string::npos) << err;
  EXPECT_NE(err.find(where), std::string::npos) << err;
  o.cache.verify = false;  // opted out, the damaged weights are used silently
  for (const std::string budget : {"auto", "30%"}) {
    o.budget = budget;
    auto unchecked = load_model(pack, o);
    Session s2(*unchecked);
    EXPECT_NO_THROW(s2.forward(ids)) << budget;
  }
}

// A record that fails its check is not kept: once the file is repaired the same session goes
// on exactly as an undisturbed one.
TEST(StreamFaults, ACorruptedRecordDoesNotPoisonTheCache) {
  test::TempDir dir(test::scratch_dir());
  const std::string pack = private_pack(dir, "qwen3_moe/q4");
  const auto ids = golden_ids("qwen3_moe/q4");
  const std::vector<int32_t> first(ids.begin(), ids.begin() + 6), second(ids.begin() + 6, ids.end());
  StreamOptions o;
  o.budget = "1";  // every record is read for every pass
  auto m = load_model(pack, o, test::cpu_backend(Repack::Off));
  Session s(*m);
  s.forward(first);
  const PackManifest& man = dynamic_cast<const PackStore&>(*m->store).manifest();
  const std::string file = pack + "/" + man.experts[0].file;
  const std::string saved = slurp(file);
  const std::string where = "layer " + std::to_string(damage_first_layer(pack)) + " expert ";
  expert_cache(*m)->reset_stats();
  const std::string err = error_of(s, second);
  EXPECT_NE(err.find(where), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_GT(expert_cache(*m)->stats().failures, 0u);
  EXPECT_EQ(s.pos(), int64_t(first.size()));
  std::ofstream(file, std::ios::binary | std::ios::trunc) << saved;
  std::vector<float> got;
  ASSERT_NO_THROW(got = s.forward(second));
  EXPECT_EQ(test::first_difference(got, clean_logits(pack, first, second)), -1);
}

}  // namespace
}  // namespace moeflux
