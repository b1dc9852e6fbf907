// libFuzzer target: pack manifest parsing and validation, then the runtime config derived from
// it. Any outcome but success or moeflux::Error (a crash, another exception, a sanitizer
// report, a hang) is a bug. Seed corpus: fuzz/corpus_pack_manifest (manifests of small packs).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "format/pack_manifest.h"
#include "format/pack_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const moeflux::PackManifest m = moeflux::parse_pack_manifest(text, "fuzz");
    (void)moeflux::pack_model_config(m, "fuzz");
    (void)moeflux::pack_manifest_to_json(m);
  } catch (const moeflux::Error&) {
  }
  return 0;
}
