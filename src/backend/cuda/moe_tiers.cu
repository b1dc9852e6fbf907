// The routed experts a pack streams, over the GPU expert cache and the CPU (--gpu-expert-cache,
// --moe-misses, --cpu-moe-layers). After the router, the step's experts split three ways:
//   hits, in device slots, compute at once;
//   misses copied into slots (copy stream) compute once their copies are in;
//   misses the CPU computes, from the host cache's records, while the GPU works; their rows
//   go up to the device and into y before the combine.
// Results do not depend on the split beyond the CPU's float rounding.
#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/expert_records.cuh"
#include "backend/cuda/kernels.cuh"
#include "core/byte_budget.h"
#include "core/error.h"

namespace moeflux {

using namespace cuda;

GpuExperts& CudaBackend::gpu_experts(const MoeSpec& m, size_t extent) {
  if (!gpu_experts_) {
    if (opt_.expert_cache.empty())
      fail("cuda backend: --moe-misses ", opt_.moe_misses == MoeMisses::Cpu ? "cpu" : "auto",
           " needs a GPU expert cache (--gpu-expert-cache)");
    // Slots as large as this layer's largest record (every MoE layer of a model has the same).
    extent = (extent + 255) / 256 * 256;
    size_t free = 0, total = 0;
    MF_CUDA(cudaMemGetInfo(&free, &total));
    const uint64_t all = m.source->total_bytes() ? m.source->total_bytes() : uint64_t(m.n_experts) * extent;
    const uint64_t reserve = uint64_t(2) << 30;  // activations, the dense weights still to mirror
    const uint64_t spare = free > reserve ? uint64_t(double(free - reserve) * 0.8) : 0;
    const uint64_t budget = parse_byte_budget("--gpu-expert-cache", opt_.expert_cache, all, std::min(all, spare));
    const int64_t slots = int64_t(budget / extent);
    if (slots < 1)
      fail("--gpu-expert-cache ", opt_.expert_cache, ": ", budget, " bytes hold no expert record (", extent, " bytes)");
    gpu_experts_ = std::make_unique<GpuExperts>(slots, extent, int(m.n_experts), stream_);
  }
  if (extent > gpu_experts_->extent())
    fail(m.prefix, ": expert records of ", extent, " bytes do not fit the GPU expert cache's slots of ",
         gpu_experts_->extent());
  return *gpu_experts_;
}

void CudaBackend::moe_cached(const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev,
                             const PairTiles& pt, float* h, float* y) {
  const int64_t K = m.n_experts_active, E = m.n_experts, hidden = m.experts[0].gate.rows;
  const int layer = m.source_layer;
  const bool all_cpu = layer < opt_.cpu_moe_layers, may_cpu = all_cpu || opt_.moe_misses != MoeMisses::Copy;
  std::vector<int32_t> ids(size_t(T * K));
  std::vector<float> xh;
  MF_CUDA(cudaMemcpyAsync(ids.data(), ids_dev, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  if (may_cpu) {
    xh.resize(size_t(T * m.dim));
    MF_CUDA(cudaMemcpyAsync(xh.data(), x, xh.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  MF_CUDA(cudaStreamSynchronize(stream_));
  release_layer();  // the previous layer's work is done
  if (gpu_experts_) gpu_experts_->begin_step();
  std::vector<int32_t> per_expert(size_t(E), 0);  // routed rows
  for (int32_t e : ids) ++per_expert[size_t(e)];
  std::vector<int32_t> used, rows;  // the experts routed to, ascending, and their rows
  std::vector<size_t> bytes;
  size_t extent = 0;
  for (int32_t e = 0; e < int32_t(E); ++e) {
    if (per_expert[size_t(e)] == 0) continue;
    used.push_back(e), rows.push_back(per_expert[size_t(e)]);
    bytes.push_back(record_extent(m.experts[size_t(e)], m.record_base[size_t(e)]));
    extent = std::max(extent, bytes.back());
  }

  tiers_.routed += used.size();
  std::vector<int32_t> on_gpu, on_cpu;
  std::vector<size_t> gpu_bytes, cpu_bytes;
  if (all_cpu) {
    on_cpu = used, cpu_bytes = bytes;
  } else {
    GpuExperts& g = gpu_experts(m, extent);
    std::vector<bool> cpu(used.size(), false);
    if (opt_.moe_misses != MoeMisses::Copy) {
      std::vector<size_t> miss, miss_bytes;
      std::vector<int32_t> miss_rows;
      for (size_t i = 0; i < used.size(); ++i)
        if (!g.resident(layer, used[i])) miss.push_back(i), miss_bytes.push_back(bytes[i]), miss_rows.push_back(rows[i]);
      const std::vector<bool> split = opt_.moe_misses == MoeMisses::Cpu ? std::vector<bool>(miss.size(), true)
                                                                         : split_misses(miss_bytes, miss_rows, rates_);
      for (size_t j = 0; j < miss.size(); ++j) cpu[miss[j]] = split[j];
    }
    for (size_t i = 0; i < used.size(); ++i) {
      (cpu[i] ? on_cpu : on_gpu).push_back(used[i]);
      (cpu[i] ? cpu_bytes : gpu_bytes).push_back(bytes[i]);
    }
  }

  // The GPU's share: hits at once, copied misses after their copies. A step that uses more
  // experts than the cache has slots goes in groups of at most that many.
  std::vector<GpuExperts::Placed>& placed = held_;  // their host records stay held until release_layer()
  if (!on_gpu.empty()) {
    GpuExperts& g = *gpu_experts_;
    const int fmt_gu = cuda_fmt(m.experts[0].gate), fmt_d = cuda_fmt(m.experts[0].down);
    const DW gate0 = dw_view(m.experts[0].gate), up0 = dw_view(m.experts[0].up), down0 = dw_view(m.experts[0].down);
    const bool wide_gu = wide_ && wide_rows(gate0) && wide_rows(up0), wide_d = wide_ && wide_rows(down0);
    const int64_t vec_gu = vec_rows(up0) ? vec_group(gate0) : 0, vec_d = vec_group(down0);
    const size_t group = size_t(g.slots()), groups = (on_gpu.size() + group - 1) / group;
    const size_t per_table = size_t(3 * E);
    DW* host = pinned_tables_.get<DW>(groups * 2 * per_table);  // [group][hits, misses][3E]
    Scratch sc(*pool_);
    DW* tables = sc.get<DW>(groups * 2 * per_table);
    for (size_t gi = 0; gi < groups; ++gi) {
      const size_t i0 = gi * group, n = std::min(group, on_gpu.size() - i0);
      const std::span<const int32_t> part(on_gpu.data() + i0, n);
      placed.push_back(g.place(*m.source, layer, part, std::span<const size_t>(gpu_bytes.data() + i0, n),
                               /*background=*/false, /*hold=*/true, /*scan=*/scan_insert_ && T * K >= 2 * E));
      const GpuExperts::Placed& p = placed.back();
      for (size_t j = 0; j < n; ++j) {
        ++(p.hit[j] ? tiers_.hits : tiers_.copied);
        if (!p.hit[j]) tiers_.miss_bytes += gpu_bytes[i0 + j];
      }
      DW* ht[2] = {host + (2 * gi) * per_table, host + (2 * gi + 1) * per_table};
      std::fill(ht[0], ht[0] + 2 * per_table, DW{});
      bool any[2] = {false, false};
      for (size_t j = 0; j < n; ++j) {
        const int32_t e = part[j];
        const SwiGlu d = rebased(m.experts[size_t(e)], m.record_base[size_t(e)], p.at[j]);
        const int t = p.hit[j] ? 0 : 1;
        ht[t][size_t(3 * e)] = on_device(gate0, d.gate);
        ht[t][size_t(3 * e + 1)] = on_device(up0, d.up);
        ht[t][size_t(3 * e + 2)] = on_device(down0, d.down);
        any[t] = true;
      }
      for (int t = 0; t < 2; ++t) {
        if (!any[t]) continue;
        if (t == 1) g.wait_copies();
        DW* dt = tables + (2 * gi + size_t(t)) * per_table;
        MF_CUDA(cudaMemcpyAsync(dt, ht[t], per_table * sizeof(DW), cudaMemcpyHostToDevice, stream_));
        experts_gate_up(dt, fmt_gu, wide_gu, vec_gu, hidden, m.dim, x, int32_t(K), pt, h, *pool_, stream_);
        experts_down(dt, fmt_d, wide_d, vec_d, hidden, m.dim, h, int32_t(K), pt, y, *pool_, stream_);
      }
    }
  }
  // --moe-misses cpu: the CPU's misses go into slots too, for later steps, without this step
  // waiting for them (at most a cache's worth).
  if (!on_cpu.empty() && !all_cpu && opt_.moe_misses == MoeMisses::Cpu) {
    const size_t n = std::min(on_cpu.size(), size_t(gpu_experts_->slots()));
    placed.push_back(gpu_experts_->place(*m.source, layer, std::span<const int32_t>(on_cpu.data(), n),
                                         std::span<const size_t>(cpu_bytes.data(), n), /*background=*/true));
  }
  // (Not for auto's split: the next layer's split decides which of its misses are copied.)
  if (prefill_prefetch_ && opt_.moe_misses != MoeMisses::Auto && gpu_experts_ && m.next &&
      m.next->source == m.source && T * K >= 2 * E && m.next->source_layer >= opt_.cpu_moe_layers)
    prefetch_layer(*m.next);
  for (size_t b : cpu_bytes) tiers_.miss_bytes += b;
  if (!on_cpu.empty()) moe_on_host(m, xh, ids, on_cpu, cpu_bytes, y);
  // Within a step the next streamed layer's entry, which waits for the stream anyway, frees the
  // tables, the rows and the held records (release_layer); outside one they are freed now.
  if (!in_step_) {
    MF_CUDA(cudaStreamSynchronize(stream_));
    release_layer();
  }
}

void CudaBackend::release_layer() {
  held_.clear();
  if (gpu_experts_) {
    const auto [s, b] = gpu_experts_->take_copy_time();
    rates_.add_h2d(double(b), s);
  }
}

void CudaBackend::prefetch_layer(const MoeSpec& next) {
  GpuExperts& g = *gpu_experts_;
  const size_t cap = size_t(g.slots() / 2);
  std::vector<int32_t> experts;
  std::vector<size_t> bytes;
  for (int32_t e = 0; e < int32_t(next.n_experts) && experts.size() < cap; ++e) {
    if (g.resident(next.source_layer, e)) continue;
    const size_t b = record_extent(next.experts[size_t(e)], next.record_base[size_t(e)]);
    if (b > g.extent()) return;
    experts.push_back(e), bytes.push_back(b);
  }
  if (experts.empty()) return;
  try {
    g.place(*next.source, next.source_layer, experts, bytes, /*background=*/true, /*hold=*/true, /*scan=*/scan_insert_);
    tiers_.prefetched += experts.size();
  } catch (const Error&) {
    // Advisory: the failed record is out of the cache, and the layer's own read reports it.
  }
}

void CudaBackend::moe_on_host(const MoeSpec& m, const std::vector<float>& x, const std::vector<int32_t>& ids,
                              std::span<const int32_t> on_cpu, std::span<const size_t> bytes, float* y) {
  const int64_t K = m.n_experts_active, dim = m.dim;
  const auto t0 = std::chrono::steady_clock::now();
  // Rows of x gathered per expert, and y's rows (pair indices) in the same order.
  std::vector<int32_t> slot(size_t(m.n_experts), -1);  // expert -> its index in on_cpu
  for (size_t j = 0; j < on_cpu.size(); ++j) slot[size_t(on_cpu[j])] = int32_t(j);
  std::vector<size_t> first(on_cpu.size() + 1, 0);  // counts, then where each expert's rows start
  for (int32_t e : ids)
    if (slot[size_t(e)] >= 0) ++first[size_t(slot[size_t(e)]) + 1];
  for (size_t j = 0; j < on_cpu.size(); ++j) first[j + 1] += first[j];
  const size_t n = first.back();
  std::vector<int32_t> pair_rows(n);
  std::vector<size_t> fill(first.begin(), first.end() - 1);
  for (size_t p = 0; p < ids.size(); ++p)
    if (const int32_t j = slot[size_t(ids[p])]; j >= 0) pair_rows[fill[size_t(j)]++] = int32_t(p);
  // Pinned: the computed rows, then their pair indices.
  float* out = pinned_rows_.get<float>(n * size_t(dim) + n);
  int32_t* out_rows = reinterpret_cast<int32_t*>(out + n * size_t(dim));
  std::copy(pair_rows.begin(), pair_rows.end(), out_rows);
  std::vector<float> xg;
  double work = 0;
  const size_t win = std::max<size_t>(1, m.source->window(m.source_layer));
  for (size_t i0 = 0; i0 < on_cpu.size(); i0 += win) {
    const std::span<const int32_t> part = on_cpu.subspan(i0, std::min(win, on_cpu.size() - i0));
    std::vector<ExpertRef> refs = m.source->acquire(m.source_layer, part);
    for (size_t jj = 0; jj < part.size(); ++jj) {
      const size_t j = i0 + jj;
      const int32_t e = on_cpu[j];
      const int64_t r = int64_t(first[j + 1] - first[j]);
      xg.resize(size_t(r * dim));
      for (int64_t i = 0; i < r; ++i)
        std::copy_n(x.data() + size_t(pair_rows[first[j] + size_t(i)] / K) * size_t(dim), dim, xg.data() + i * dim);
      const SwiGlu s = rebased(m.experts[size_t(e)], m.record_base[size_t(e)], refs[jj].wait());
      host_->swiglu(s, Act{xg.data(), r, dim, Device::Host}, Act{out + first[j] * size_t(dim), r, dim, Device::Host});
      refs[jj].release();
      work += double(bytes[j]) * double(r);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rates_.add_cpu(work, secs);
  tiers_.cpu += on_cpu.size(), tiers_.cpu_rows += n, tiers_.cpu_s += secs, tiers_.cpu_work += work;
  Scratch sc(*pool_);
  float* dev = sc.get<float>(n * size_t(dim) + n);
  MF_CUDA(cudaMemcpyAsync(dev, out, (n * size_t(dim) + n) * sizeof(float), cudaMemcpyHostToDevice, stream_));
  scatter_rows(dev, reinterpret_cast<const int32_t*>(dev + n * size_t(dim)), int64_t(n), dim, y, stream_);
}

}  // namespace moeflux
