// Post-processor implementations (single-sequence templates only).
#include "tokenizer/post_processor.h"

#include "core/error.h"

namespace moeflux {

namespace {

class Template : public PostProcessor {
 public:
  // One entry per template item: the ids of a special token, or empty for the sequence.
  std::vector<std::vector<int32_t>> items;
  std::vector<bool> is_sequence;
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (is_sequence[k]) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), items[k].begin(), items[k].end());
    }
    return out;
  }
};

class Identity : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

class SequencePost : public PostProcessor {
 public:
  std::vector<std::unique_ptr<PostProcessor>> items;
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : items) ids = p->process(std::move(ids));
    return ids;
  }
};

int32_t token_id(const Json& pair, const std::string& where) {
  if (!pair.is_array() || pair.size() != 2) fail(where, ": expected [token, id]");
  const int64_t id = json_int(pair[1], where + "[1]");
  if (id < 0 || id > INT32_MAX) fail(where, "[1]: id out of range");
  return static_cast<int32_t>(id);
}

std::unique_ptr<PostProcessor> make_template(const Json& j, const std::string& where) {
  auto t = std::make_unique<Template>();
  const Json& single = json_field(j, "single", where);
  if (!single.is_array()) fail(where, ".single: expected an array");
  const Json& specials = json_field(j, "special_tokens", where);
  for (size_t k = 0; k < single.size(); ++k) {
    const std::string at = cat(where, ".single[", k, "]");
    if (const Json* seq = json_opt(single[k], "Sequence")) {
      (void)seq;
      t->items.emplace_back();
      t->is_sequence.push_back(true);
    } else if (const Json* sp = json_opt(single[k], "SpecialToken")) {
      const std::string name = json_string(json_field(*sp, "id", at), at + ".SpecialToken.id");
      const std::string sat = where + ".special_tokens[\"" + name + "\"]";
      const Json& entry = json_field(specials, name.c_str(), where + ".special_tokens");
      const Json& ids = json_field(entry, "ids", sat);
      if (!ids.is_array()) fail(sat, ".ids: expected an array");
      std::vector<int32_t> v;
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t id = json_int(ids[i], cat(sat, ".ids[", i, "]"));
        if (id < 0 || id > INT32_MAX) fail(sat, ".ids[", i, "]: out of range");
        v.push_back(static_cast<int32_t>(id));
      }
      t->items.push_back(std::move(v));
      t->is_sequence.push_back(false);
    } else {
      fail(at, ": expected Sequence or SpecialToken");
    }
  }
  return t;
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_string(json_field(j, "type", where), where + ".type");
  if (type == "TemplateProcessing") return make_template(j, where);
  if (type == "ByteLevel") return std::make_unique<Identity>();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto t = std::make_unique<Template>();
    t->items = {{token_id(json_field(j, "cls", where), where + ".cls")}, {},
                {token_id(json_field(j, "sep", where), where + ".sep")}};
    t->is_sequence = {false, true, false};
    return t;
  }
  if (type == "Sequence") {
    const Json& list = json_field(j, "processors", where);
    if (!list.is_array()) fail(where, ".processors: expected an array");
    auto seq = std::make_unique<SequencePost>();
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_post_processor(list[i], cat(where, ".processors[", i, "]"));
      if (p) seq->items.push_back(std::move(p));
    }
    return seq;
  }
  fail(where, ": unsupported post-processor type '", type, "'");
}

}  // namespace moeflux
