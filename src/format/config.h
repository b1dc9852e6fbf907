// config.json -> a validated ModelConfig. Fields shared by every architecture are read here;
// architecture files read their extras through ConfigReader, which names the file and field
// in every error. Rope settings come from `rope_parameters` (transformers 5) or the older
// top-level `rope_theta` + `rope_scaling`.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moeflux {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {}
  bool has(const std::string& k) const;  // present and not null
  int64_t get_int(const std::string& k) const;
  int64_t get_int(const std::string& k, int64_t def) const;
  int64_t get_pos_int(const std::string& k) const;  // > 0
  double get_float(const std::string& k) const;
  double get_float(const std::string& k, double def) const;
  bool get_bool(const std::string& k, bool def) const;
  std::string get_string(const std::string& k, const std::string& def) const;
  std::vector<int64_t> get_int_list(const std::string& k) const;  // absent/null -> empty
  std::vector<std::string> get_string_list(const std::string& k) const;
  const std::string& what() const { return what_; }

 private:
  const nlohmann::json& at(const std::string& k) const;
  const nlohmann::json& j_;
  std::string what_;
};

struct RopeConfig {
  std::string type = "default";  // default | yarn | linear | ...
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;
  // YaRN (transformers 5 _compute_yarn_parameters). `factor` defaults to
  // max_position_embeddings / original_max_position_embeddings, which defaults to
  // max_position_embeddings. mscale / mscale_all_dim 0: absent.
  double beta_fast = 32.0, beta_slow = 1.0, mscale = 0.0, mscale_all_dim = 0.0;
  int64_t original_max_position_embeddings = 0;
  double attention_factor = 0.0;  // 0: derived
  bool truncate = true;           // floor / ceil the correction range
};

// One module's quantisation. bits == 0: not quantised (plain float weights).
struct QuantSpec {
  int bits = 0;
  int group_size = 0;
};

struct QuantConfig {
  enum class Kind { None, Affine, Fp8Block };
  Kind kind = Kind::None;
  QuantSpec defaults;
  std::map<std::string, QuantSpec> overrides;  // module path (no ".weight") -> spec
  int fp8_block_rows = 128, fp8_block_cols = 128;
  QuantSpec for_module(const std::string& module) const;
};

struct ModelConfig {
  std::string path;          // config.json path, for messages
  std::string arch;          // model_type
  int64_t dim = 0;           // hidden_size
  int64_t n_layers = 0;      // num_hidden_layers
  int64_t n_heads = 0;       // num_attention_heads
  int64_t n_kv_heads = 0;    // num_key_value_heads
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t hidden_dim = 0;    // intermediate_size of dense MLPs (0 if none)
  int64_t max_seq_len = 0;   // max_position_embeddings
  double norm_eps = 1e-6;
  bool tie_embeddings = false;
  RopeConfig rope;
  QuantConfig quant;
  std::vector<int64_t> eos_token_ids;
  nlohmann::json raw;        // the whole file, for architecture-specific fields

  ConfigReader reader() const { return ConfigReader(raw, path); }
};

ModelConfig load_model_config(const std::string& dir);
ModelConfig parse_model_config(const std::string& text, const std::string& what);

}  // namespace moeflux
