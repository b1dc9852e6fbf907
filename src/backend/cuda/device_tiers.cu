// DeviceTier (cuda_backend_impl.cuh): the streamed experts of a layer whose records the host
// holds all of, read through one device table of GPU slots and mapped host records. Small steps
// read the table as it is and leave their routed ids for admit_routed(); larger ones place
// their experts first. The table's entries change only through tier_point(), on the compute
// stream.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/expert_records.cuh"
#include "backend/cuda/kernels.cuh"
#include "core/error.h"

namespace moeflux {

using namespace cuda;

namespace {

// The distinct experts of ids, the most routed first (ties: the lower id).
std::vector<int32_t> most_routed(std::span<const int32_t> ids, int64_t n_experts) {
  std::vector<int32_t> count(size_t(n_experts), 0), used;
  for (int32_t e : ids)
    if (e >= 0 && e < n_experts && count[size_t(e)]++ == 0) used.push_back(e);
  std::stable_sort(used.begin(), used.end(), [&](int32_t a, int32_t b) {
    return count[size_t(a)] != count[size_t(b)] ? count[size_t(a)] > count[size_t(b)] : a < b;
  });
  return used;
}

}  // namespace

CudaBackend::DeviceTier* CudaBackend::device_tier(const MoeSpec& m) {
  if (!device_tables_ || opt_.expert_cache.empty()) return nullptr;
  if (auto it = tiers_by_spec_.find(&m); it != tiers_by_spec_.end()) {
    DeviceTier* t = it->second.get();
    if (!t || (t->source == m.source && t->base0 == m.record_base[0])) return t;
  }
  if (mode_ == Mode::Capture) return nullptr;  // made by the eager step before, or not at all
  std::unique_ptr<DeviceTier>& kept = tiers_by_spec_[&m];
  if (kept) {  // another model's spec at this address: its tier goes
    MF_CUDA(cudaStreamSynchronize(stream_));
    std::erase_if(tier_pending_, [&](const auto& p) { return p.first == kept.get(); });
    for (DeviceTier*& t : tiers_by_layer_)
      if (t == kept.get()) t = nullptr;
    cudaFree(kept->table), cudaFreeHost(kept->shadow), cudaFreeHost(kept->ids);
  }
  kept.reset();  // refused until made below (the answer stays for this spec)
  if (opt_.moe_misses == MoeMisses::Cpu || m.source_layer < opt_.cpu_moe_layers || !m.source->holds_all())
    return nullptr;
  const int64_t E = m.n_experts, K = m.n_experts_active;
  const int layer = m.source_layer;
  auto t = std::make_unique<DeviceTier>();
  t->spec = &m, t->source = m.source, t->base0 = m.record_base[0];
  size_t extent = 0;
  for (int64_t e = 0; e < E; ++e) {
    t->bytes.push_back(record_extent(m.experts[size_t(e)], m.record_base[size_t(e)]));
    extent = std::max(extent, t->bytes.back());
  }
  GpuExperts& g = gpu_experts(m, extent);
  g.pin_source(*m.source);
  const DW gate0 = dw_view(m.experts[0].gate), up0 = dw_view(m.experts[0].up), down0 = dw_view(m.experts[0].down);
  t->fmt_gu = cuda_fmt(m.experts[0].gate), t->fmt_d = cuda_fmt(m.experts[0].down);
  t->wide_gu = wide_rows(gate0) && wide_rows(up0), t->wide_d = wide_rows(down0);
  t->vec_gu = vec_rows(up0) ? vec_group(gate0) : 0, t->vec_d = vec_group(down0);
  t->host_views.resize(size_t(3 * E));
  t->on_slot.assign(size_t(E), false);
  // Every record read once; holds_all keeps each at its address, so the references go again.
  std::vector<int32_t> all(static_cast<size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  const size_t win = std::max<size_t>(1, m.source->window(layer));
  for (size_t i0 = 0; i0 < all.size(); i0 += win) {
    const std::span<const int32_t> part(all.data() + i0, std::min(win, all.size() - i0));
    std::vector<ExpertRef> refs = m.source->acquire(layer, part);
    for (size_t j = 0; j < part.size(); ++j) {
      const int32_t e = part[j];
      void* dev = nullptr;
      if (cudaHostGetDevicePointer(&dev, const_cast<uint8_t*>(refs[j].wait()), 0) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;  // not page-locked: the layer takes moe_cached's paths
      }
      const SwiGlu d = rebased(m.experts[size_t(e)], m.record_base[size_t(e)], static_cast<const uint8_t*>(dev));
      t->host_views[size_t(3 * e)] = on_device(gate0, d.gate);
      t->host_views[size_t(3 * e + 1)] = on_device(up0, d.up);
      t->host_views[size_t(3 * e + 2)] = on_device(down0, d.down);
    }
  }
  MF_CUDA(cudaHostAlloc(&t->ids, size_t(kTierRows * K) * sizeof(int32_t), cudaHostAllocMapped));
  void* ids_dev = nullptr;
  if (cudaHostGetDevicePointer(&ids_dev, t->ids, 0) != cudaSuccess) {
    cudaGetLastError();
    cudaFreeHost(t->ids);
    return nullptr;  // the router cannot write the ids: the layer takes moe_cached's paths
  }
  t->ids_mapped = static_cast<int32_t*>(ids_dev);
  MF_CUDA(cudaMalloc(&t->table, size_t(3 * E) * sizeof(DW)));
  MF_CUDA(cudaHostAlloc(&t->shadow, size_t(3 * E) * sizeof(DW), cudaHostAllocDefault));
  std::copy(t->host_views.begin(), t->host_views.end(), t->shadow);
  MF_CUDA(cudaMemcpyAsync(t->table, t->shadow, size_t(3 * E) * sizeof(DW), cudaMemcpyHostToDevice, stream_));
  for (int32_t e = 0; e < int32_t(E); ++e)  // records already in slots: switched once their copies are done
    if (g.resident(layer, e)) tier_pending_.emplace_back(t.get(), e);
  if (tiers_by_layer_.size() <= size_t(layer)) tiers_by_layer_.resize(size_t(layer) + 1, nullptr);
  tiers_by_layer_[size_t(layer)] = t.get();
  g.set_evict_hook([this](int l, int e) { tier_evicted(l, e); });
  kept = std::move(t);
  return kept.get();
}

void CudaBackend::tier_point(DeviceTier& t, int32_t e, bool slot) {
  const MoeSpec& m = *t.spec;
  const size_t i = size_t(3 * e);
  if (slot) {
    const uint8_t* at = gpu_experts_->slot_data(m.source_layer, e);
    if (!at) return;  // evicted meanwhile: its entry stays on the host record
    const SwiGlu d = rebased(m.experts[size_t(e)], m.record_base[size_t(e)], at);
    t.shadow[i] = on_device(t.host_views[i], d.gate);
    t.shadow[i + 1] = on_device(t.host_views[i + 1], d.up);
    t.shadow[i + 2] = on_device(t.host_views[i + 2], d.down);
  } else {
    std::copy_n(t.host_views.begin() + ptrdiff_t(i), 3, t.shadow + i);
  }
  t.on_slot[size_t(e)] = slot;
  MF_CUDA(cudaMemcpyAsync(t.table + i, t.shadow + i, 3 * sizeof(DW), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::tier_evicted(int layer, int expert) {
  DeviceTier* t = size_t(layer) < tiers_by_layer_.size() ? tiers_by_layer_[size_t(layer)] : nullptr;
  if (!t) return;
  std::erase(tier_pending_, std::pair<DeviceTier*, int32_t>(t, expert));
  if (t->on_slot[size_t(expert)]) tier_point(*t, expert, false);
}

void CudaBackend::switch_filled() {
  if (tier_pending_.empty() || !gpu_experts_ || !gpu_experts_->copies_idle()) return;
  for (const auto& [t, e] : tier_pending_)
    if (!t->on_slot[size_t(e)]) tier_point(*t, e, true);
  tier_pending_.clear();
}

void CudaBackend::tier_keep_placeable(DeviceTier& t, std::vector<int32_t>& used) {
  const size_t cap = size_t(gpu_experts_->slots());
  tiers_.routed += used.size();
  for (size_t j = cap; j < used.size(); ++j) {  // no room: read where their entries say
    const bool on_slot = t.on_slot[size_t(used[j])];
    ++(on_slot ? tiers_.hits : tiers_.copied);
    if (!on_slot) ++tier_reads_.host_reads, tiers_.miss_bytes += t.bytes[size_t(used[j])];
  }
  if (used.size() > cap) used.resize(cap);
}

void CudaBackend::admit_routed() {
  if (tiers_by_layer_.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    gpu_experts_->take_copy_time();  // a prefill's waited-for copies, for the statistics
    switch_filled();
    for (DeviceTier* t : tiers_by_layer_)
      if (t && t->pairs > 0) admit_layer(*t);
  } catch (const Error&) {
    // Advisory: the records stay where their entries say (host memory); later steps read them there.
  }
  tier_reads_.admit_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++tier_reads_.admits;
}

void CudaBackend::admit_layer(DeviceTier& t) {
  const MoeSpec& m = *t.spec;
  std::vector<int32_t> used = most_routed(std::span<const int32_t>(t.ids, size_t(t.pairs)), m.n_experts);
  t.pairs = 0;
  tier_keep_placeable(t, used);
  std::vector<size_t> bytes;
  for (int32_t e : used) bytes.push_back(t.bytes[size_t(e)]);
  const GpuExperts::Placed p = gpu_experts_->place(*m.source, m.source_layer, used, bytes, /*background=*/true, /*hold=*/false);
  for (size_t j = 0; j < used.size(); ++j) {
    const bool on_slot = t.on_slot[size_t(used[j])];
    ++(p.hit[j] && on_slot ? tiers_.hits : tiers_.copied);
    if (!on_slot) ++tier_reads_.host_reads, tiers_.miss_bytes += t.bytes[size_t(used[j])];  // read from host memory
    if (!on_slot && std::find(tier_pending_.begin(), tier_pending_.end(), std::pair(&t, used[j])) == tier_pending_.end())
      tier_pending_.emplace_back(&t, used[j]);
  }
}

void CudaBackend::moe_tier(DeviceTier& t, const MoeSpec& m, const float* x, int64_t T, const int32_t* ids_dev,
                           const PairTiles& pt, float* h, float* y) {
  const int64_t K = m.n_experts_active, hidden = m.experts[0].gate.rows;
  if (T > kTierRows) {
    // A prefill: its most routed experts into slots (the rest read from host memory), the
    // compute stream waiting for the copies before the entries switch.
    step_recordable_ = false;
    std::vector<int32_t> ids(size_t(T * K));
    MF_CUDA(cudaMemcpyAsync(ids.data(), ids_dev, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    MF_CUDA(cudaStreamSynchronize(stream_));
    switch_filled();
    GpuExperts& g = *gpu_experts_;
    g.begin_step();  // the kernels of earlier layers are done: their slots refill without waiting
    std::vector<int32_t> used = most_routed(ids, m.n_experts);
    tier_keep_placeable(t, used);
    std::vector<size_t> bytes;
    for (int32_t e : used) bytes.push_back(t.bytes[size_t(e)]);
    const GpuExperts::Placed p = g.place(*m.source, m.source_layer, used, bytes, /*background=*/false, /*hold=*/false,
                                         /*scan=*/scan_insert_ && T * K >= 2 * m.n_experts);
    g.wait_copies();
    for (size_t j = 0; j < used.size(); ++j) {
      // A hit whose entry still points at host memory (its copy finished after the last
      // switch) is switched now: no miss.
      ++(p.hit[j] ? tiers_.hits : tiers_.copied);
      if (!p.hit[j]) tiers_.miss_bytes += t.bytes[size_t(used[j])];
      std::erase(tier_pending_, std::pair<DeviceTier*, int32_t>(&t, used[j]));
      if (!t.on_slot[size_t(used[j])]) tier_point(t, used[j], true);
    }
  } else {
    ++tier_reads_.small_steps;
  }
  experts_gate_up(t.table, t.fmt_gu, wide_ && t.wide_gu, t.vec_gu, hidden, m.dim, x, int32_t(K), pt, h, *pool_, stream_);
  experts_down(t.table, t.fmt_d, wide_ && t.wide_d, t.vec_d, hidden, m.dim, h, int32_t(K), pt, y, *pool_, stream_);
  // A prefill's next layer: its experts start coming during this layer's compute, as in moe_cached.
  if (T > kTierRows && prefill_prefetch_ && m.next && m.next->source == m.source && T * K >= 2 * m.n_experts)
    prefetch_layer(*m.next);
  if (T <= kTierRows) t.pairs = T * K;  // the router wrote their ids: admit_routed() after the step
}

}  // namespace moeflux
