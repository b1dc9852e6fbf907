// CudaBackend: the device, its stream and memory, weights as device views, and the per-token
// ops. The blocks (attention, FFNs, MoE): cuda_blocks.cu.
#include <algorithm>
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/tuning_switch.h"
#include "backend/cuda/check.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/kv_cache.cuh"

namespace moeflux {

using namespace cuda;

bool cuda_device_present(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error of a failed runtime start
    return false;
  }
  return true;
}

std::shared_ptr<Backend> make_cuda_backend(const CudaOptions& opt) {
  std::string why;
  if (!cuda_device_present(&why)) fail("--backend cuda: no usable GPU here (", why, ")");
  return std::make_shared<CudaBackend>(opt);
}

namespace {

class DeviceActBuffer final : public ActBuffer {
 public:
  DeviceActBuffer(std::shared_ptr<DevicePool> pool, size_t floats)
      : ActBuffer(static_cast<float*>(pool->get(std::max<size_t>(floats, 1) * sizeof(float))), floats, Device::Cuda),
        pool_(std::move(pool)) {}
  ~DeviceActBuffer() override { pool_->put(data_); }

 private:
  std::shared_ptr<DevicePool> pool_;
};

bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
int8_t log2i(int64_t v) { return int8_t(__builtin_ctzll(uint64_t(v))); }

uint8_t stype_of(DType t) { return t == DType::F32 ? kSF32 : t == DType::F16 ? kSF16 : kSBF16; }

}  // namespace

size_t scale_bytes(const QWeight& w) {
  if (w.format == WFormat::Affine) return size_t(w.rows * (w.cols / w.group_size)) * dtype_size(w.sdtype);
  if (w.format == WFormat::Fp8Block)
    return size_t(((w.rows + w.block_rows - 1) / w.block_rows) * ((w.cols + w.block_cols - 1) / w.block_cols)) *
           dtype_size(w.sdtype);
  return 0;
}

int cuda_fmt(const QWeight& w) {
  switch (w.format) {
    case WFormat::Dense:
      return w.dtype == DType::F32 ? kF32 : w.dtype == DType::F16 ? kF16 : w.dtype == DType::BF16 ? kBF16 : kNoFmt;
    case WFormat::Affine: {
      if (w.group_lanes || w.group_size < 8 || !pow2(w.group_size) || w.cols % w.group_size) return kNoFmt;
      const int codes[] = {kNoFmt, kNoFmt, kQ2, kQ3, kQ4, kQ5, kQ6, kNoFmt, kQ8};
      return w.bits >= 0 && w.bits <= 8 ? codes[w.bits] : kNoFmt;
    }
    case WFormat::Fp8Block:
      return w.block_cols < 8 || !pow2(w.block_cols) || !pow2(w.block_rows) || w.cols % 8 ? kNoFmt : kFP8;
  }
  return kNoFmt;
}

CudaBackend::CudaBackend(const CudaOptions& opt) : opt_(opt), pool_(std::make_shared<DevicePool>()) {
  MF_CUDA(cudaSetDevice(opt.device));
  MF_CUDA(cudaGetDeviceProperties(&prop_, opt.device));
  MF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  host_ = std::make_unique<CpuBackend>();
  step_graphs_ = env_on_off("MOEFLUX_CUDA_GRAPHS", step_graphs_);
  device_gdn_ = env_on_off("MOEFLUX_CUDA_DEVICE_GDN", device_gdn_);
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  for (auto& [m, t] : tables_) cudaFree(t.table);
  for (auto& [m, t] : tiers_by_spec_)  // null: a layer refused a tier
    if (t) cudaFree(t->table), cudaFreeHost(t->shadow), cudaFreeHost(t->ids);
  for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g.exec), cudaFree(g.logits);
  for (const Timed& t : timed_) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
  for (const KeptPass& k : kept_) cudaFree(k.own);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaFreeHost(staging_);
  cudaFree(step_in_);
  cudaStreamDestroy(stream_);
}

namespace {
std::string fixed(double v, int digits) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
}  // namespace

