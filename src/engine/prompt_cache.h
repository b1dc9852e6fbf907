// The prompt cache of `moeflux run --prompt-cache FILE`: a sequence's state (its tokens, each
// layer's state buffers, its checkpoints) in a safetensors file whose metadata names the format
// and the model the state belongs to. Tensors: "tokens" (I32), "state.L.I" (F32, buffer I of
// layer L), "checkpoint.C.L.I" (F32, fixed-size buffer I of layer L at checkpoint C, whose
// position is the C-th of the metadata's "checkpoints", comma-separated).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/engine.h"

namespace moeflux {

// What a state must match to be reused: the architecture, the shapes and a CRC of the
// embedding's first 64 KiB and of the final norm (a state of another model of the same shapes
// is not mistaken for this one's).
std::string model_identity(const Model& m);

struct PromptCacheFile {
  Sequence::Snapshot snapshot;
  std::string identity;  // model_identity of the model that made it
};

// Writes atomically (a temporary file renamed over `path`).
void save_prompt_cache(const std::string& path, const Sequence::Snapshot& s, const std::string& identity);
// Error naming `path` for a file that is not a moeflux prompt cache or is malformed.
PromptCacheFile load_prompt_cache(const std::string& path);
// The same over a file's bytes (fuzz/fuzz_prompt_cache.cpp); `what` names it in errors.
PromptCacheFile parse_prompt_cache(const uint8_t* bytes, size_t size, const std::string& what);

}  // namespace moeflux
