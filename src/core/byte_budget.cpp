// Memory budgets: a number with a unit or a share.
#include "core/byte_budget.h"

#include <cctype>
#include <cstring>
#include <map>

#include "core/error.h"

namespace moeflux {

uint64_t parse_byte_budget(const std::string& option, const std::string& spec, uint64_t total, uint64_t auto_bytes) {
  auto bad = [&]() -> uint64_t {
    fail(option, " '", spec, "': expected auto, a size (8G, 512M, 1234) or a share (30%)");
  };
  if (spec == "auto") return auto_bytes;
  size_t i = 0;
  double v = 0;
  bool digits = false, dot = false;
  double frac = 0.1;
  for (; i < spec.size() && (std::isdigit(uint8_t(spec[i])) || spec[i] == '.'); ++i) {
    if (spec[i] == '.') {
      if (dot) return bad();
      dot = true;
    } else if (dot) {
      v += (spec[i] - '0') * frac, frac /= 10, digits = true;
    } else {
      v = v * 10 + (spec[i] - '0'), digits = true;
    }
    if (v > 1e18) return bad();
  }
  if (!digits) return bad();
  std::string unit = spec.substr(i);
  if (unit == "%") {
    if (v > 100) fail(option, " '", spec, "': a share above 100%");
    return uint64_t(double(total) * v / 100.0);
  }
  for (const char* suffix : {"iB", "B"})
    if (unit.size() > std::strlen(suffix) && unit.ends_with(suffix)) unit.resize(unit.size() - std::strlen(suffix));
  static const std::map<std::string, double> kUnits = {
      {"", 1}, {"K", 1024.0}, {"M", 1024.0 * 1024}, {"G", 1024.0 * 1024 * 1024}, {"T", 1024.0 * 1024 * 1024 * 1024}};
  std::string up;
  for (char c : unit) up += char(std::toupper(uint8_t(c)));
  auto it = kUnits.find(up);
  if (it == kUnits.end()) return bad();
  return uint64_t(v * it->second);
}

}  // namespace moeflux
