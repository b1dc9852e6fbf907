// The byte-level character map: computed from its definition, not tabulated.
#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace moeflux {

const ByteLevelMap& ByteLevelMap::get() {
  static const ByteLevelMap map = [] {
    ByteLevelMap m;
    m.char_to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;
      utf8_append(m.byte_to_utf8[static_cast<size_t>(b)], cp);
      m.char_to_byte[static_cast<size_t>(cp)] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

std::string ByteLevelMap::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

bool ByteLevelMap::decode_append(std::string_view token, std::string& out) const {
  const size_t mark = out.size();
  for (size_t i = 0; i < token.size();) {
    const size_t l = utf8_valid_len(token, i);
    int32_t cp = -1;
    if (l) cp = utf8_next(token, i);
    if (cp < 0 || cp >= static_cast<int32_t>(char_to_byte.size()) || char_to_byte[static_cast<size_t>(cp)] < 0) {
      out.resize(mark);
      return false;
    }
    out += static_cast<char>(char_to_byte[static_cast<size_t>(cp)]);
  }
  return true;
}

}  // namespace moeflux
