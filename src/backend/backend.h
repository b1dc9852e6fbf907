// Backend: what the model and the engine ask of the hardware. The grain is what an MoE engine
// needs: a whole attention layer, a whole routed MoE FFN (router, top-k, experts, combine,
// shared experts) and the few per-token steps between them, so that a backend can fuse inside
// an op (the CPU's merged regions, a GPU's kernels) and keep activations and state on its
// device. Lifecycle: prepare weights as a model loads (prepare_weight; expert records as they
// stream in: expert_record_transform), allocate a sequence's state (make_state) and
// activations (alloc), then run ops. Implementations: backend/ref (the spec: plain loops,
// runnable), backend/cpu (the optimised CPU engine); make_backend (backend/registry.h) picks
// one by name.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/act.h"
#include "backend/blocks.h"
#include "backend/expert_source.h"
#include "backend/state.h"

namespace moeflux {

// One sequence's rows of a step's activations: rows [row0, row0 + rows) are its tokens at
// positions pos0 .., and `state` its layer state (made by make_state of the layer's spec).
struct SeqRows {
  int64_t row0 = 0, rows = 0, pos0 = 0;
  LayerState* state = nullptr;
};

// One sequence of an Engine step: its layer states (one per layer) and its rows.
struct StepSeq {
  std::span<const std::unique_ptr<LayerState>> states;
  int64_t row0 = 0, rows = 0, pos0 = 0;
};

// What an Engine step will run: the token ids of all rows, the sequences, and whether the
// host reads activations in the middle of the step (hidden states).
struct StepInfo {
  std::span<const int32_t> ids;
  std::span<const StepSeq> seqs;
  bool host_reads = false;
};

// The ops, for capability queries and the op table tests.
enum class Op : uint8_t {
  Embed, RmsNorm, Add, Rope, Matmul, GqaAttention, MlaAttention, GatedDeltaNet, SwiGlu, Moe, Logits,
};
const char* op_name(Op op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "ref", "cpu"
  virtual Device device() const = 0;
  // One line for tables and logs: the name and what it runs on ("cpu avx512vnni, 16 threads").
  virtual std::string describe() const = 0;
  // Whether `op` runs weights of w's format (and bit width) on this backend.
  virtual bool supports(Op op, const QWeight& w) const = 0;
  // Facts for tables and JSON: ("isa", "avx512vnni"), ("threads", "16"), ...
  virtual std::vector<std::pair<std::string, std::string>> facts() const { return {}; }
  // The fact named `key`, or empty.
  std::string fact(const std::string& key) const;
  // The device's ceilings, measured now, for roofline percentages (moeflux bench): memory read
  // rate (GB/s) and peak f32 FMA rate (GFLOP/s); 0 where not measured.
  struct Ceilings {
    double read_gbs = 0, fma_gflops = 0;
    double h2d_gbs = 0;  // pinned host-to-device copies (a GPU backend)
  };
  virtual Ceilings measure_ceilings() { return {}; }
  // A/B levers: pairs of equivalent code paths (the same results) whose speed depends on the
  // machine, kept so that either can be measured again (moeflux bench --alternate NAME). Their
  // names; whether one is on; setting one (not while ops run). Error for an unknown name.
  virtual std::vector<std::string> ab_switches() const { return {}; }
  virtual bool ab_switch(const std::string& name) const;
  virtual void set_ab_switch(const std::string& name, bool on);

  // Per-stage device time of the ops (bench --profile): while on, each op's work is timed by
  // stage ("attention", "router", "experts", ...) and kernel launches are counted; steps run
  // unrecorded. stage_times() returns the totals since the last call and resets them.
  struct StageTimes {
    std::vector<std::pair<std::string, double>> seconds;  // by stage, in first-seen order
    int64_t launches = 0;
  };
  virtual void set_stage_profiling(bool on) {}
  virtual StageTimes stage_times() { return {}; }

  // --- Lifecycle ---
  // Whether prepare_weight rewrites weight bytes in place when it may (a loader then gives it
  // a private writable copy where it can: a resident pack).
  virtual bool rewrites_weights() const { return false; }
  // Prepares a weight as a model loads: n_stack matrices of w's shape stacked from w.data (the
  // experts of a stacked tensor). rewrite: the bytes are a private writable copy not yet
  // prepared (false: only the view is adjusted, e.g. a tied tensor's second view). Returns
  // whether w is now in the backend's own layout.
  virtual bool prepare_weight(QWeight& w, int64_t n_stack, bool rewrite) const;
  // The rewrite each streamed record of `moe`'s experts goes through after its read, or none.
  // all_cached: the expert cache holds every record of the pack (each is read once).
  virtual RecordTransform expert_record_transform(const MoeSpec& moe, bool all_cached) const;
  virtual std::unique_ptr<LayerState> make_state(const GqaSpec& a) const;
  virtual std::unique_ptr<LayerState> make_state(const MlaSpec& a) const;
  virtual std::unique_ptr<LayerState> make_state(const GdnSpec& a) const;
  // Activation memory for at least `floats` floats on device().
  virtual std::unique_ptr<ActBuffer> alloc(size_t floats) const;
  // Copies x to host memory (x.size() floats).
  virtual void to_host(Act x, float* out) const;
  // Copies x.size() floats from host memory into x.
  virtual void from_host(const float* in, Act x) const;

  // The Engine brackets each step (embed .. logits) with these, so that a backend can prepare
  // the step's state (cache room) and record a step's ops to replay them in later steps of the
  // same shape (CUDA graphs). end_step(false): the step threw. Default: nothing.
  virtual void begin_step(const StepInfo& step) {}
  virtual void end_step(bool ok) {}

  // --- Ops (rows of an Act are tokens) ---
  // out (T, dim) = rows ids of the embedding table.
  virtual void embed(const QWeight& table, std::span<const int32_t> ids, Act out) = 0;
  // x += y when y is given, then h = rmsnorm(x) * w, row by row. h may be x.
  virtual void add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) = 0;
  // x += y.
  virtual void add(Act x, Act y) = 0;
  // Rotate-half RoPE of the first t.rot_dim values of every head_dim-wide head of each row;
  // row r is at position pos0 + r.
  virtual void rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) = 0;
  // ys[i] (T, ws[i]->rows) = x (T, cols) W_i^T for weights sharing x.
  virtual void matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) = 0;
  // The mixers: x (R, dim) normed inputs of one or more sequences (seqs: their rows, in order,
  // covering [0, R) without gaps); out (R, dim). Each sequence's rows attend to its own state, to which they are
  // appended. The projections run once over all rows, so that a step of many sequences reads
  // each weight once.
  virtual void gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) = 0;
  virtual void mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) = 0;
  virtual void gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) = 0;
  // The FFNs: x (T, dim) -> out (T, dim).
  virtual void swiglu(const SwiGlu& s, Act x, Act out) = 0;
  virtual void moe(const MoeSpec& m, Act x, Act out) = 0;
  // logits (T, head.rows) in host memory = x (T, dim) head^T.
  virtual void logits(const QWeight& head, Act x, float* logits) = 0;
  // A head pass whose logits stay with the backend, for a sampler that reads few of them: the
  // n (1 .. head.rows) largest logits of each row of x (T, dim) head^T into vals and ids (T, n)
  // in host memory, each row's in logit_order_key's order. The pass is kept as number `pass` (replacing
  // the one of that number) at least until the next step begins. Default: logits() on the host.
  virtual void logits_top(const QWeight& head, Act x, int64_t n, int pass, float* vals, int32_t* ids);
  // Logits of row `row` of kept pass `pass` in host memory: out[i] that of token ids[i], or with
  // no ids the whole row (head.rows floats). Error for a pass or row not kept.
  virtual void kept_logits(int pass, int64_t row, std::span<const int32_t> ids, float* out);

 private:
  struct KeptPass {
    std::vector<float> logits;  // (rows, cols)
    int64_t rows = 0, cols = 0;
  };
  std::vector<KeptPass> kept_;  // the default logits_top's passes
};

// The order of logits a top list follows: larger first, equal ones (+0 and -0 too) by the
// lower id, NaN after every number. Its 64-bit key (larger: earlier), unique for ids < 2^32.
uint64_t logit_order_key(float v, int32_t id);
// The n largest of row (V logits) in logit_order into vals and ids (n <= V).
void top_logits_host(const float* row, int64_t V, int64_t n, float* vals, int32_t* ids);

}  // namespace moeflux
