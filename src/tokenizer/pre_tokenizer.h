// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or string, every split
// behaviour, invert), ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence.
// They cut a normalised segment into pieces that the model encodes independently.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace moeflux {

struct Piece {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the input (Metaspace prepend_scheme "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their sub-pieces; empty pieces are dropped.
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where);

}  // namespace moeflux