std::string CudaBackend::describe() const {
  return cat("cuda ", prop_.name, " (sm_", prop_.major, prop_.minor, ", ", prop_.multiProcessorCount, " SMs, ",
             prop_.totalGlobalMem >> 30, " GiB)");
}

std::vector<std::pair<std::string, std::string>> CudaBackend::facts() const {
  char mirrored[32];
  std::snprintf(mirrored, sizeof mirrored, "%.2f", double(mirror_.bytes()) / 1e9);
  std::vector<std::pair<std::string, std::string>> f = {{"device", prop_.name},
                                                        {"sm", cat(prop_.major, prop_.minor)},
                                                        {"multiprocessors", cat(prop_.multiProcessorCount)},
                                                        {"memory_gb", cat(prop_.totalGlobalMem / 1000000000)},
                                                        {"mirrored_gb", mirrored}};
  {
    // What the device holds: the dense weights, the expert slots, the activation pool, and the
    // rest (KV caches, the CUDA context) as the difference from what the driver reports in use.
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      const double used = double(total - free) / 1e9, dense = double(mirror_.bytes()) / 1e9;
      const double slots = gpu_experts_ ? double(gpu_experts_->slots()) * double(gpu_experts_->extent()) / 1e9 : 0.0;
      const double pool = double(pool_->held_bytes()) / 1e9;
      f.emplace_back("gpu_memory", cat(fixed(used, 2), " GB in use: ", fixed(dense, 2), " dense + ", fixed(slots, 2),
                                       " expert slots + ", fixed(pool, 2), " activations + ",
                                       fixed(used - dense - slots - pool, 2), " other (KV caches, CUDA context)"));
    } else {
      cudaGetLastError();
    }
  }
  if (tiers_.routed) {
    // The streamed experts' tiers: where the routed experts of the steps were found or computed.
    const double n = double(tiers_.routed);
    const auto pct = [&](uint64_t k) { return fixed(100.0 * double(k) / n, 1); };
    std::string line = cat(tiers_.routed, " routed experts: ", pct(tiers_.hits), "% GPU cache hits, ",
                           pct(tiers_.copied), "% copied and waited for, ", pct(tiers_.cpu), "% on the CPU");
    if (gpu_experts_) {
      const GpuExpertStats st = gpu_experts_->stats();
      line += cat("; ", gpu_experts_->slots(), " slots of ", fixed(double(gpu_experts_->extent()) / 1e6, 1), " MB, ",
                  fixed(double(st.bytes_copied) / 1e9, 2), " GB copied (", fixed(double(st.bytes_staged) / 1e9, 2),
                  " GB staged), waited-for copies at ",
                  fixed(st.copy_s > 0 ? double(st.bytes_timed) / st.copy_s / 1e9 : 0.0, 1), " GB/s, ",
                  fixed(st.copy_wait_s, 3), " s waiting for host records, ", tiers_.prefetched, " prefetched for prefill");
      f.emplace_back("gpu_copied_bytes", cat(st.bytes_copied));
    }
    f.emplace_back("gpu_expert_cache", line);
    f.emplace_back("gpu_miss_bytes", cat(tiers_.miss_bytes));
  }
  if (tier_reads_.small_steps) {
    f.emplace_back("device_tables", cat(tier_reads_.small_steps, " layer steps read a device table with no host round trip; ",
                                        tier_reads_.host_reads, " experts read from host memory; admitting a step's experts took ",
                                        fixed(tier_reads_.admits ? 1e6 * tier_reads_.admit_s / double(tier_reads_.admits) : 0.0, 1),
                                        " us of host time"));
  }
  if (opt_.moe_misses == MoeMisses::Auto) {
    std::string line;
    const char* names[2] = {"steps of at most 16 rows", "steps of 17 to 64 rows"};
    static_assert(kTierRows == 16 && kAutoRows == 64);
    for (int c = 0; c < 2; ++c) {
      const ArmChoice& a = auto_arms_[c];
      if (a.steps(0) + a.steps(1) + auto_quiet_[c] == 0) continue;
      line += cat(line.empty() ? "" : "; ", names[c], ": device tables ", a.steps(0), " steps, copy / CPU split ",
                  a.steps(1), " steps, the split's time a row over the tables' ", fixed(a.ratio(), 3), ": ",
                  a.chosen() ? "split" : "tables", "; ", auto_quiet_[c], " steps without misses took the tables");
    }
    if (!line.empty()) f.emplace_back("auto_choice", line);
  }
  if (tiers_.cpu) {
    f.emplace_back("cpu_experts", cat(tiers_.cpu, " experts, ", tiers_.cpu_rows, " rows, ", fixed(tiers_.cpu_s, 3), " s, ",
                                      fixed(tiers_.cpu_s > 0 ? tiers_.cpu_work / tiers_.cpu_s / 1e9 : 0.0, 1),
                                      " GB/s of weights x rows"));
  }
  return f;
}

