// Memory budgets as users write them: "auto", N, N[KMGT] (powers of 1024; "iB" / "B"
// suffixes allowed) or P% of a total (--expert-cache, --gpu-expert-cache).
#pragma once
#include <cstdint>
#include <string>

namespace moeflux {

// The bytes `spec` asks for: a size, P% of `total`, or `auto_bytes` for "auto". Error naming
// `option` and the text when malformed or a share above 100%.
uint64_t parse_byte_budget(const std::string& option, const std::string& spec, uint64_t total, uint64_t auto_bytes);

}  // namespace moeflux
