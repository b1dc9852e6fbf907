// libFuzzer target: routing profile JSON (--pin-profile) parsed, validated against a small
// two-layer pack manifest and ranked. Any outcome but success or moeflux::Error is a bug.
// Seed corpus: fuzz/corpus_routing_profile.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "stream/routing_profile.h"

namespace {
moeflux::PackManifest manifest() {
  moeflux::PackManifest m;
  for (int l = 0; l < 2; ++l) {
    moeflux::ExpertLayer el;
    el.layer = l;
    el.prefix = "model.layers." + std::to_string(l) + ".mlp";
    el.records.resize(4);
    m.experts.push_back(el);
  }
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const moeflux::PackManifest m = manifest();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = moeflux::parse_routing_profile(text, "fuzz");
    (void)moeflux::most_used_experts(p, m);
  } catch (const moeflux::Error&) {
  }
  return 0;
}