bool CudaBackend::supports(Op op, const QWeight& w) const { return cuda_fmt(w) != kNoFmt; }

DW dw_view(const QWeight& w) {
  DW d;
  d.fmt = cuda_fmt(w);
  if (d.fmt == kNoFmt) fail("cuda backend: weights ", w.describe(), " are not supported on the device");
  d.rows = w.rows, d.cols = w.cols, d.row_bytes = int64_t(w.row_bytes());
  d.stype = stype_of(w.sdtype);
  if (w.format == WFormat::Affine) {
    d.group = w.group_size, d.scale_cols = int32_t(w.cols / w.group_size), d.group_shift = log2i(w.group_size);
  } else if (w.format == WFormat::Fp8Block) {
    d.block_rows = w.block_rows, d.block_cols = w.block_cols;
    d.bc_shift = log2i(w.block_cols), d.br_shift = log2i(w.block_rows);
    d.scale_cols = int32_t((w.cols + w.block_cols - 1) / w.block_cols);
  }
  return d;
}

bool CudaBackend::ab_switch(const std::string& name) const {
  if (name == "wide_rows") return wide_;
  if (name == "prefill_prefetch") return prefill_prefetch_;
  if (name == "step_graphs") return step_graphs_;
  if (name == "device_tables") return device_tables_;
  if (name == "tc_prefill") return tc_prefill_;
  if (name == "scan_insert") return scan_insert_;
  if (name == "flash_attention") return flash_attention_;
  return Backend::ab_switch(name);
}

void CudaBackend::set_ab_switch(const std::string& name, bool on) {
  if (name == "wide_rows") wide_ = on;
  else if (name == "prefill_prefetch") prefill_prefetch_ = on;
  else if (name == "step_graphs") step_graphs_ = on;
  else if (name == "device_tables") device_tables_ = on;
  else if (name == "tc_prefill") tc_prefill_ = on;
  else if (name == "scan_insert") scan_insert_ = on;
  else if (name == "flash_attention") flash_attention_ = on;
  else Backend::set_ab_switch(name, on);
}

DW CudaBackend::dw(const QWeight& w) const {
  DW d = dw_view(w);
  d.wide = wide_ && wide_rows(d);
  d.data = static_cast<const uint8_t*>(mirror_.get(w.data, w.data_bytes()));
  if (w.format == WFormat::Affine) {
    d.scales = static_cast<const uint8_t*>(mirror_.get(w.scales, scale_bytes(w)));
    d.biases = static_cast<const uint8_t*>(mirror_.get(w.biases, scale_bytes(w)));
  } else if (w.format == WFormat::Fp8Block) {
    d.scales = static_cast<const uint8_t*>(mirror_.get(w.block_scales, scale_bytes(w)));
  }
  return d;
}

const float* CudaBackend::dvec(const std::vector<float>& v) const {
  return v.empty() ? nullptr : static_cast<const float*>(mirror_.get(v.data(), v.size() * sizeof(float)));
}

