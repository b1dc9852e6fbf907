// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// StripAccents, Prepend, Replace, Sequence. Each maps a valid UTF-8 string to another.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/json_util.h"

namespace moeflux {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string s) const = 0;
};

// nullptr for a null "normalizer"; Error naming `where` for unknown types or bad fields.
std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where);

}  // namespace moeflux
