// Checkpoint -> pack conversion, streaming tensor by tensor. Tensors are classified by name
// only, so every architecture converts: per-expert `{moe}.experts.{e}.{proj}.*` (Hugging Face)
// and stacked `{moe}.switch_mlp.{proj}.*` (MLX) become one record per expert in the layer's
// file; everything else is dense. Linears are (re-)encoded per ConvertOptions; routers
// (`*.gate`, `*.shared_expert_gate`) and non-linear tensors (norms, biases, conv, 1-D) are
// always copied as they are. Output goes to DST.tmp-XXXXXX, renamed to DST at the end; the
// destination rules are in dst_guard.h, interruption in interrupt.h. A checkpoint is checked
// against its architecture (model/check_weights.h) before anything is written, and the
// written pack again before the rename. Tokenizer and generation files are copied beside
// the weights (side_files.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "convert/encode.h"
#include "format/config.h"

namespace moeflux {

// A tensor the converter reads: metadata up front, bytes on demand.
struct SrcTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
};

class ConvertSource {
 public:
  virtual ~ConvertSource() = default;
  virtual const ModelConfig& config() const = 0;
  virtual std::string layout() const = 0;  // "hf" or "mlx"
  virtual const std::vector<SrcTensor>& tensors() const = 0;  // in good read order
  // Bytes valid until release(name). file_backed(): released pages can be dropped.
  virtual const uint8_t* acquire(const std::string& name) = 0;
  virtual void release(const std::string& name) = 0;
  virtual bool file_backed() const = 0;
  // The checkpoint directory (side files, destination checks); empty for generated sources.
  virtual std::string dir() const { return {}; }
};

// A safetensors checkpoint directory (Hugging Face or MLX), checked for completeness.
std::unique_ptr<ConvertSource> open_checkpoint_source(const std::string& dir);

struct ConvertOptions {
  Target bits;                  // dense linears; Keep: quantised checkpoints keep, float ones -> q4
  Target expert_bits;           // routed experts
  bool expert_bits_set = false; // else experts follow `bits`
  bool force = false;           // replace an existing DST
  bool quiet = false;           // no progress output
};

// "2","3","4","8" (affine, group `group`), "16"/"bf16", "fp8"; Error naming `option` otherwise.
Target parse_target(const std::string& s, int group, const std::string& option);

struct ConvertStats {
  uint64_t source_bytes = 0, dense_bytes = 0, expert_bytes = 0;
  size_t n_dense = 0, n_records = 0;
  double seconds = 0;
};

ConvertStats convert_to_pack(ConvertSource& src, const std::string& dst, const ConvertOptions& opt);

}  // namespace moeflux