std::unique_ptr<LayerState> CudaBackend::make_state(const GqaSpec& a) const {
  return std::make_unique<KvCacheDev>(a.n_kv_heads * a.head_dim, a.n_kv_heads * a.head_dim, stream_);
}
std::unique_ptr<LayerState> CudaBackend::make_state(const MlaSpec& a) const {
  if (!mla_on_device(a)) return host_->make_state(a);  // run on the host (mla_attention)
  return std::make_unique<KvCacheDev>(a.kv_lora_rank, a.qk_rope_dim, stream_, "c", "k_pe");
}
std::unique_ptr<LayerState> CudaBackend::make_state(const GdnSpec& a) const {
  if (!gdn_on_device(a)) return host_->make_state(a);  // run on the host (gated_delta_net)
  return std::make_unique<GdnStateDev>((a.conv_kernel - 1) * a.conv_dim(), a.n_v_heads * a.k_dim * a.v_dim, stream_);
}

std::unique_ptr<ActBuffer> CudaBackend::alloc(size_t floats) const {
  return std::make_unique<DeviceActBuffer>(pool_, floats);
}

void CudaBackend::to_host(Act x, float* out) const {
  MF_ASSERT(x.device == Device::Cuda);
  MF_CUDA(cudaMemcpyAsync(out, x.data, x.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
}

void CudaBackend::from_host(const float* in, Act x) const {
  MF_ASSERT(x.device == Device::Cuda);
  MF_CUDA(cudaMemcpyAsync(x.data, in, x.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));  // `in` may be a temporary of the caller
}

void CudaBackend::embed(const QWeight& table, std::span<const int32_t> ids, Act out) {
  if (replaying()) return;
  Scratch sc(*pool_);
  const int32_t* d_ids = step_in_;  // a step's ids are staged (begin_step)
  if (!in_step_) {
    int32_t* d = sc.get<int32_t>(ids.size());
    MF_CUDA(cudaMemcpyAsync(d, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    MF_CUDA(cudaStreamSynchronize(stream_));  // ids may be a temporary
    d_ids = d;
  }
  MF_ASSERT(!in_step_ || int64_t(ids.size()) == step_rows_);
  const Stage st(*this, "embed");
  cuda::embed(dw(table), d_ids, int64_t(ids.size()), out.data, stream_);
}

void CudaBackend::add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) {
  if (replaying()) return;
  const Stage st(*this, "norms, residual");
  const float* dw_ = w ? static_cast<const float*>(mirror_.get(w, size_t(x.cols) * sizeof(float))) : nullptr;
  cuda::add_rms_norm(x.data, y ? y->data : nullptr, dw_, eps, h.data, x.rows, x.cols, stream_);
}

void CudaBackend::add(Act x, Act y) {
  if (replaying()) return;
  const Stage st(*this, "norms, residual");
  cuda::add(x.data, y.data, int64_t(x.size()), stream_);
}

void CudaBackend::rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) {
  if (replaying()) return;
  const Stage st(*this, "other");
  const RopeDev r{dvec(t.inv_freq), int32_t(t.rot_dim), t.attn_factor};
  cuda::rope(r, head_dim, pos0, x.data, x.rows, x.cols, stream_);
}

void CudaBackend::matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) {
  MF_ASSERT(ws.size() == ys.size());
  if (replaying()) return;
  const Stage st(*this, "other");
  std::vector<DW> d;
  std::vector<float*> out;
  for (size_t i = 0; i < ws.size(); ++i) d.push_back(dw(*ws[i])), out.push_back(ys[i].data);
  mm(std::span<const DW>(d), x.data, x.rows, std::span<float* const>(out));
}

void CudaBackend::mm(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys) {
  MF_ASSERT(ws.size() == ys.size());
  if (!tc_prefill_ || T < kTcRows) return cuda::matmul(ws, x, T, ys, stream_);
  std::vector<DW> tw, rw;
  std::vector<float*> ty, ry;
  for (size_t i = 0; i < ws.size(); ++i) {
    const bool tc = tc_rows(ws[i]);
    (tc ? tw : rw).push_back(ws[i]), (tc ? ty : ry).push_back(ys[i]);
  }
  if (!tw.empty()) matmul_tc(tw, x, T, ty, *pool_, stream_);
  if (!rw.empty()) cuda::matmul(rw, x, T, ry, stream_);
}

void CudaBackend::mm(const DW& w, const float* x, int64_t T, float* y) {
  float* ys[1] = {y};
  mm(std::span<const DW>(&w, 1), x, T, ys);
}

}  // namespace moeflux
