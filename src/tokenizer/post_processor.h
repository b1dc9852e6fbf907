// Post-processors of tokenizer.json ("post_processor") for add_special_tokens=true on a single
// sequence: TemplateProcessing, RobertaProcessing / BertProcessing (cls + ids + sep), ByteLevel
// (no change to ids) and Sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace moeflux {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where);

}  // namespace moeflux
