// Real models' config.json values (Hugging Face Hub: Qwen/Qwen3-30B-A3B,
// Qwen/Qwen3-Next-80B-A3B-Instruct, Qwen/Qwen3.5-397B-A17B (text tower, flattened as
// qwen3_5_moe_text), deepseek-ai/DeepSeek-V3, mistralai/Mixtral-8x7B-v0.1) and the tensor
// names and shapes each architecture's checkpoint holds.
#include <algorithm>

#include "convert/synth.h"
#include "core/error.h"

namespace moeflux {

using ojson = nlohmann::ordered_json;

std::vector<std::string> synth_presets() {
  return {"qwen3-30b-a3b", "qwen3-next-80b-a3b", "qwen3.5-397b-a17b", "deepseek-v3", "mixtral-8x7b"};
}

namespace {

ojson layer_types(int64_t n, int64_t interval) {
  ojson t = ojson::array();
  for (int64_t i = 0; i < n; ++i) t.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  return t;
}

ojson base_preset(const std::string& p) {
  if (p == "qwen3-30b-a3b")
    return {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"hidden_size", 2048},
            {"intermediate_size", 6144}, {"moe_intermediate_size", 768}, {"num_hidden_layers", 48},
            {"num_attention_heads", 32}, {"num_key_value_heads", 4}, {"head_dim", 128}, {"num_experts", 128},
            {"num_experts_per_tok", 8}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
            {"mlp_only_layers", ojson::array()}, {"vocab_size", 151936}, {"max_position_embeddings", 40960},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", false},
            {"bos_token_id", 151643}, {"eos_token_id", 151645}, {"torch_dtype", "bfloat16"}};
  if (p == "qwen3-next-80b-a3b")
    return {{"architectures", {"Qwen3NextForCausalLM"}}, {"model_type", "qwen3_next"}, {"hidden_size", 2048},
            {"intermediate_size", 5120}, {"moe_intermediate_size", 512}, {"shared_expert_intermediate_size", 512},
            {"num_hidden_layers", 48}, {"num_attention_heads", 16}, {"num_key_value_heads", 2}, {"head_dim", 256},
            {"num_experts", 512}, {"num_experts_per_tok", 10}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
            {"mlp_only_layers", ojson::array()}, {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 128},
            {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16}, {"linear_num_value_heads", 32},
            {"full_attention_interval", 4}, {"layer_types", layer_types(48, 4)}, {"partial_rotary_factor", 0.25},
            {"rope_theta", 10000000.0}, {"vocab_size", 151936}, {"max_position_embeddings", 262144},
            {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", false}, {"bos_token_id", 151643},
            {"eos_token_id", 151645}, {"torch_dtype", "bfloat16"}};
  if (p == "qwen3.5-397b-a17b")
    return {{"architectures", {"Qwen3_5MoeForCausalLM"}}, {"model_type", "qwen3_5_moe_text"},
            {"hidden_size", 4096}, {"moe_intermediate_size", 1024}, {"shared_expert_intermediate_size", 1024},
            {"num_hidden_layers", 60}, {"num_attention_heads", 32}, {"num_key_value_heads", 2}, {"head_dim", 256},
            {"num_experts", 512}, {"num_experts_per_tok", 10}, {"linear_conv_kernel_dim", 4},
            {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16},
            {"linear_num_value_heads", 64}, {"full_attention_interval", 4}, {"layer_types", layer_types(60, 4)},
            {"rope_parameters", {{"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}, {"rope_type", "default"}}},
            {"partial_rotary_factor", 0.25}, {"vocab_size", 248320}, {"max_position_embeddings", 262144},
            {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", false}, {"eos_token_id", 248044},
            {"torch_dtype", "bfloat16"}};
  if (p == "deepseek-v3")
    return {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "deepseek_v3"}, {"hidden_size", 7168},
            {"intermediate_size", 18432}, {"moe_intermediate_size", 2048}, {"num_hidden_layers", 61},
            {"num_attention_heads", 128}, {"num_key_value_heads", 128}, {"n_routed_experts", 256},
            {"n_shared_experts", 1}, {"num_experts_per_tok", 8}, {"n_group", 8}, {"topk_group", 4},
            {"first_k_dense_replace", 3}, {"moe_layer_freq", 1}, {"routed_scaling_factor", 2.5},
            {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
            {"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
            {"v_head_dim", 128}, {"vocab_size", 129280}, {"max_position_embeddings", 163840},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
            {"rope_scaling", {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
                              {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
            {"tie_word_embeddings", false}, {"bos_token_id", 0}, {"eos_token_id", 1}, {"torch_dtype", "bfloat16"}};
  if (p == "mixtral-8x7b")
    return {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"hidden_size", 4096},
            {"intermediate_size", 14336}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
            {"num_key_value_heads", 8}, {"num_local_experts", 8}, {"num_experts_per_tok", 2},
            {"vocab_size", 32000}, {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 1000000.0}, {"sliding_window", nullptr}, {"tie_word_embeddings", false},
            {"bos_token_id", 1}, {"eos_token_id", 2}, {"torch_dtype", "bfloat16"}};
  std::string known;
  for (const auto& k : synth_presets()) known += (known.empty() ? "" : ", ") + k;
  fail("--preset: unknown preset '", p, "' (", known, ")");
}

const char* experts_key(const ojson& c) {
  for (const char* k : {"num_experts", "n_routed_experts", "num_local_experts"})
    if (c.contains(k)) return k;
  return "num_experts";
}

}  // namespace

ojson synth_config(const SynthOptions& o) {
  ojson c = base_preset(o.preset);
  if (o.layers < 0 || o.experts < 0 || o.vocab < 0) fail("synth: --layers, --experts and --vocab must be positive");
  if (o.layers) {
    c["num_hidden_layers"] = o.layers;
    if (c.contains("layer_types")) c["layer_types"] = layer_types(o.layers, c["full_attention_interval"].get<int64_t>());
    if (c.contains("first_k_dense_replace"))
      c["first_k_dense_replace"] = std::min<int64_t>(c["first_k_dense_replace"].get<int64_t>(), o.layers - 1);
  }
  if (o.experts) {
    const char* k = experts_key(c);
    c[k] = o.experts;
    c["num_experts_per_tok"] = std::min<int64_t>(c["num_experts_per_tok"].get<int64_t>(), o.experts);
    if (c.contains("n_group") && (o.experts % c["n_group"].get<int64_t>() != 0 ||
                                  o.experts / c["n_group"].get<int64_t>() < 2))
      c["n_group"] = 1, c["topk_group"] = 1;
  }
  if (o.vocab) c["vocab_size"] = o.vocab;
  return c;
}

std::vector<SrcTensor> synth_tensors(const ojson& c) {
  std::vector<SrcTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, DType dt = DType::BF16) {
    out.push_back(SrcTensor{name, dt, shape, tensor_nbytes(dt, shape, name)});
  };
  auto g = [&](const char* k) { return c.at(k).get<int64_t>(); };
  const std::string arch = c.at("model_type").get<std::string>();
  const int64_t D = g("hidden_size"), V = g("vocab_size"), L = g("num_hidden_layers");
  const int64_t E = c.at(experts_key(c)).get<int64_t>();
  auto swiglu = [&](const std::string& p, int64_t hidden, const char* gn = "gate_proj", const char* un = "up_proj",
                    const char* dn = "down_proj") {
    add(p + "." + gn + ".weight", {hidden, D});
    add(p + "." + un + ".weight", {hidden, D});
    add(p + "." + dn + ".weight", {D, hidden});
  };
  add("model.embed_tokens.weight", {V, D});
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    add(p + ".input_layernorm.weight", {D});
    add(p + ".post_attention_layernorm.weight", {D});
    if (arch == "deepseek_v3") {
      const int64_t H = g("num_attention_heads"), ql = g("q_lora_rank"), kvl = g("kv_lora_rank");
      const int64_t nope = g("qk_nope_head_dim"), rope = g("qk_rope_head_dim"), vd = g("v_head_dim");
      const std::string a = p + ".self_attn";
      add(a + ".q_a_proj.weight", {ql, D});
      add(a + ".q_a_layernorm.weight", {ql});
      add(a + ".q_b_proj.weight", {H * (nope + rope), ql});
      add(a + ".kv_a_proj_with_mqa.weight", {kvl + rope, D});
      add(a + ".kv_a_layernorm.weight", {kvl});
      add(a + ".kv_b_proj.weight", {H * (nope + vd), kvl});
      add(a + ".o_proj.weight", {D, H * vd});
      if (i < g("first_k_dense_replace")) {
        swiglu(p + ".mlp", g("intermediate_size"));
        continue;
      }
      add(p + ".mlp.gate.weight", {E, D});
      add(p + ".mlp.gate.e_score_correction_bias", {E}, DType::F32);
      for (int64_t e = 0; e < E; ++e) swiglu(p + ".mlp.experts." + std::to_string(e), g("moe_intermediate_size"));
      swiglu(p + ".mlp.shared_experts", g("n_shared_experts") * g("moe_intermediate_size"));
      continue;
    }
    const int64_t H = g("num_attention_heads"), KV = g("num_key_value_heads");
    const int64_t hd = c.contains("head_dim") ? g("head_dim") : D / H;
    const bool hybrid = arch == "qwen3_next" || arch == "qwen3_5_moe_text";
    if (hybrid && c.at("layer_types").at(size_t(i)) == "linear_attention") {
      const int64_t nk = g("linear_num_key_heads"), nv = g("linear_num_value_heads");
      const int64_t dk = g("linear_key_head_dim"), dv = g("linear_value_head_dim");
      const std::string a = p + ".linear_attn";
      if (arch == "qwen3_next") {
        add(a + ".in_proj_qkvz.weight", {2 * nk * dk + 2 * nv * dv, D});
        add(a + ".in_proj_ba.weight", {2 * nv, D});
      } else {
        add(a + ".in_proj_qkv.weight", {2 * nk * dk + nv * dv, D});
        add(a + ".in_proj_z.weight", {nv * dv, D});
        add(a + ".in_proj_b.weight", {nv, D});
        add(a + ".in_proj_a.weight", {nv, D});
      }
      add(a + ".conv1d.weight", {2 * nk * dk + nv * dv, 1, g("linear_conv_kernel_dim")});
      add(a + ".dt_bias", {nv});
      add(a + ".A_log", {nv});
      add(a + ".norm.weight", {dv});
      add(a + ".out_proj.weight", {D, nv * dv});
    } else {
      const std::string a = p + ".self_attn";
      add(a + ".q_proj.weight", {(hybrid ? 2 : 1) * H * hd, D});
      add(a + ".k_proj.weight", {KV * hd, D});
      add(a + ".v_proj.weight", {KV * hd, D});
      add(a + ".o_proj.weight", {D, H * hd});
      if (arch != "mixtral") {
        add(a + ".q_norm.weight", {hd});
        add(a + ".k_norm.weight", {hd});
      }
    }
    if (arch == "mixtral") {
      const std::string m = p + ".block_sparse_moe";
      add(m + ".gate.weight", {E, D});
      for (int64_t e = 0; e < E; ++e)
        swiglu(m + ".experts." + std::to_string(e), g("intermediate_size"), "w1", "w3", "w2");
      continue;
    }
    add(p + ".mlp.gate.weight", {E, D});
    for (int64_t e = 0; e < E; ++e) swiglu(p + ".mlp.experts." + std::to_string(e), g("moe_intermediate_size"));
    if (hybrid) {
      swiglu(p + ".mlp.shared_expert", g("shared_expert_intermediate_size"));
      add(p + ".mlp.shared_expert_gate.weight", {1, D});
    }
  }
  add("model.norm.weight", {D});
  if (!c.value("tie_word_embeddings", false)) add("lm_head.weight", {V, D});
  return out;
}

}  // namespace moeflux
