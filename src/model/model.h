// The model: resident weights and the layer structure built by an architecture file, for the
// backend its weights were prepared for. A decoder layer is  x += mixer(norm(x));
// x += ffn(norm(x)).  The engine only sees the Mixer / FeedForward interfaces, so new
// attention kinds (GatedDeltaNet, MLA) and new FFNs slot in without touching it; each block
// is data (backend/blocks.h) that the backend runs as one op.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/mmap_file.h"
#include "format/config.h"
#include "format/tensor_store.h"
#include "format/qweight.h"

namespace moeflux {

class ExpertSource;

// Token mixing: attention of any kind. The state it keeps per sequence is allocated by the
// backend (Backend::make_state) and read and written only by the backend's op.
class Mixer {
 public:
  virtual ~Mixer() = default;
  virtual std::unique_ptr<LayerState> make_state(const Backend& be) const = 0;
  // x: (R, dim) normed inputs of the sequences' rows (Backend::SeqRows, each with its state of
  // this layer); out: (R, dim). Appends each sequence's positions to its state.
  virtual void forward(Backend& be, Act x, std::span<const SeqRows> seqs, Act out) const = 0;
};

// Channel mixing: dense MLP or mixture of experts.
class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // x: (T, dim) -> out: (T, dim)
  virtual void forward(Backend& be, Act x, Act out) const = 0;
};

struct Layer {
  std::vector<float> attn_norm;  // (dim)
  std::vector<float> ffn_norm;   // (dim)
  std::unique_ptr<Mixer> mixer;
  std::unique_ptr<FeedForward> ffn;
};

struct Model {
  ModelConfig cfg;
  std::unique_ptr<TensorStore> store;  // owns the mapped files every QWeight points into
  QWeight embed;                  // (vocab_size, dim)
  QWeight lm_head;                // (vocab_size, dim)
  std::vector<float> final_norm;  // (dim)
  std::vector<Layer> layers;
  // The backend the weights were prepared for (Backend::prepare_weight), which runs them.
  std::shared_ptr<Backend> backend;
  // Expert streaming (stream/streaming.h): where the MoE blocks read experts from; null when
  // experts are read from the pack's own (resident or mapped) bytes.
  std::shared_ptr<ExpertSource> expert_source;
  // Tensors the backend rewrote into its own layout as the model loaded (0 when none).
  int64_t prepared_tensors = 0;
};


// Opens a checkpoint directory (config.json + safetensors) or a pack, dispatching on
// model_type, for `backend` (null: the default CPU backend); a pack's files are mapped or
// (Resident) copied into memory, and a resident copy's weights are prepared for the backend in
// place where it rewrites weights. A pack's dense
// tensors are checked against their checksums (format/pack_check.h), and with
// verify_experts so are the expert records of a Resident copy; a mismatch raises an Error
// naming the tensor or layer/expert. (Expert records read through a mapping are not checked;
// those read into the expert cache are, as they are read: stream/expert_cache.h.)
std::unique_ptr<Model> load_model(const std::string& dir, MapMode pack_mode = MapMode::Map,
                                  std::shared_ptr<Backend> backend = nullptr, bool verify_experts = true);

// Architectures the engine knows ("qwen3_moe", "mixtral", ...).
std::vector<std::string> supported_architectures();

}  // namespace moeflux
