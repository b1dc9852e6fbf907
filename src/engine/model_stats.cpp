// Weight bytes and parameters, total and touched per token, from the tensor table.
#include "engine/model_stats.h"

#include <map>
#include <regex>
#include <set>

namespace moeflux {

namespace {
bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
}  // namespace

ModelStats model_stats(const Model& m) {
  ModelStats st;
  const ModelConfig& c = m.cfg;
  const int64_t k = c.reader().get_int("num_experts_per_tok", 0);
  // Expert tensors: "<layer prefix>.experts.<e>.<rest>" (packs and HF checkpoints); MLX stacks
  // "<prefix>.switch_mlp.<rest>" hold all experts of a layer.
  const std::regex per_expert(R"((.*)\.experts\.(\d+)\..*)"), stacked(R"((.*)\.switch_mlp\..*)");
  std::map<std::string, std::pair<uint64_t, uint64_t>> expert_bytes;  // layer -> (bytes, params) of all experts
  std::map<std::string, std::set<std::string>> expert_ids;
  for (const auto& name : m.store->names()) {
    const TensorInfo& t = m.store->get(name);
    uint64_t params = 0;
    if (!ends_with(name, ".scales") && !ends_with(name, ".biases") && !ends_with(name, ".weight_scale_inv")) {
      params = uint64_t(t.numel());
      if (t.dtype == DType::U32 && m.store->has(name.substr(0, name.size() - 7) + ".scales")) {
        const int bits = c.quant.for_module(name.substr(0, name.size() - 7)).bits;
        if (bits > 0) params = params * 32 / uint64_t(bits);
      }
    }
    st.weight_bytes += t.nbytes;
    st.params += params;
    std::smatch mt;
    if (std::regex_match(name, mt, per_expert)) {
      auto& e = expert_bytes[mt[1]];
      e.first += t.nbytes, e.second += params;
      expert_ids[mt[1]].insert(mt[2]);
    } else if (std::regex_match(name, mt, stacked)) {
      auto& e = expert_bytes[mt[1]];
      e.first += t.nbytes, e.second += params;
    } else if (name.find("embed_tokens") != std::string::npos && t.shape.size() == 2 && t.shape[0] > 0) {
      st.bytes_per_token += t.nbytes / uint64_t(t.shape[0]);  // one row
    } else {
      st.bytes_per_token += t.nbytes;
      st.params_per_token += params;
    }
  }
  const int64_t n_experts = c.reader().get_int("num_experts", c.reader().get_int("num_local_experts",
                                                c.reader().get_int("n_routed_experts", 0)));
  for (const auto& [layer, bp] : expert_bytes) {
    uint64_t n = expert_ids.count(layer) ? expert_ids[layer].size() : uint64_t(n_experts);
    if (n == 0 || k <= 0) continue;
    st.bytes_per_token += bp.first / n * uint64_t(k);
    st.params_per_token += bp.second / n * uint64_t(k);
  }
  return st;
}

}  // namespace moeflux
