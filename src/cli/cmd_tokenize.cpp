// `moeflux tokenize`: encode text with a Hugging Face tokenizer.json (ids, comma-separated),
// encode a JSON array of strings into a JSON array of id arrays (--texts-json), or decode a
// comma-separated id list back to text (--decode). add_special_tokens is off unless --special.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/error.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"

namespace moeflux::cli {

namespace {
struct TokenizeArgs {
  std::string tokenizer, text, texts_json, out;
  bool decode = false, special = false, skip_special = false;
};

void write_output(const std::string& path, const std::string& s) {
  if (path.empty()) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream f(path, std::ios::binary);
  f << s;
  if (!f) fail(path, ": cannot write");
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t k = 0; k < ids.size(); ++k) s += (k ? "," : "") + std::to_string(ids[k]);
  return s;
}
}  // namespace

Runner register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* sub = app.add_subcommand("tokenize", "Encode text to token ids (or decode ids) with a tokenizer.json");
  sub->add_option("--tokenizer", a->tokenizer, "tokenizer.json[.gz] or a directory holding it")->required();
  auto* text = sub->add_option("--text", a->text, "Text to encode (with --decode: comma-separated ids)");
  auto* texts = sub->add_option("--texts-json", a->texts_json, "JSON file with an array of strings to encode");
  text->excludes(texts);
  sub->add_flag("--decode", a->decode, "Decode the ids given in --text");
  sub->add_flag("--special", a->special, "add_special_tokens=True (post-processor template)");
  sub->add_flag("--skip-special", a->skip_special, "With --decode: skip special tokens");
  sub->add_option("--out", a->out, "Write the result here instead of stdout");
  return [a, text, texts]() {
    if (text->count() == 0 && texts->count() == 0) fail("tokenize: give --text or --texts-json");
    const Tokenizer tok = Tokenizer::load(a->tokenizer);
    if (a->decode) {
      if (text->count() == 0) fail("tokenize --decode: give the ids in --text");
      const auto ids = parse_id_list(a->text, "--text");
      for (int32_t id : ids)
        if (!tok.id_to_token(id)) fail("--text: token id ", id, " is not in the vocabulary");
      write_output(a->out, tok.decode(ids, a->skip_special) + (a->out.empty() ? "\n" : ""));
      return 0;
    }
    if (text->count()) {
      write_output(a->out, join_ids(tok.encode(a->text, a->special)) + "\n");
      return 0;
    }
    nlohmann::json in;
    try {
      in = nlohmann::json::parse(read_maybe_gzip(a->texts_json));
    } catch (const nlohmann::json::exception& e) {
      fail(a->texts_json, ": invalid JSON: ", e.what());
    }
    if (!in.is_array()) fail(a->texts_json, ": expected a JSON array of strings");
    nlohmann::json out = nlohmann::json::array();
    for (size_t k = 0; k < in.size(); ++k) {
      if (!in[k].is_string()) fail(a->texts_json, "[", k, "]: expected a string");
      out.push_back(tok.encode(in[k].get<std::string>(), a->special));
    }
    write_output(a->out, out.dump() + "\n");
    return 0;
  };
}

}  // namespace moeflux::cli
