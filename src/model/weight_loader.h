// WeightLoader: turns checkpoint tensors into QWeight views and f32 vectors, checking every
// shape against what the architecture expects (from config.json) and naming the tensor on
// any mismatch. Handles Hugging Face dense weights (F32/F16/BF16), MLX affine triplets
// (weight / scales / biases, bits from `quantization` with per-module overrides) and
// DeepSeek FP8 (weight + weight_scale_inv). Experts: one tensor per expert
// (`{moe}.experts.{e}.{proj}`) or MLX stacks (`{moe}.switch_mlp.{proj}`, (n_experts, rows, cols)).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/tensor_store.h"
#include "backend/backend.h"
#include "format/qweight.h"

namespace moeflux {

class WeightLoader {
 public:
  WeightLoader(const TensorStore& store, const ModelConfig& cfg) : store_(store), cfg_(cfg) {}
  // Every weight is prepared for `be` as it is loaded (Backend::prepare_weight), its bytes
  // rewritten in place. PRECOND: the store's bytes are a private, writable copy (a resident
  // pack) read only by that backend.
  void prepare_for(const Backend& be) { be_ = &be; }
  // Tensors rewritten so far (tied ones once).
  int64_t prepared_tensors() const { return int64_t(prepared_.size()); }

  bool has(const std::string& name) const { return store_.has(name); }
  // `module` is the tensor name without ".weight". Expects (rows, cols).
  QWeight linear(const std::string& module, int64_t rows, int64_t cols) const;
  // 1-D float tensor of n values as f32.
  std::vector<float> vec(const std::string& name, int64_t n) const;
  // Any float tensor with the given shape, as f32 (row-major).
  std::vector<float> tensor_f32(const std::string& name, const std::vector<int64_t>& shape) const;
  // n_experts views of `proj` (e.g. "gate_proj", "w1") under the MoE prefix `moe`.
  std::vector<QWeight> expert_linears(const std::string& moe, const std::string& proj,
                                      int64_t n_experts, int64_t rows, int64_t cols) const;

  const TensorStore& store() const { return store_; }
  const ModelConfig& config() const { return cfg_; }

 private:
  // stacked: tensor has a leading n_experts dimension; returns the view of expert 0 and
  // sets `expert_stride` (bytes of data, scales) for slicing.
  QWeight load(const std::string& module, int64_t n_stack, int64_t rows, int64_t cols,
               size_t* data_stride, size_t* scale_stride) const;
  // Prepares q (n_stack stacked matrices from q.data) in place, once per tensor.
  void prepare(QWeight& q, int64_t n_stack) const;
  const TensorStore& store_;
  const ModelConfig& cfg_;
  const Backend* be_ = nullptr;
  mutable std::set<const uint8_t*> prepared_;  // tensors already rewritten (tied ones load twice)
};

}  // namespace moeflux
