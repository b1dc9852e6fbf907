// The CPU backend: the optimised ops of cpu_ops.h (AVX-512 / AVX2 / scalar kernels chosen at
// run time, split over a thread pool) behind the Backend interface, with every CPU decision
// inside it: the instruction set, the thread count, the group-lane weight layout, fused
// decode regions.
#pragma once
#include "backend/backend.h"
#include "backend/cpu/cpu_options.h"

#include <memory>

namespace moeflux {

class CpuBackend final : public Backend {
 public:
  // Applies opt.threads and opt.isa to the CPU ops (one level and one pool per process).
  // Error for an instruction set the CPU lacks or a bad thread count.
  explicit CpuBackend(const CpuOptions& opt = {});
  const char* name() const override { return "cpu"; }
  Device device() const override { return Device::Host; }
  std::string describe() const override;
  bool supports(Op op, const QWeight& w) const override;
  // isa, threads (the pool's size), threads_running (those that run chunks: at most one per CPU).
  std::vector<std::pair<std::string, std::string>> facts() const override;
  // On as many threads as the ops use.
  Ceilings measure_ceilings() override;
  // The tuning switches (backend/cpu/tuning_switch.h).
  std::vector<std::string> ab_switches() const override;
  bool ab_switch(const std::string& name) const override;
  void set_ab_switch(const std::string& name, bool on) override;
  const CpuOptions& options() const { return opt_; }

  bool rewrites_weights() const override;
  bool prepare_weight(QWeight& w, int64_t n_stack, bool rewrite) const override;
  RecordTransform expert_record_transform(const MoeSpec& moe, bool all_cached) const override;
  // CpuOptions::fast_prefill: two digits in the tiles of a step where a sequence feeds more
  // than one token.
  void begin_step(const StepInfo& step) override;
  void end_step(bool ok) override;

  void embed(const QWeight& table, std::span<const int32_t> ids, Act out) override;
  void add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) override;
  void add(Act x, Act y) override;
  void rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) override;
  void matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) override;
  void gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void swiglu(const SwiGlu& s, Act x, Act out) override;
  void moe(const MoeSpec& m, Act x, Act out) override;
  void logits(const QWeight& head, Act x, float* logits) override;

 private:
  CpuOptions opt_;
  std::shared_ptr<void> read_buffer_;  // the read ceiling's buffer, kept from one measurement to the next
};

}  // namespace moeflux
