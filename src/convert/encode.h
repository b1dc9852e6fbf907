// Re-encoding one weight matrix for a pack: keep the source bytes, or dequantise rows with
// the reference ops and encode them as bf16, affine q2..q8 (quantize_row_affine_ref) or FP8
// e4m3 with 128x128 block scales. Rows are split over the CPU pool (parallel_rows).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/pack_manifest.h"
#include "format/qweight.h"

namespace moeflux {

// What a linear becomes. Keep: the source bytes unchanged.
struct Target {
  enum class Kind { Keep, Bf16, Affine, Fp8 };
  Kind kind = Kind::Keep;
  int bits = 0, group_size = 64;
  std::string describe() const;
};

// One output tensor of a linear: suffix ".weight" / ".scales" / ".biases" / ".weight_scale_inv".
struct OutPart {
  std::string suffix;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  std::optional<PackQuant> quant;  // on ".weight" of quantised formats
  const uint8_t* data = nullptr;   // into `owned` or into the source
  uint64_t nbytes = 0;
  std::vector<uint8_t> owned;
};

// The source tensors of a linear (bytes already acquired). Stacked (MLX switch_mlp) tensors
// have a leading expert dimension; `expert` selects the slice (-1: not stacked).
struct LinearSrc {
  std::string module;  // source module name, looked up in the source's `quantization`
  DType wdtype = DType::F32, sdtype = DType::BF16;
  std::vector<int64_t> wshape;
  const uint8_t *w = nullptr, *scales = nullptr, *biases = nullptr, *scale_inv = nullptr;
  uint64_t wbytes = 0, sbytes = 0;  // whole tensors (all experts when stacked)
};

// A QWeight view of the source (one expert's slice when stacked); Error naming the module
// when shapes and the quantisation config disagree.
QWeight view_linear(const LinearSrc& s, const ModelConfig& cfg, int64_t expert, int64_t n_stack);

// Whether `t` can encode a (rows, cols) matrix (group and word alignment).
bool target_fits(const Target& t, int64_t cols);

// The pack tensors for `w` encoded as `t`. Keep returns views into the source.
// drop_source: w.data lies in a read-only file mapping; its pages are released as rows are
// consumed, so peak memory stays near the output size even for multi-GB embeddings.
std::vector<OutPart> encode_linear(const QWeight& w, const Target& t, bool drop_source = false);

// f32 -> e4m3fn, round to nearest even, saturating to +-448; NaN -> 0x7f.
uint8_t f32_to_f8e4m3(float x);

// Runs fn(r0, r1) over [0, rows) on a thread pool of one thread per physical core when
// rows * work_per_row elements of work are enough (64K); inline otherwise.
void parallel_rows(int64_t rows, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace moeflux
