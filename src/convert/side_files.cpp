// Side files of a pack (see side_files.h).
#include "convert/side_files.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace moeflux {

namespace fs = std::filesystem;

const std::vector<std::string>& pack_side_files() {
  static const std::vector<std::string> names = {
      "tokenizer.json",        "tokenizer.json.gz",  "tokenizer_config.json", "special_tokens_map.json",
      "generation_config.json", "chat_template.jinja", "chat_template.json",
  };
  return names;
}

std::vector<std::string> copy_side_files(const std::string& src_dir, const std::string& dst_dir) {
  std::vector<std::string> copied;
  for (const auto& name : pack_side_files()) {
    const fs::path from = fs::path(src_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(from, ec)) continue;
    fs::copy_file(from, fs::path(dst_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) fail(from.string(), ": cannot copy into the pack: ", ec.message());
    copied.push_back(name);
  }
  return copied;
}

bool has_tokenizer(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec) ||
         fs::is_regular_file(fs::path(dir) / "tokenizer.json.gz", ec);
}

}  // namespace moeflux
