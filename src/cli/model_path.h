// Checks of a model path before anything is loaded, with messages for the usual mistakes:
// a file where a directory is expected (GGUF, a .safetensors file, anything else), a
// checkpoint given where a pack is needed, a pack that lost its manifest.json.
#pragma once
#include <string>

namespace moeflux::cli {

enum class ModelPathKind { Pack, Checkpoint };

// Error unless `path` is a pack directory (manifest.json) or, with allow_checkpoint, a
// Hugging Face checkpoint directory (config.json). Returns which it is.
ModelPathKind check_model_path(const std::string& path, bool allow_checkpoint = true);

// For commands that take only a pack (inspect, verify).
inline void check_pack_path(const std::string& path) { check_model_path(path, false); }

}  // namespace moeflux::cli
