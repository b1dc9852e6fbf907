// CudaBackend's declaration (CUDA types inside; the rest of the code sees only
// backend/cuda/cuda_backend.h). Ops run on one stream; host-facing calls (to_host, logits)
// synchronise with it. Weights stay host views (QWeight) and are mirrored to the device on first
// use; the experts of a MoE layer once as a table of device views (DW) per MoeSpec.
#pragma once
#include <cuda_runtime.h>

#include <chrono>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_options.h"
#include "backend/cuda/device_memory.cuh"
#include "backend/cuda/dweight.cuh"
#include "backend/cuda/gpu_experts.cuh"
#include "backend/arm_choice.h"
#include "backend/miss_split.h"
#include "backend/cuda/kernels.cuh"

namespace moeflux {

// The format code the kernels use for w (cuda::kNoFmt: not supported on the device).
int cuda_fmt(const QWeight& w);
// Bytes of w's scales (affine: also of its biases; fp8: its block scales); 0 for dense.
size_t scale_bytes(const QWeight& w);
// w's shape and format as the kernels see them, its pointers left null. Error when the device
// does not run w's format.
cuda::DW dw_view(const QWeight& w);

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& opt);
  ~CudaBackend() override;
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  std::string describe() const override;
  bool supports(Op op, const QWeight& w) const override;
  // device, sm, multiprocessors, memory_gb, mirrored_gb (weights on the device so far)
  std::vector<std::pair<std::string, std::string>> facts() const override;
  // read_gbs: a read-only kernel over a buffer far larger than L2.
  Ceilings measure_ceilings() override;
  // wide_rows: weights read 16 bytes a lane at a time where their layout allows (else 8
  // values at a time); prefill_prefetch: in prefill, the next layer's streamed experts are
  // copied into the GPU expert cache during this layer's compute; step_graphs: decode steps
  // recorded and replayed as CUDA graphs (off: every step runs eagerly); device_tables: small
  // steps of layers whose records the host holds read a device table of slots and mapped host
  // records with no host round trip (DeviceTier); tc_prefill: steps and experts of at least
  // kTcRows rows with affine 4-bit or 8-bit weights on tensor cores (mma_rows.cu; off: the
  // warp-per-row kernels); scan_insert: a prefill's misses in the GPU expert cache are the
  // first to go, and what was there stays (off: they are the most recently used). In the
  // steps recorded as graphs, the kernels of launch.cuh start while the kernel before them
  // drains, their weights coming into L2 meanwhile (no switch).
  std::vector<std::string> ab_switches() const override {
    return {"wide_rows", "prefill_prefetch", "step_graphs", "device_tables", "tc_prefill", "scan_insert", "flash_attention"};
  }
  bool ab_switch(const std::string& name) const override;
  void set_ab_switch(const std::string& name, bool on) override;

  std::unique_ptr<LayerState> make_state(const GqaSpec& a) const override;
  std::unique_ptr<LayerState> make_state(const MlaSpec& a) const override;
  std::unique_ptr<LayerState> make_state(const GdnSpec& a) const override;
  std::unique_ptr<ActBuffer> alloc(size_t floats) const override;
  void to_host(Act x, float* out) const override;
  void from_host(const float* in, Act x) const override;

  void embed(const QWeight& table, std::span<const int32_t> ids, Act out) override;
  void add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) override;
  void add(Act x, Act y) override;
  void rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) override;
  void matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) override;
  void gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  // MLA (in the latent space) and GatedDeltaNet on the device; where a shape exceeds their
  // kernels' (mla_fits, gdn_fits), on the host: the cpu backend over host copies of x and
  // out, the state in host memory.
  void mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void swiglu(const SwiGlu& s, Act x, Act out) override;
  void moe(const MoeSpec& m, Act x, Act out) override;
  void logits(const QWeight& head, Act x, float* logits) override;
  // The top kernels (top_logits.cu) over a pass kept on the device; more than kTopMax on the host.
  void logits_top(const QWeight& head, Act x, int64_t n, int pass, float* vals, int32_t* ids) override;
  void kept_logits(int pass, int64_t row, std::span<const int32_t> ids, float* out) override;

  // Steps of decode tokens only (one row per sequence, no host reads) are recorded as a CUDA
  // graph the second time a step of their shape runs (the first runs eagerly and shows whether
  // every op can be recorded) and replayed from the third: one launch a step. The shape: the
  // rows, and the KV caches' device buffers (a cache that grows gives a new shape). The graph
  // reads the ids and positions from a pinned staging buffer that begin_step fills.
  void set_stage_profiling(bool on) override;
  StageTimes stage_times() override;
  void begin_step(const StepInfo& step) override;
  void end_step(bool ok) override;

  cudaStream_t stream() const { return stream_; }

 private:
  struct ExpertTable {
    const uint8_t* experts_data = nullptr;  // the spec's experts[0].gate.data when built
    cuda::DW* table = nullptr;              // (n_experts, 3) on the device
    int fmt_gate_up = cuda::kNoFmt, fmt_down = cuda::kNoFmt;
    bool wide_gate_up = false, wide_down = false;  // rows read 16 bytes at a time
    int64_t vec_gate_up = 0, vec_down = 0;         // the group where small steps run on mma_vec.cu
  };
  // w's view with device pointers (mirroring its bytes on first use).
  cuda::DW dw(const QWeight& w) const;
  const float* dvec(const std::vector<float>& v) const;
  // ys[i] = x ws[i]^T: on tensor cores (matmul_tc) the weights that can when the step has at
  // least kTcRows rows and tc_prefill is on, the others through cuda::matmul.
  void mm(std::span<const cuda::DW> ws, const float* x, int64_t T, std::span<float* const> ys);
  void mm(const cuda::DW& w, const float* x, int64_t T, float* y);
  // Whether m's routed experts with at least kTcRows pairs run on tensor cores.
  bool tc_experts(const MoeSpec& m) const;
  const ExpertTable& expert_table(const MoeSpec& m);
  void swiglu_rows(const SwiGlu& s, const float* x, int64_t T, float* out);
  // Streamed experts through the GPU expert cache (--gpu-expert-cache, made at the first call)
  // and the CPU (--moe-misses, --cpu-moe-layers): moe_tiers.cu.
  void moe_cached(const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev, const cuda::PairTiles& pt,
                  float* h, float* y);
  cuda::GpuExperts& gpu_experts(const MoeSpec& m, size_t extent);
  // Starts copying the experts of `next` that are not in the GPU cache (at most half the
  // slots) in the background: a prefill's next layer uses nearly all of them.
  void prefetch_layer(const MoeSpec& next);
  // The experts `on_cpu` of the step routed by `ids` (host), computed by the host backend from
  // the source's records on x (host), their rows scattered into y (device) on the stream.
  void moe_on_host(const MoeSpec& m, const std::vector<float>& x, const std::vector<int32_t>& ids,
                   std::span<const int32_t> on_cpu, std::span<const size_t> bytes, float* y);
  // After the stream has passed the last streamed layer's work: its held host records go.
  void release_layer();

  // A streamed MoE layer whose source holds every record in host memory (holds_all), page-
  // locked and mapped: its experts' views in one device table, each entry pointing at the
  // expert's GPU slot once its copy is done, else at its record in host memory, which the
  // kernels then read over the bus. A step of at most kTierRows rows reads the table as it is,
  // with no host round trip (and is recorded as a graph); admit_routed() copies its routed
  // experts into slots after the step, and their entries switch once the copies are done.
  // Every table write is queued on the compute stream, and an evicted record's entry goes back
  // to host memory before the copy that refills its slot starts (GpuExperts' evict hook).
  struct DeviceTier {
    const MoeSpec* spec = nullptr;
    const ExpertSource* source = nullptr;
    const uint8_t* base0 = nullptr;     // spec->record_base[0] when made
    cuda::DW* table = nullptr;          // device: (n_experts, 3)
    cuda::DW* shadow = nullptr;         // pinned: what the table is given
    std::vector<cuda::DW> host_views;   // (n_experts, 3): the records in host memory
    std::vector<bool> on_slot;          // the shadow's entry points at the expert's slot
    std::vector<size_t> bytes;          // each record's extent
    int32_t* ids = nullptr;             // pinned: a small step's routed ids (kTierRows x k)
    int32_t* ids_mapped = nullptr;      // ... its device view, which the router writes
    int64_t pairs = 0;                  // ... how many (0: none to admit)
    int fmt_gu = cuda::kNoFmt, fmt_d = cuda::kNoFmt;
    bool wide_gu = false, wide_d = false;
    int64_t vec_gu = 0, vec_d = 0;  // the experts' group where they run on mma_vec.cu (else 0)
  };
  static constexpr int64_t kTierRows = 16;
  // m's tier, made at its first call (which syncs); null where the layer takes moe_cached's
  // other paths (--moe-misses cpu, --cpu-moe-layers, a host cache smaller than the pack,
  // records not mapped, the device_tables switch off).
  DeviceTier* device_tier(const MoeSpec& m);
  // The routed experts of m through its tier: small steps as the table is, larger ones after
  // placing their experts (up to the slots) and waiting for the copies.
  void moe_tier(DeviceTier& t, const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev,
                const cuda::PairTiles& pt, float* h, float* y);
  void tier_point(DeviceTier& t, int32_t e, bool slot);  // the shadow's entry e, queued
  void tier_evicted(int layer, int expert);    // GpuExperts' evict hook
  // Counts a step's distinct routed experts (most routed first) and keeps those the slots can
  // take; the rest were read where their entries point.
  void tier_keep_placeable(DeviceTier& t, std::vector<int32_t>& used);
  void switch_filled();                        // entries whose copies are done point at their slots
  // A step's end (the stream idle): its small steps' routed experts into slots (background
  // copies, least recently used out), and the entries of finished copies switched.
  void admit_routed();
  void admit_layer(DeviceTier& t);
  std::unordered_map<const MoeSpec*, std::unique_ptr<DeviceTier>> tiers_by_spec_;
  std::vector<DeviceTier*> tiers_by_layer_;    // by source layer
  std::vector<std::pair<DeviceTier*, int32_t>> tier_pending_;  // copies in flight into their slots
  struct TierReads {
    uint64_t small_steps = 0, host_reads = 0;  // tier layer-steps without a round trip; experts read from host
    uint64_t admits = 0;
    double admit_s = 0;  // host time of admit_routed()
  } tier_reads_;
  std::unique_ptr<cuda::GpuExperts> gpu_experts_;
  std::vector<cuda::GpuExperts::Placed> held_;  // the last streamed layer's placements
  TierRates rates_;
  // --moe-misses auto: a step of at most kAutoRows rows runs one of two arms, chosen by their
  // measured time a row per class of step (up to kTierRows rows, and above): 0, its streamed
  // layers through the device tables as in copy mode; 1, through moe_cached with the misses
  // split between the copy and the CPU. Larger steps (prefills) take the tables: their copies
  // overlap the previous layer's compute, where the CPU would take several rows an expert.
  // The arms differ only in their misses: after a tables step of a class without any, that
  // class's steps take the tables, unasked, until one has misses again.
  static constexpr int64_t kAutoRows = 64;
  ArmChoice auto_arms_[2];
  bool auto_misses_[2] = {true, true};  // the class's last tables step had misses (or none ran)
  uint64_t auto_quiet_[2] = {0, 0};     // steps that took the tables for want of misses
  int step_arm_ = -1;                   // -1: no choice for this step (the tables where there are)
  int step_class_ = -1;                 // the step's class under auto, else -1
  uint64_t step_misses0_ = 0;           // tiers_.copied when the step began
  std::chrono::steady_clock::time_point step_t0_;
  cuda::PinnedBuffer pinned_tables_, pinned_rows_;
  struct TierStats {
    uint64_t routed = 0;  // distinct experts of the steps that streamed
    uint64_t hits = 0, copied = 0, cpu = 0;  // ... found in the GPU cache, copied and waited for, on the CPU
    uint64_t cpu_rows = 0, prefetched = 0;
    // Bytes of the routed experts that were in no GPU slot when their layer ran (copied and
    // waited for, read over the bus, or computed on the CPU): the fact gpu_miss_bytes.
    uint64_t miss_bytes = 0;
    double cpu_s = 0, cpu_work = 0;  // cpu_work: record bytes x rows
  } tiers_;
  void moe_streamed(const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev, const cuda::PairTiles& pt,
                    float* h, float* y);
  void host_mixer(Act x, Act out, const std::function<void(Act, Act)>& run);
  // a's shape for the GatedDeltaNet / MLA kernels (no pointers).
  cuda::GdnDev gdn_dev(const GdnSpec& a) const;
  cuda::MlaDev mla_dev(const MlaSpec& a) const;
  // Whether MLA / GatedDeltaNet run on the device: shapes their kernels take; GatedDeltaNet
  // only with the switch MOEFLUX_CUDA_DEVICE_GDN=1 (read when states are made: at start-up).
  bool mla_on_device(const MlaSpec& a) const;
  bool gdn_on_device(const GdnSpec& a) const;
  // Replay: the ops only keep their host-side books; the graph, launched by begin_step, runs
  // meanwhile and logits() waits for it.
  bool replaying() const { return mode_ == Mode::Replay; }
  // Device positions of the sequences of `seqs` (one int each, in order): the step's staging when
  // in a step, else uploaded now.
  const int32_t* positions(std::span<const SeqRows> seqs, cuda::Scratch& sc);

  // Times the work queued in its scope as `stage` while profiling (else does nothing).
  class Stage {
   public:
    Stage(CudaBackend& b, const char* stage);
    ~Stage();

   private:
    CudaBackend& b_;
    cudaEvent_t start_ = nullptr;
    const char* stage_;
  };
  struct Timed {
    const char* stage;
    cudaEvent_t start, end;
  };
  bool profiling_ = false;
  std::vector<Timed> timed_;
  std::vector<cudaEvent_t> events_;  // free
  std::vector<std::pair<std::string, double>> stage_s_;
  int64_t launches_at_ = 0;
  cudaEvent_t event();

  enum class Mode { Eager, Capture, Replay };
  struct StepGraph {
    cudaGraphExec_t exec = nullptr;
    float* logits = nullptr;  // device: the step's logits
    size_t logits_floats = 0;
  };
  Mode mode_ = Mode::Eager;
  bool in_step_ = false, step_graphable_ = false, step_recordable_ = false;
  std::vector<uintptr_t> step_key_;
  std::map<int64_t, int> step_seq_at_row_;  // row0 -> index among the step's sequences
  int64_t step_rows_ = 0;
  int32_t* staging_ = nullptr;    // pinned: ids (rows), then positions (sequences)
  int32_t* step_in_ = nullptr;    // device copy of the staging
  size_t staging_cap_ = 0;
  std::map<std::vector<uintptr_t>, StepGraph> graphs_;
  std::set<std::vector<uintptr_t>> recordable_;
  StepGraph* replay_ = nullptr;
  // The step's head pass on the device: the recorded graph's logits (replay, capture) or y's.
  const float* head_pass(const QWeight& head, Act x, float* y);
  struct KeptPass {
    float* own = nullptr;          // device: the pass's buffer when not a graph's
    size_t cap = 0;                // its floats
    const float* logits = nullptr;  // the pass's logits (own or a graph's)
    int64_t rows = 0, cols = 0;
  };
  std::vector<KeptPass> kept_;  // logits_top's passes

  CudaOptions opt_;
  bool wide_ = true;              // the wide_rows switch
  bool prefill_prefetch_ = true;  // the prefill_prefetch switch
  bool device_tables_ = true;     // the device_tables switch (DeviceTier; off: moe_cached's paths)
  bool scan_insert_ = true;       // the scan_insert switch: a prefill's misses go first (ExpertSlotMap)
  bool step_graphs_ = true;       // the step_graphs switch ($MOEFLUX_CUDA_GRAPHS=0: off at start)
  bool tc_prefill_ = true;        // the tc_prefill switch (mma_rows.cu)
  bool flash_attention_ = true;   // the flash_attention switch: GQA a block per kv head (attention.cu)
  // GatedDeltaNet's device kernels ($MOEFLUX_CUDA_DEVICE_GDN=1, read at start: the layers'
  // states are made where it says). Off until a step of three or more qwen3_next sequences
  // agrees with each sequence alone (tests/engine/test_engine_batch.cpp).
  bool device_gdn_ = false;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<cuda::DevicePool> pool_;
  mutable cuda::Mirror mirror_;
  std::unique_ptr<Backend> host_;
  std::unordered_map<const MoeSpec*, ExpertTable> tables_;
};

}  // namespace moeflux
