// GPT-2's reversible byte <-> character map used by ByteLevel pre-tokenizers and decoders:
// printable bytes map to themselves, the other 68 to U+0100.. in byte order.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace moeflux {

struct ByteLevelMap {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its stand-in character
  std::array<int16_t, 0x200> char_to_byte;    // stand-in code point -> byte, -1 if none

  static const ByteLevelMap& get();
  std::string encode(std::string_view bytes) const;
  // Appends the bytes of `token` if all its characters are stand-ins; returns false otherwise.
  bool decode_append(std::string_view token, std::string& out) const;
};

}  // namespace moeflux
