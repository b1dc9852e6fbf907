// What a model path is, decided from the file system and the first bytes of a file.
#include "cli/model_path.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace moeflux::cli {

namespace fs = std::filesystem;

namespace {
std::string dir_of(const std::string& file) {
  const fs::path p = fs::path(file).parent_path();
  return p.empty() ? "." : p.string();
}

[[noreturn]] void fail_file(const std::string& path) {
  char magic[4] = {};
  std::ifstream f(path, std::ios::binary);
  f.read(magic, sizeof magic);
  if (f && std::string(magic, 4) == "GGUF")
    fail(path, ": is a GGUF file; moeflux does not read GGUF. Pass a Hugging Face checkpoint directory "
         "(config.json + *.safetensors) or a pack made from one by `moeflux convert`");
  if (fs::path(path).extension() == ".safetensors")
    fail(path, ": is a .safetensors file; pass the checkpoint directory that holds it (with config.json), "
         "then convert it: moeflux convert ", dir_of(path), " PACK_DIR");
  fail(path, ": is a file; expected a model directory (a pack or a Hugging Face checkpoint)");
}
}  // namespace

ModelPathKind check_model_path(const std::string& path, bool allow_checkpoint) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail(path, ": no such directory");
  if (!fs::is_directory(st)) fail_file(path);
  const fs::path dir(path);
  if (fs::exists(dir / "manifest.json", ec)) return ModelPathKind::Pack;
  const bool checkpoint = fs::exists(dir / "config.json", ec);
  if (checkpoint && allow_checkpoint) return ModelPathKind::Checkpoint;
  if (checkpoint)
    fail(path, ": is a checkpoint directory (config.json), not a pack; convert it first: moeflux convert ", path,
         " PACK_DIR");
  if (fs::exists(dir / "dense.bin", ec) || fs::exists(dir / "experts", ec))
    fail(path, ": manifest.json is missing: this pack is incomplete (convert the checkpoint again)");
  fail(path, ": neither a pack (no manifest.json) nor a checkpoint (no config.json)");
}

}  // namespace moeflux::cli
