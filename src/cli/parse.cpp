// Command-line value parsing.
#include "cli/parse.h"

#include <charconv>

#include "core/error.h"

namespace moeflux::cli {

std::vector<int32_t> parse_id_list(const std::string& s, const std::string& option) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size())
      fail(option, ": '", item, "' is not an integer token id (expected e.g. 1,2,3)");
    if (v < INT32_MIN || v > INT32_MAX) fail(option, ": token id ", v, " is out of range");
    out.push_back(int32_t(v));
    i = j + 1;
  }
  return out;
}

}  // namespace moeflux::cli
