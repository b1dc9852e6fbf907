// The files a pack carries beside its weights so that it runs on its own: the tokenizer,
// its configuration and chat template(s), generation_config.json (eos ids, sampling
// defaults). Copied byte for byte from the source checkpoint; absent ones are skipped.
#pragma once
#include <string>
#include <vector>

namespace moeflux {

// File names a pack may hold besides manifest.json, dense.bin and experts/.
const std::vector<std::string>& pack_side_files();

// Copies every side file `src_dir` has into `dst_dir`; returns the names copied.
std::vector<std::string> copy_side_files(const std::string& src_dir, const std::string& dst_dir);

// Whether `dir` holds a tokenizer (tokenizer.json or tokenizer.json.gz).
bool has_tokenizer(const std::string& dir);

}  // namespace moeflux
