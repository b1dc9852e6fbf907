// config.json parsing and validation.
#include "format/config.h"

#include <filesystem>

#include "core/error.h"
#include "core/mmap_file.h"

namespace moeflux {

using nlohmann::json;

bool ConfigReader::has(const std::string& k) const {
  auto it = j_.find(k);
  return it != j_.end() && !it->is_null();
}

const json& ConfigReader::at(const std::string& k) const {
  auto it = j_.find(k);
  if (it == j_.end() || it->is_null()) fail(what_, ": missing field '", k, "'");
  return *it;
}

int64_t ConfigReader::get_int(const std::string& k) const {
  const json& v = at(k);
  if (!v.is_number_integer()) fail(what_, ": field '", k, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}
int64_t ConfigReader::get_int(const std::string& k, int64_t def) const { return has(k) ? get_int(k) : def; }
int64_t ConfigReader::get_pos_int(const std::string& k) const {
  int64_t v = get_int(k);
  if (v <= 0 || v > (int64_t(1) << 31)) fail(what_, ": field '", k, "' must be a positive integer, got ", v);
  return v;
}
double ConfigReader::get_float(const std::string& k) const {
  const json& v = at(k);
  if (!v.is_number()) fail(what_, ": field '", k, "' must be a number, got ", v.dump());
  return v.get<double>();
}
double ConfigReader::get_float(const std::string& k, double def) const { return has(k) ? get_float(k) : def; }
bool ConfigReader::get_bool(const std::string& k, bool def) const {
  if (!has(k)) return def;
  const json& v = at(k);
  if (!v.is_boolean()) fail(what_, ": field '", k, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}
std::string ConfigReader::get_string(const std::string& k, const std::string& def) const {
  if (!has(k)) return def;
  const json& v = at(k);
  if (!v.is_string()) fail(what_, ": field '", k, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}
std::vector<int64_t> ConfigReader::get_int_list(const std::string& k) const {
  std::vector<int64_t> out;
  if (!has(k)) return out;
  const json& v = at(k);
  if (!v.is_array()) fail(what_, ": field '", k, "' must be a list of integers");
  for (const auto& e : v) {
    if (!e.is_number_integer()) fail(what_, ": field '", k, "' must be a list of integers");
    out.push_back(e.get<int64_t>());
  }
  return out;
}
std::vector<std::string> ConfigReader::get_string_list(const std::string& k) const {
  std::vector<std::string> out;
  if (!has(k)) return out;
  const json& v = at(k);
  if (!v.is_array()) fail(what_, ": field '", k, "' must be a list of strings");
  for (const auto& e : v) {
    if (!e.is_string()) fail(what_, ": field '", k, "' must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

QuantSpec QuantConfig::for_module(const std::string& module) const {
  auto it = overrides.find(module);
  return it == overrides.end() ? defaults : it->second;
}

namespace {

void check_bits(const std::string& what, const std::string& key, int bits, int group) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
    fail(what, ": ", key, ": unsupported bits ", bits, " (2, 3, 4, 5, 6 or 8)");
  if (group != 32 && group != 64 && group != 128)
    fail(what, ": ", key, ": unsupported group_size ", group, " (32, 64 or 128)");
}

QuantConfig parse_quant(const json& raw, const std::string& what) {
  QuantConfig q;
  const json* mlx = nullptr;
  if (auto it = raw.find("quantization"); it != raw.end() && it->is_object()) mlx = &*it;
  auto qc = raw.find("quantization_config");
  if (!mlx && qc != raw.end() && qc->is_object()) {
    std::string method = qc->value("quant_method", "");
    if (method == "fp8") {
      q.kind = QuantConfig::Kind::Fp8Block;
      auto bs = qc->find("weight_block_size");
      if (bs != qc->end()) {
        if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
            !(*bs)[1].is_number_integer() || (*bs)[0].get<int>() <= 0 || (*bs)[1].get<int>() <= 0)
          fail(what, ": quantization_config.weight_block_size must be [rows, cols] > 0");
        q.fp8_block_rows = (*bs)[0].get<int>();
        q.fp8_block_cols = (*bs)[1].get<int>();
      }
      return q;
    }
    if (qc->contains("bits") && qc->contains("group_size")) mlx = &*qc;
    else if (!method.empty()) fail(what, ": unsupported quantization_config.quant_method '", method, "'");
  }
  if (!mlx) return q;
  q.kind = QuantConfig::Kind::Affine;
  auto spec = [&](const json& o, const std::string& key) {
    if (!o.contains("bits") || !o.contains("group_size") || !o["bits"].is_number_integer() ||
        !o["group_size"].is_number_integer())
      fail(what, ": quantization '", key, "' needs integer 'bits' and 'group_size'");
    QuantSpec s{o["bits"].get<int>(), o["group_size"].get<int>()};
    check_bits(what, "quantization '" + key + "'", s.bits, s.group_size);
    return s;
  };
  q.defaults = spec(*mlx, "defaults");
  for (auto it = mlx->begin(); it != mlx->end(); ++it) {
    if (it.key() == "bits" || it.key() == "group_size" || it.key() == "mode") continue;
    if (it->is_object()) q.overrides[it.key()] = spec(*it, it.key());
    else if (it->is_boolean() && !it->get<bool>()) q.overrides[it.key()] = QuantSpec{};
  }
  return q;
}

RopeConfig parse_rope(const json& raw, const std::string& what, int64_t max_seq_len) {
  RopeConfig r;
  const json* p = nullptr;
  if (auto it = raw.find("rope_parameters"); it != raw.end() && it->is_object()) p = &*it;
  else if (auto it2 = raw.find("rope_scaling"); it2 != raw.end() && it2->is_object()) p = &*it2;
  json top = json::object();
  for (const char* k : {"rope_theta", "partial_rotary_factor"})
    if (raw.contains(k) && !raw[k].is_null()) top[k] = raw[k];
  json merged = top;
  if (p)
    for (auto it = p->begin(); it != p->end(); ++it) merged[it.key()] = it.value();
  ConfigReader m(merged, what + " (rope parameters)");
  r.theta = m.get_float("rope_theta", 10000.0);
  r.type = m.get_string("rope_type", m.get_string("type", "default"));
  r.partial_rotary_factor = m.get_float("partial_rotary_factor", 1.0);
  r.factor = m.get_float("factor", 1.0);
  // transformers reads `beta_fast or 32`, `beta_slow or 1`: 0 means the default too.
  r.beta_fast = m.get_float("beta_fast", 0.0);
  r.beta_slow = m.get_float("beta_slow", 0.0);
  if (r.beta_fast == 0.0) r.beta_fast = 32.0;
  if (r.beta_slow == 0.0) r.beta_slow = 1.0;
  r.mscale = m.get_float("mscale", 0.0);
  r.mscale_all_dim = m.get_float("mscale_all_dim", 0.0);
  r.original_max_position_embeddings = m.get_int("original_max_position_embeddings", 0);
  r.attention_factor = m.get_float("attention_factor", 0.0);
  r.truncate = m.get_bool("truncate", true);
  if (r.type == "yarn") {
    if (r.original_max_position_embeddings == 0) r.original_max_position_embeddings = max_seq_len;
    if (r.original_max_position_embeddings <= 0)
      fail(what, ": rope original_max_position_embeddings must be positive");
    if (!m.has("factor")) r.factor = double(max_seq_len) / double(r.original_max_position_embeddings);
  }
  if (!(r.factor > 0.0)) fail(what, ": rope factor must be positive");
  if (r.theta <= 0) fail(what, ": rope_theta must be positive");
  if (r.partial_rotary_factor <= 0 || r.partial_rotary_factor > 1)
    fail(what, ": partial_rotary_factor must be in (0, 1]");
  if (r.type != "default" && r.type != "yarn" && r.type != "linear")
    fail(what, ": unsupported rope_type '", r.type, "'");
  return r;
}

}  // namespace

ModelConfig parse_model_config(const std::string& text, const std::string& what) {
  ModelConfig c;
  c.path = what;
  c.raw = json::parse(text, nullptr, false);
  if (c.raw.is_discarded()) fail(what, ": not valid JSON");
  if (!c.raw.is_object()) fail(what, ": not a JSON object");
  ConfigReader r(c.raw, what);
  c.arch = r.get_string("model_type", "");
  if (c.arch.empty()) fail(what, ": missing field 'model_type'");
  c.dim = r.get_pos_int("hidden_size");
  c.n_layers = r.get_pos_int("num_hidden_layers");
  c.n_heads = r.get_pos_int("num_attention_heads");
  c.n_kv_heads = r.has("num_key_value_heads") ? r.get_pos_int("num_key_value_heads") : c.n_heads;
  c.head_dim = r.has("head_dim") ? r.get_pos_int("head_dim") : c.dim / c.n_heads;
  c.vocab_size = r.get_pos_int("vocab_size");
  c.hidden_dim = r.get_int("intermediate_size", 0);
  c.max_seq_len = r.has("max_position_embeddings") ? r.get_pos_int("max_position_embeddings") : 4096;
  c.norm_eps = r.get_float("rms_norm_eps", 1e-6);
  c.tie_embeddings = r.get_bool("tie_word_embeddings", false);
  if (c.head_dim <= 0) fail(what, ": head_dim must be positive");
  if (c.n_heads % c.n_kv_heads != 0)
    fail(what, ": num_attention_heads (", c.n_heads, ") is not a multiple of num_key_value_heads (", c.n_kv_heads, ")");
  if (c.norm_eps <= 0) fail(what, ": rms_norm_eps must be positive");
  if (r.has("eos_token_id")) {
    const json& e = c.raw["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else c.eos_token_ids = r.get_int_list("eos_token_id");
  }
  c.rope = parse_rope(c.raw, what, c.max_seq_len);
  c.quant = parse_quant(c.raw, what);
  return c;
}

ModelConfig load_model_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  return parse_model_config(read_text_file(path), path);
}

}  // namespace moeflux
