// Parsing helpers for command-line values (errors name the option).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflux::cli {

// "1,2,3" -> {1, 2, 3}; Error on empty items, non-integers or values outside int32.
std::vector<int32_t> parse_id_list(const std::string& s, const std::string& option);

}  // namespace moeflux::cli
