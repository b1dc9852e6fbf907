// Helpers for the expert streaming tests: fixture packs converted once per process, model
// runs that record every logit and a greedy continuation, exact comparison.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "stream/streaming.h"
#include "util/test_util.h"

namespace moeflux::test {

// A fixture's path as one name ("qwen3_moe/q4" -> "qwen3_moe_q4"): test and directory names.
inline std::string fixture_name(std::string fixture) {
  for (auto& c : fixture)
    if (c == '/') c = '_';
  return fixture;
}

// A CPU backend that lays out 4-bit weights as `repack` says (Off: file order).
inline std::shared_ptr<Backend> cpu_backend(Repack repack, bool fast_prefill = false) {
  CpuOptions o;
  o.repack = repack;
  o.fast_prefill = fast_prefill;
  return std::make_shared<CpuBackend>(o);
}

// A pack of the fixture in a scratch directory on disk (so O_DIRECT works), made once.
inline const std::string& fixture_pack(const std::string& fixture) {
  static TempDir dir(scratch_dir());
  static std::map<std::string, std::string> made;
  auto it = made.find(fixture);
  if (it != made.end()) return it->second;
  const std::string dst = dir.file(fixture_name(fixture));
  std::string out;
  const std::string cmd = moeflux_exe() + " convert --quiet " + fixture_dir(fixture) + " " + dst;
  if (run_command(cmd, &out) != 0) ADD_FAILURE() << cmd << "\n" << out;
  return made.emplace(fixture, dst).first->second;
}

struct RunResult {
  std::vector<float> logits;  // prefill of the first half, then one token at a time
  std::vector<int32_t> greedy;
};

inline RunResult run_ids(Session& s, const std::vector<int32_t>& ids, int n_greedy) {
  RunResult r;
  const size_t half = ids.size() / 2;
  auto l = s.forward(std::span<const int32_t>(ids.data(), half));
  r.logits = l;
  for (size_t i = half; i < ids.size(); ++i) {
    l = s.forward(std::span<const int32_t>(&ids[i], 1));
    r.logits.insert(r.logits.end(), l.begin(), l.end());
  }
  const size_t V = size_t(s.model().cfg.vocab_size);
  r.greedy = greedy_continue(s, std::span<const float>(l).subspan(l.size() - V), n_greedy);
  return r;
}

}  // namespace moeflux::test
