// CudaBackend's declaration (CUDA types inside; the rest of the code sees only
// backend/cuda/cuda_backend.h). Ops run on one stream; host-facing calls (to_host, logits)
// synchronise with it. Weights stay host views (QWeight) and are mirrored to the device on first
// use; the experts of a MoE layer once as a table of device views (DW) per MoeSpec.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_options.h"
#include "backend/cuda/device_memory.cuh"
#include "backend/cuda/dweight.cuh"

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
  // MLA and GatedDeltaNet run on the host (the cpu backend over host copies of x and out, the
  // state in host memory) until they have kernels of their own.
  void mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void swiglu(const SwiGlu& s, Act x, Act out) override;
  void moe(const MoeSpec& m, Act x, Act out) override;
  void logits(const QWeight& head, Act x, float* logits) override;

  cudaStream_t stream() const { return stream_; }

 private:
  struct ExpertTable {
    const uint8_t* experts_data = nullptr;  // the spec's experts[0].gate.data when built
    cuda::DW* table = nullptr;              // (n_experts, 3) on the device
    int fmt_gate_up = cuda::kNoFmt, fmt_down = cuda::kNoFmt;
  };
  // w's view with device pointers (mirroring its bytes on first use).
  cuda::DW dw(const QWeight& w) const;
  const float* dvec(const std::vector<float>& v) const;
  const ExpertTable& expert_table(const MoeSpec& m);
  void swiglu_rows(const SwiGlu& s, const float* x, int64_t T, float* out);
  void moe_streamed(const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev, const int32_t* sorted,
                    const int32_t* tiles, const int32_t* n_tiles, int64_t tiles_max, float* h, float* y);
  void host_mixer(Act x, Act out, const std::function<void(Act, Act)>& run);

  CudaOptions opt_;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<cuda::DevicePool> pool_;
  mutable cuda::Mirror mirror_;
  std::unique_ptr<Backend> host_;
  std::unordered_map<const MoeSpec*, ExpertTable> tables_;
};

}  // namespace moeflux
