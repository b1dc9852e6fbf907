// The fuzz targets' seed corpora replayed in every build (no clang or libFuzzer needed): each
// seed, regress_* inputs of past findings included, must go through its target's entry point
// (moeflux::Error is caught there; a crash, another exception or a non-zero return fails).
// Also keeps fuzz/ consistent: every fuzz/fuzz_*.cpp is replayed here, registered in
// fuzz/CMakeLists.txt and documented in fuzz/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <set>
#include <string>
#include <vector>

// The targets' LLVMFuzzerTestOneInput, renamed per source by tests/CMakeLists.txt.
#define MOEFLUX_FUZZ_ENTRY(name) extern "C" int name(const uint8_t* data, size_t size);
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_safetensors)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_config)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_template)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_tokenizer_json)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_pack_manifest)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_routing_profile)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_api_request)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_prompt_cache)
MOEFLUX_FUZZ_ENTRY(moeflux_fuzz_tool_calls)

namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  int (*entry)(const uint8_t*, size_t);
  const char* corpus;  // under fuzz/
};

const Target kTargets[] = {
    {"fuzz_safetensors", moeflux_fuzz_safetensors, "corpus/safetensors"},
    {"fuzz_config", moeflux_fuzz_config, "corpus/config"},
    {"fuzz_template", moeflux_fuzz_template, "corpus_template"},
    {"fuzz_tokenizer_json", moeflux_fuzz_tokenizer_json, "corpus_tokenizer"},
    {"fuzz_pack_manifest", moeflux_fuzz_pack_manifest, "corpus_pack_manifest"},
    {"fuzz_routing_profile", moeflux_fuzz_routing_profile, "corpus_routing_profile"},
    {"fuzz_api_request", moeflux_fuzz_api_request, "corpus_api_request"},
    {"fuzz_prompt_cache", moeflux_fuzz_prompt_cache, "corpus_prompt_cache"},
    {"fuzz_tool_calls", moeflux_fuzz_tool_calls, "corpus_tool_calls"},
};

void PrintTo(const Target& t, std::ostream* os) { *os << t.name; }

const fs::path kFuzzDir = fs::path(MOEFLUX_SOURCE_DIR) / "fuzz";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f) << "cannot read " << p;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class FuzzSeeds : public testing::TestWithParam<Target> {};

TEST_P(FuzzSeeds, EverySeedPasses) {
  const Target& t = GetParam();
  const fs::path dir = kFuzzDir / t.corpus;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string bytes = read_file(e.path());
    EXPECT_EQ(t.entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0) << e.path();
    ++n;
  }
  EXPECT_GT(n, 0) << "no seeds in " << dir;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzSeeds, testing::ValuesIn(kTargets),
                         [](const testing::TestParamInfo<Target>& i) { return std::string(i.param.name); });

std::set<std::string> fuzz_sources() {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(kFuzzDir)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("fuzz_", 0) == 0 && e.path().extension() == ".cpp") names.insert(e.path().stem().string());
  }
  return names;
}

TEST(FuzzTargets, EverySourceIsReplayedRegisteredAndDocumented) {
  const std::set<std::string> sources = fuzz_sources();
  ASSERT_FALSE(sources.empty());
  std::set<std::string> replayed;
  for (const Target& t : kTargets) replayed.insert(t.name);
  EXPECT_EQ(sources, replayed) << "fuzz/fuzz_*.cpp and this test's target table differ";
  const std::string cmake = read_file(kFuzzDir / "CMakeLists.txt");
  const std::string readme = read_file(kFuzzDir / "README.md");
  for (const Target& t : kTargets) {
    const std::string name = t.name;
    EXPECT_NE(cmake.find("moeflux_add_fuzzer(" + name + " " + name + ".cpp " + t.corpus), std::string::npos)
        << "fuzz/CMakeLists.txt does not build " << name << " over its seeds in fuzz/" << t.corpus;
    EXPECT_NE(readme.find("`" + name + "`"), std::string::npos) << "fuzz/README.md does not describe " << name;
  }
}

}  // namespace
