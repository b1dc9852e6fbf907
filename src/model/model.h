// The model: resident weights and the layer structure built by an architecture file.
// A decoder layer is  x += mixer(norm(x));  x += ffn(norm(x)).  The engine only sees the
// Mixer / FeedForward interfaces, so new attention kinds (GatedDeltaNet, MLA) and new FFNs
// slot in without touching it; each Mixer owns the shape of its per-sequence LayerState.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "format/config.h"
#include "format/tensor_store.h"
#include "format/qweight.h"

namespace moeflux {

class ExpertCache;

// One named f32 buffer of a LayerState. `grows`: its length follows the sequence (a KV
// cache); otherwise it has a fixed size set by the Mixer (a recurrent or conv state).
struct StateBuffer {
  const char* name;
  std::vector<float>* data;
  bool grows;
};

// Per-sequence, per-layer state (KV cache, recurrent state, ...).
class LayerState {
 public:
  virtual ~LayerState() = default;
  virtual void clear() = 0;
  virtual size_t bytes() const = 0;  // memory held for the sequence so far
  // The whole state as f32 buffers, so that a session can be saved and restored: restoring
  // resizes each growing buffer to the saved length and copies the values back.
  virtual std::vector<StateBuffer> buffers() = 0;
};

// Token mixing: attention of any kind.
class Mixer {
 public:
  virtual ~Mixer() = default;
  virtual std::unique_ptr<LayerState> make_state() const = 0;
  // x: (T, dim) normed inputs at positions pos0 .. pos0 + T - 1; out: (T, dim).
  // Appends the T positions to `st`.
  virtual void forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const = 0;
};

// Channel mixing: dense MLP or mixture of experts.
class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // x: (T, dim) -> out: (T, dim)
  virtual void forward(const float* x, int64_t T, float* out) const = 0;
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
  // Expert streaming (stream/streaming.h): the host cache the MoE blocks read experts from;
  // null when experts are read from the pack's own (resident or mapped) bytes.
  std::shared_ptr<ExpertCache> expert_cache;
  // Tensors load_model rewrote into the group-lane code layout (Repack; 0 when none).
  int64_t repacked_tensors = 0;
};

// Whether load_model rewrites a resident pack's 4-bit affine weights (group size a multiple
// of 32) in place into the group-lane code layout (backend/cpu/group_lanes.h) that the integer
// matvecs read with less vector work than file order (AVX-512 VNNI: about two thirds; AVX2: no
// per-block reduction, ~19% faster on Zen 1). Auto: where one of those is the CPU level in use
// (backend/cpu/cpu_features.h; AVX2 on AMD CPUs only: on an Intel Xeon's AVX2 level it decoded ~4%
// slower), unless MOEFLUX_GROUP_LANES=0 (=1: On). On: always (the AVX-512 and
// AVX2 matmuls decode the layout too, group size 64 and up; the float matvecs and the other
// kernels convert rows back as they read them). Mapped packs and checkpoints keep file order (their
// bytes are the page cache's); expert-cache records are rewritten as each is read, by Auto
// only when the cache's budget holds them all (stream/streaming.cpp).
enum class Repack { Off, Auto, On };
// Whether `r` asks for the layout on this CPU (Auto resolved as above).
bool repack_wanted(Repack r);

// Opens a checkpoint directory (config.json + safetensors) or a pack, dispatching on
// model_type; a pack's files are mapped or (Resident) copied into memory. A pack's dense
// tensors are checked against their checksums (format/pack_check.h), and with
// verify_experts so are the expert records of a Resident copy; a mismatch raises an Error
// naming the tensor or layer/expert. (Expert records read through a mapping are not checked;
// those read into the expert cache are, as they are read: stream/expert_cache.h.)
std::unique_ptr<Model> load_model(const std::string& dir, MapMode pack_mode = MapMode::Map,
                                  Repack repack = Repack::Auto, bool verify_experts = true);

// Architectures the engine knows ("qwen3_moe", "mixtral", ...).
std::vector<std::string> supported_architectures();

}  // namespace moeflux
