// Dispatch of the optimised CPU ops: pick the kernel table for cpu_isa() once per call,
// prepare x once (once for several weights sharing x: matvec_multi), then split rows (or
// heads) over the thread pool when there is enough work to pay for the hand-off.
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>

#include "backend/cpu/batch_buffers.h"
#include "backend/cpu/cpu_features.h"
#include "core/aligned.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "core/thread_pool.h"
#include "backend/cpu/tuning_switch.h"
#include "backend/cpu/kernels.h"
#include "backend/ref/ref.h"

namespace moeflux {

namespace {
// Tuning numbers, read by their callers once: a positive integer, else def. (On / off choices
// are TuningSwitch objects: backend/cpu/tuning_switch.h.)
int64_t env_positive(const char* name, int64_t def) {
  const char* e = std::getenv(name);
  return e && std::atoi(e) > 0 ? int64_t(std::atoi(e)) : def;
}

// Weight bytes below which one thread runs (MOEFLUX_PARALLEL_MIN_KB overrides; tuning).
int64_t parallel_min_bytes() {
  static const int64_t n = env_positive("MOEFLUX_PARALLEL_MIN_KB", 256) << 10;
  return n;
}
// Weight bytes per chunk at least (MOEFLUX_CHUNK_MIN_KB overrides; tuning).
int64_t chunk_min_bytes() {
  static const int64_t n = env_positive("MOEFLUX_CHUNK_MIN_KB", 32) << 10;
  return n;
}
// Chunks per thread at most: more, smaller chunks shorten the wait for the last one; fewer
// cost fewer hand-offs. MOEFLUX_CHUNKS_PER_THREAD overrides it (tuning).
int64_t max_chunks_per_thread() {
  static const int64_t n = env_positive("MOEFLUX_CHUNKS_PER_THREAD", 4);
  return n;
}

// Bounds of blocks covering [0, n) that shrink as they run out, as the pool's guided chunks
// do: each takes (what is left) / div, rounded up to a multiple of mult and clamped to
// [lo, hi] (lo == hi: fixed blocks). Returns the blocks' starts and n.
std::vector<int64_t> shrinking_bounds(int64_t n, int64_t div, int64_t mult, int64_t lo, int64_t hi) {
  std::vector<int64_t> at{0};
  while (at.back() < n) {
    const int64_t take = std::clamp(((n - at.back() + div - 1) / div + mult - 1) / mult * mult, lo, hi);
    at.push_back(std::min(n, at.back() + take));
  }
  return at;
}

const cpu::Kernels& kernels() {
  switch (cpu_isa()) {
    case CpuIsa::Avx512Vnni: return cpu::kernels_avx512_vnni();
    case CpuIsa::Avx512: return cpu::kernels_avx512();
    case CpuIsa::Avx2: return cpu::kernels_avx2();
    default: return cpu::kernels_scalar();
  }
}

// The calling thread's prepared x, reused across calls. Workers reach it through a
// reference (a lambda naming a thread_local would see the worker's own, empty one).
cpu::PreparedX& prepared_x() {
  thread_local cpu::PreparedX px;
  return px;
}

// Rows per chunk, a multiple of m: 1 to max_chunks_per_thread() chunks per thread (a whole number of chunks per
// thread, so that a small matrix ends in one round), each at least chunk_min_bytes().
int64_t row_grain(int64_t rows, int64_t row_work, int threads, int64_t m) {
  const int64_t per_thread = std::clamp<int64_t>(rows * row_work / (int64_t(threads) * chunk_min_bytes()), 1, max_chunks_per_thread());
  const int64_t chunks = per_thread * threads;
  const int64_t g = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  return (g + m - 1) / m * m;
}

TuningSwitch guided_rows_switch("MOEFLUX_GUIDED");
bool guided_rows() { return guided_rows_switch.on(); }

template <typename F>
void for_rows(int64_t rows, int64_t row_work, int64_t m, F&& fn) {
  if (rows * row_work < parallel_min_bytes()) return fn(int64_t(0), rows);
  ThreadPool& pool = cpu_thread_pool();
  if (pool.size() == 1) return fn(int64_t(0), rows);
  if (!guided_rows()) return pool.parallel_for(rows, row_grain(rows, row_work, pool.size(), m), fn);
  // Guided chunks: long first runs, short last ones (at least chunk_min_bytes()), in multiples
  // of m (matvec callers pass a multiple of its 4-row blocks; items such as attention heads
  // pass 1, or 4 items would make one chunk and run on one thread).
  const int64_t min_rows = (std::max<int64_t>(1, chunk_min_bytes() / std::max<int64_t>(1, row_work)) + m - 1) / m * m;
  pool.parallel_for_guided(rows, min_rows, m, fn);
}

// Weights whose x can be prepared once for all of them (same layout and width).
bool same_layout(const QWeight& a, const QWeight& b) {
  return a.format == b.format && a.dtype == b.dtype && a.bits == b.bits && a.group_size == b.group_size &&
         a.sdtype == b.sdtype && a.cols == b.cols && a.block_rows == b.block_rows && a.block_cols == b.block_cols &&
         a.group_lanes == b.group_lanes;
}
}  // namespace

void for_tokens(int64_t T, int64_t bytes_per_token, const std::function<void(int64_t, int64_t)>& fn) {
  for_rows(T, bytes_per_token, 1, fn);
}

void matvec(const QWeight& w, const float* x, float* y) {
  const QWeight* ws[1] = {&w};
  float* ys[1] = {y};
  matvec_multi(1, ws, x, ys);
}

namespace {
// x of a batch of T tokens prepared for w, the tokens shared by the threads: one thread's pass
// over 128 tokens was ~0.5 ms a call on a 2-vCPU VM, serial time before each of a layer's
// projections.
void prepare_batch(const cpu::Kernels& k, const QWeight& w, const float* x, int64_t T, cpu::PreparedX* px) {
  if (cpu::prepare_x_layout(w, x, T, k.lanes, false, px))
    for_rows(T, w.cols * 8, 1, [&](int64_t t0, int64_t t1) { cpu::prepare_x_tokens(px, t0, t1); });
}

// Rows of n weights, weight i against its prepared x pxs[i], split over the threads in one
// parallel region: global row r0..r1 spans the weights in order. Rows are dealt out as if
// they cost the same (the callers pass weights of one layout and shape), in multiples of the
// matvec's 4-row blocks. `then` (if any) runs once on each block of `align` rows of a weight
// (each weight's rows a multiple of align), on the thread that finishes the block's last rows:
// chunks need not be whole blocks, so that few large blocks (a head's 128 rows) do not leave
// threads idle at the end of the region.
int64_t total_rows(int n, const QWeight* const* ws) {
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) rows += ws[i]->rows;
  return rows;
}

// The rows of n weights as one range in weight order, split over the threads in one parallel
// region (for_rows, rows of row_work each, multiples of 4): fn(i, lo, hi, base) on rows
// [lo, hi) of weight i, whose first row is global row base.
template <typename F>
void for_weight_rows(int n, const QWeight* const* ws, int64_t row_work, F&& fn) {
  for_rows(total_rows(n, ws), row_work, 4, [&](int64_t r0, int64_t r1) {
    int64_t base = 0;
    for (int i = 0; i < n && base < r1; base += ws[i]->rows, ++i) {
      const int64_t lo = std::max(r0, base), hi = std::min(r1, base + ws[i]->rows);
      if (lo < hi) fn(i, lo - base, hi - base, base);
    }
  });
}

void rows_region(const cpu::Kernels& k, int n, const QWeight* const* ws, const cpu::PreparedX* const* pxs,
                 float* const* ys, int64_t align = 1,
                 const std::function<void(int, int64_t, int64_t)>* then = nullptr) {
  // Rows computed so far per block of align global rows (blocks never straddle two weights).
  std::vector<std::atomic<int32_t>> done(then && align > 1 ? size_t(total_rows(n, ws) / align) : 0);
  for_weight_rows(n, ws, int64_t(ws[0]->row_bytes()), [&](int i, int64_t lo, int64_t hi, int64_t base) {
    k.matvec_rows(*ws[i], *pxs[i], ys[i], lo, hi);
    if (!then) return;
    if (done.empty()) return (*then)(i, lo, hi);
    // acq_rel: the thread that completes a block sees the other threads' rows of it.
    for (int64_t b = (base + lo) / align; b * align < base + hi; ++b) {
      const int32_t part = int32_t(std::min(base + hi, (b + 1) * align) - std::max(base + lo, b * align));
      if (done[size_t(b)].fetch_add(part, std::memory_order_acq_rel) + part == align)
        (*then)(i, b * align - base, (b + 1) * align - base);
    }
  });
}

// fn(i) for i in [0, n), one item at a time from a shared counter (items of uneven cost
// balance themselves); inline when there is one thread or `inline_` is set.
template <typename F>
void each_item(int64_t n, bool inline_, F&& fn) {
  auto range = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  };
  ThreadPool& pool = cpu_thread_pool();
  if (inline_ || pool.size() == 1) return range(0, n);
  pool.parallel_for(n, 1, range);
}

// Prepared x's reused across calls (their buffers only grow); see prepared_x().
std::vector<cpu::PreparedX>& prepared_pool(size_t n) {
  thread_local std::vector<cpu::PreparedX> pool;
  if (pool.size() < n) pool.resize(n);
  return pool;
}

// Frees the pool after a batch whose tokens' digits (3 bytes a column) outgrow what a layer's
// batch buffers keep (backend/cpu/batch_buffers.h): a long prompt prepares one x per token and
// routed expert.
void release_pool_if_large(int64_t cols) {
  std::vector<cpu::PreparedX>& pool = prepared_pool(0);
  if (pool.size() * size_t(cols) * 3 > kKeptBatchFloats * sizeof(float)) std::vector<cpu::PreparedX>().swap(pool);
}
}  // namespace

namespace {
// matvec_multi, with `then` (if any) on each range of whole `align` blocks right after it.
void matvec_multi_then(int n, const QWeight* const* ws, const float* x, float* const* ys, int64_t align,
                       const std::function<void(int, int64_t, int64_t)>* then) {
  MF_ASSERT(n >= 1 && n <= 8 && align >= 1);
  for (int i = 1; i < n; ++i)
    if (!same_layout(*ws[0], *ws[i])) {
      for (int j = 0; j < n; ++j) {
        matvec_multi_then(1, ws + j, x, ys + j, 1, nullptr);
        if (then) (*then)(j, 0, ws[j]->rows);
      }
      return;
    }
  const cpu::Kernels& k = kernels();
  cpu::PreparedX& px = prepared_x();
  cpu::prepare_for(k, *ws[0], x, &px);
  const cpu::PreparedX* pxs[8];
  std::fill(pxs, pxs + n, &px);
  rows_region(k, n, ws, pxs, ys, align, then);
}
}  // namespace

void matvec_multi(int n, const QWeight* const* ws, const float* x, float* const* ys) {
  matvec_multi_then(n, ws, x, ys, 1, nullptr);
}

void matvec_multi_epilogue(int n, const QWeight* const* ws, const float* x, float* const* ys, int64_t align,
                           const std::function<void(int, int64_t, int64_t)>& epilogue) {
  for (int i = 0; i < n; ++i) MF_ASSERT(align >= 1 && ws[i]->rows % align == 0);
  matvec_multi_then(n, ws, x, ys, align, &epilogue);
}

void add_scaled(float a, const float* x, float* y, int64_t n) { kernels().add_scaled(a, x, y, n); }

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  const float inv = 1.0f / std::sqrt(kernels().dot(x, x, n) / float(n) + eps);
  if (w)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  else
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

namespace {
// Whether n experts can share regions: every gate and up in one layout and shape, every down
// in one. Asserts that each expert's own shapes agree.
bool uniform_experts(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down) {
  bool uniform = true;
  for (int i = 0; i < n; ++i) {
    MF_ASSERT(gate[i]->rows == up[i]->rows && gate[i]->rows == down[i]->cols && gate[i]->cols == up[i]->cols);
    uniform = uniform && same_layout(*gate[0], *gate[i]) && same_layout(*gate[0], *up[i]) &&
              same_layout(*down[0], *down[i]) && gate[i]->rows == gate[0]->rows && down[i]->rows == down[0]->rows;
  }
  return uniform;
}

// One token's gate / up rows of n uniform experts as items: item b is a block of rows of
// expert b / blocks (at least min_per_expert blocks of >= 16 rows each), its gate and up rows
// into gu (expert i: gate at 2i, up at 2i + 1), then h = silu(gate) * up in place of gate, so
// that no serial pass over the experts follows. `shape` is a gate of the experts' common
// layout and shape; the arrays gate and up are read by run() only (they may be filled later).
struct GateUpItems {
  const QWeight *const *gate, *const *up;
  int64_t hidden, row_bytes, block, blocks;
  GateUpItems(int n, const QWeight* const* g, const QWeight* const* u, const QWeight& shape, int64_t min_per_expert)
      : gate(g), up(u), hidden(shape.rows), row_bytes(int64_t(shape.row_bytes())) {
    const int64_t per_expert = std::max<int64_t>(min_per_expert, max_chunks_per_thread() * cpu_thread_pool().size() / n);
    block = std::max<int64_t>(16, (hidden + per_expert - 1) / per_expert);
    blocks = (hidden + block - 1) / block;
  }
  // Runs item b; returns its expert.
  int64_t run(const cpu::Kernels& k, int64_t b, const cpu::PreparedX& px, float* gu) const {
    const int64_t i = b / blocks, r0 = (b % blocks) * block, r1 = std::min(hidden, r0 + block);
    float *g = gu + 2 * i * hidden, *u = g + hidden;
    k.matvec_rows(*gate[i], px, g, r0, r1);
    k.matvec_rows(*up[i], px, u, r0, r1);
    k.swiglu(g + r0, u + r0, r1 - r0, g + r0);
    return i;
  }
  // Below this the items run on the calling thread.
  bool small(int n) const { return 2 * n * hidden * row_bytes < parallel_min_bytes(); }
};
}  // namespace

void swiglu_experts(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                    const float* x, float* const* outs) {
  MF_ASSERT(n >= 1);
  if (!uniform_experts(n, gate, up, down)) {
    for (int i = 0; i < n; ++i) swiglu_expert(*gate[i], *up[i], *down[i], x, outs[i]);
    return;
  }
  const cpu::Kernels& k = kernels();
  const GateUpItems items(n, gate, up, *gate[0], 1);
  float* gu = cpu::scratch(4, size_t(2 * n * items.hidden));
  std::vector<cpu::PreparedX>& pool = prepared_pool(size_t(n) + 1);
  const cpu::PreparedX& px = pool[size_t(n)];  // x; pool[i] is expert i's h
  cpu::prepare_for(k, *gate[0], x, &pool[size_t(n)]);
  // Region 1: the gate / up items; the thread that completes an expert's h prepares it for
  // down (no serial pass between the regions: dev 9 us a layer). Region 2: all down rows, each
  // expert against its own h.
  PhaseTimer pt("experts.gate_up");  // inside the caller's phase (moe.experts)
  std::vector<std::atomic<int>> left(static_cast<size_t>(n));
  for (auto& a : left) a.store(int(items.blocks), std::memory_order_relaxed);
  each_item(n * items.blocks, items.small(n), [&](int64_t b) {
    const int64_t i = items.run(k, b, px, gu);
    if (left[size_t(i)].fetch_sub(1, std::memory_order_acq_rel) == 1)
      cpu::prepare_for(k, *down[i], gu + 2 * i * items.hidden, &pool[size_t(i)]);
  });
  pt.next("experts.down");
  std::vector<const cpu::PreparedX*> pxs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pxs[size_t(i)] = &pool[size_t(i)];
  rows_region(k, n, down, pxs.data(), outs);
}

void combine_weighted(int n, const float* const* ys, const float* w, float* out, int64_t r0, int64_t r1) {
  std::fill(out + r0, out + r1, 0.0f);
  const cpu::Kernels& k = kernels();  // vector loops, the same bits at every level
  for (int i = 0; i < n; ++i) k.add_scaled(w[i], ys[i] + r0, out + r0, r1 - r0);
}

namespace {
// Fused decode experts' down blocks shrink toward the region's end, so the caller waits less
// for the last (16 threads, 48 layers: 6-9 against 12-13 us a region). Paired token by token
// (bench --alternate) at the default prefetch distances, fixed 64-row blocks decoded ~1.3%
// slower (median ratio 0.9870, faster in 111 of 320 pairs; a9dc2a6:docs/benchmarks.md).
// MOEFLUX_GUIDED_DOWN=0 keeps the fixed blocks.
TuningSwitch guided_down_switch("MOEFLUX_GUIDED_DOWN");
bool guided_down() { return guided_down_switch.on(); }

// Decode's fused experts (swiglu_experts_combined, route_experts_combined) as the items of one
// parallel region: n * blocks gate / up items, then blocks of output rows, each running every
// expert's down rows and adding them up in expert order. The experts (gate, up, down, w) and
// x prepared for gate / up (*xp) may be filled in by earlier items of the same region: the
// gate / up items wait until `pending` such tasks have called arrive(). A task that fails, or
// finds that the experts cannot run fused, calls stop(): the waiting items then return.
struct FusedExperts {
  const cpu::Kernels& k;
  const int n;
  std::array<const QWeight*, kMaxFusedExperts> gate{}, up{}, down{};
  std::array<float, kMaxFusedExperts> w{};
  const GateUpItems items;
  const int64_t dim;
  float* const gu;  // expert i's gate (then h) at 2i * hidden, its up after it
  float* const ys;  // expert i's down output at i * dim
  float* const out;
  std::vector<cpu::PreparedX>& pool;  // pool[i]: expert i's h prepared for down
  const cpu::PreparedX* xp;           // x prepared for gate / up (default pool[n])
  std::vector<int64_t> dat;           // the down blocks' bounds
  std::atomic<int> pending;
  std::atomic<bool> stopped{false};
  std::atomic<int> left[kMaxFusedExperts];       // gate / up blocks still running, per expert
  std::atomic<bool> prepared[kMaxFusedExperts];  // expert i's h is prepared (pool[i])

  // gate_shape, down_shape: a gate and a down of the experts' common layout and shape.
  FusedExperts(const cpu::Kernels& kn, int n_, const QWeight& gate_shape, const QWeight& down_shape, float* out_,
               int pending_)
      : k(kn), n(n_), items(n_, gate.data(), up.data(), gate_shape, 4), dim(down_shape.rows),
        gu(cpu::scratch(4, size_t(2 * n_ * gate_shape.rows))), ys(cpu::scratch(6, size_t(n_ * down_shape.rows))),
        out(out_), pool(prepared_pool(size_t(n_) + 1)), xp(&pool[size_t(n_)]), pending(pending_) {
    MF_ASSERT(n >= 1 && n <= kMaxFusedExperts);
    // Down blocks: dblock rows each (at least 64: each is n runs of contiguous rows), or
    // (guided) shrinking from dblock to 16 rows as the rows run out, so that the region's last
    // items are short.
    const int64_t dchunks = 4 * max_chunks_per_thread() * cpu_thread_pool().size();
    const int64_t dblock = (std::max<int64_t>(64, (dim + dchunks - 1) / dchunks) + 15) / 16 * 16;
    dat = shrinking_bounds(dim, cpu_thread_pool().size(), 16, guided_down() ? 16 : dblock, dblock);
    for (int i = 0; i < n; ++i) {
      left[i].store(int(items.blocks), std::memory_order_relaxed);
      prepared[i].store(false, std::memory_order_relaxed);
    }
  }
  int64_t count() const { return n * items.blocks + int64_t(dat.size()) - 1; }
  void arrive() { pending.fetch_sub(1, std::memory_order_acq_rel); }
  void stop() { stopped.store(true, std::memory_order_release); }

  void run(int64_t b) {
    const int64_t gu_items = n * items.blocks;
    if (b < gu_items) {
      ThreadPool::wait_until([&] {
        return pending.load(std::memory_order_acquire) <= 0 || stopped.load(std::memory_order_acquire);
      });
      if (pending.load(std::memory_order_acquire) > 0) return;  // stopped
      try {
        const int64_t i = items.run(k, b, *xp, gu);
        if (left[i].fetch_sub(1, std::memory_order_acq_rel) == 1) {  // h_i complete: prepare it here
          cpu::prepare_for(k, *down[size_t(i)], gu + 2 * i * items.hidden, &pool[size_t(i)]);
          prepared[i].store(true, std::memory_order_release);
        }
      } catch (...) {
        stop();
        throw;
      }
      return;
    }
    // Items are handed out in order, so every gate / up block is running or done by now. The
    // experts whose h is ready run first, whatever their order (each into its own ys row), and
    // the thread waits only when none is; the sum is still taken in expert order.
    const int64_t r0 = dat[size_t(b - gu_items)], r1 = dat[size_t(b - gu_items) + 1];
    uint32_t todo = n == 32 ? ~0u : (1u << n) - 1;
    while (todo) {
      bool ran = false;
      for (int i = 0; i < n; ++i)
        if ((todo >> i & 1) && prepared[i].load(std::memory_order_acquire)) {
          k.matvec_rows(*down[size_t(i)], pool[size_t(i)], ys + i * dim, r0, r1);
          todo &= ~(1u << i), ran = true;
        }
      if (!ran) {
        if (stopped.load(std::memory_order_acquire)) return;
        ThreadPool::wait_until([&] {
          for (int i = 0; i < n; ++i)
            if ((todo >> i & 1) && prepared[i].load(std::memory_order_acquire)) return true;
          return stopped.load(std::memory_order_acquire);
        });
      }
    }
    const float* yp[kMaxFusedExperts];
    for (int i = 0; i < n; ++i) yp[i] = ys + i * dim;
    combine_weighted(n, yp, w.data(), out, r0, r1);
  }
};

// Whether decode routes inside the experts' region (route_experts_combined; MOEFLUX_MERGED_ROUTE=0:
// the router in a region of its own, for A/Bs).
TuningSwitch merged_route_switch("MOEFLUX_MERGED_ROUTE");
}  // namespace

void swiglu_experts_combined(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                             const float* x, const float* w, float* out) {
  MF_ASSERT(n >= 1 && n <= kMaxFusedExperts);
  for (int i = 0; i < n; ++i) MF_ASSERT(down[i]->rows == down[0]->rows);
  if (!uniform_experts(n, gate, up, down)) {
    const int64_t dim = down[0]->rows;
    float* ys = cpu::scratch(6, size_t(n * dim));
    const float* yp[kMaxFusedExperts];
    for (int i = 0; i < n; ++i) yp[i] = ys + i * dim;
    for (int i = 0; i < n; ++i) swiglu_expert(*gate[i], *up[i], *down[i], x, ys + i * dim);
    return combine_weighted(n, yp, w, out, 0, dim);
  }
  const cpu::Kernels& k = kernels();
  FusedExperts f(k, n, *gate[0], *down[0], out, 0);
  std::copy_n(gate, n, f.gate.begin()), std::copy_n(up, n, f.up.begin()), std::copy_n(down, n, f.down.begin());
  std::copy_n(w, n, f.w.begin());
  cpu::prepare_for(k, *gate[0], x, &f.pool[size_t(n)]);
  PhaseTimer pt("experts.fused");  // inside the caller's phase (moe.experts)
  each_item(f.count(), f.items.small(n), [&](int64_t b) { f.run(b); });
}

bool merged_route() { return merged_route_switch.on(); }

bool route_experts_combined(const QWeight& router, const float* x, const RouteFn& route, int k,
                            const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                            int32_t* ids, float* weights, float* out) {
  MF_ASSERT(k >= 1 && k <= kMaxFusedExperts && router.rows >= k);
  const cpu::Kernels& kn = kernels();
  const int64_t E = router.rows;
  thread_local AlignedVector<float> logits_buf;
  if (logits_buf.size() < size_t(E)) logits_buf.resize(size_t(E));
  float* logits = logits_buf.data();
  cpu::PreparedX& rpx = prepared_x();
  cpu::prepare_for(kn, router, x, &rpx);
  // pending 2: the routing and x prepared for gate / up.
  FusedExperts f(kn, k, *gate[0], *down[0], out, 2);
  // Router items: blocks of 4-row multiples, about one per thread.
  const int threads = cpu_thread_pool().size();
  const int64_t rblock = std::max<int64_t>(4, ((E + threads - 1) / threads + 3) / 4 * 4);
  const int64_t n_router = (E + rblock - 1) / rblock;
  std::atomic<int64_t> router_left{n_router};
  bool fused = false;  // written by the routing item, read after the region
  // The experts' x: the router's when the layouts agree, else items of 16 quantisation groups
  // where the kernels prepare x in pieces (Kernels::prepare_groups), else one item.
  cpu::PreparedX& gpx = f.pool[size_t(k)];
  const bool shared_x = same_layout(router, *gate[0]);
  const bool pieces = !shared_x && kn.prepare_layout && kn.prepare_groups && kn.prepare_layout(*gate[0], x, &gpx);
  const int64_t groups = pieces ? gate[0]->cols / gate[0]->group_size : 1;
  const int64_t n_units = shared_x ? 0 : pieces ? (groups + 15) / 16 : 1;
  std::atomic<int64_t> units_left{n_units};
  std::atomic<bool> nonfinite{false};
  if (shared_x) f.xp = &rpx, f.arrive();
  // The routing, on the thread that completes the last router rows: the experts in ascending
  // id (the order the sum is defined by), fused only when distinct and of one layout.
  auto choose = [&] {
    route(logits, ids, weights);
    std::array<int, kMaxFusedExperts> order;
    std::iota(order.begin(), order.begin() + k, 0);
    std::sort(order.begin(), order.begin() + k, [&](int a, int b) { return ids[a] < ids[b]; });
    for (int j = 0; j < k; ++j) {
      const int32_t e = ids[order[size_t(j)]];
      MF_ASSERT(e >= 0 && e < E);
      if (j > 0 && e == ids[order[size_t(j - 1)]]) return false;
      f.gate[size_t(j)] = gate[e], f.up[size_t(j)] = up[e], f.down[size_t(j)] = down[e];
      f.w[size_t(j)] = weights[order[size_t(j)]];
    }
    return same_layout(*gate[0], *f.gate[0]) && f.gate[0]->rows == gate[0]->rows &&
           same_layout(*down[0], *f.down[0]) && f.down[0]->rows == down[0]->rows &&
           uniform_experts(k, f.gate.data(), f.up.data(), f.down.data());
  };
  PhaseTimer pt("experts.routed");  // inside the caller's phase
  each_item(n_router + n_units + f.count(), f.items.small(k), [&](int64_t b) {
    if (b >= n_router + n_units) return f.run(b - n_router - n_units);
    try {
      if (b < n_router) {
        kn.matvec_rows(router, rpx, logits, b * rblock, std::min(E, (b + 1) * rblock));
        if (router_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        fused = choose();
        return fused ? f.arrive() : f.stop();
      }
      const int64_t u = b - n_router;
      if (pieces && !kn.prepare_groups(*gate[0], x, u * 16, std::min(groups, (u + 1) * 16), &gpx))
        nonfinite.store(true, std::memory_order_relaxed);
      if (units_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      if (!pieces || nonfinite.load(std::memory_order_relaxed)) cpu::prepare_for(kn, *gate[0], x, &gpx);
      f.arrive();
    } catch (...) {
      f.stop();
      throw;
    }
  });
  return fused;
}

namespace {
// Rows [r0, r1) of w for n tokens of a small batch, x_j = *px[j] prepared for w (prepare_for),
// into y[j]: 2 to kTokensPerPass tokens in passes that read the rows once for two tokens where
// the kernels have them (Kernels::matvec_rows_tokens), else token by token. Each token's rows
// are its matvec's bits. A pass over few tokens is bound by memory, and the second token's dots
// fit in its idle time (2 sequences decoded ~13% faster, paired); 8 tokens are bound by the dots,
// which token by token (four rows sharing each load of x) ran as fast (0.7% faster).
// MOEFLUX_TOKENS_PASS=0: token by token always.
constexpr int kTokensPerPass = 4;
TuningSwitch tokens_pass_switch("MOEFLUX_TOKENS_PASS");
// Tiles of rows x tokens (Kernels::matmul_rows_tokens) from kTileMinTokens tokens on, and for
// every batch of a weight they take (takes_tile). MOEFLUX_TOKENS_TILE=0: the passes above, and
// batches past kSmallBatch through matmul_rows (f32).
constexpr int kTileMinTokens = 3;
TuningSwitch tokens_tile_switch("MOEFLUX_TOKENS_TILE");
bool takes_tile(const cpu::Kernels& k, const QWeight& w) {
  return k.takes_tokens && k.takes_tokens(w) && tokens_tile_switch.on();
}
std::atomic<int> g_tile_digits{3};
void rows_for_tokens(const cpu::Kernels& k, const QWeight& w, const cpu::PreparedX* const* px, int n, float* const* y,
                     int64_t r0, int64_t r1) {
  if (n >= kTileMinTokens && takes_tile(k, w) &&
      k.matmul_rows_tokens(w, px, n, g_tile_digits.load(std::memory_order_relaxed), y, r0, r1))
    return;
  if (n > 1 && n <= kTokensPerPass && tokens_pass_switch.on() && k.matvec_rows_tokens &&
      k.matvec_rows_tokens(w, px, n, y, r0, r1))
    return;
  for (int j = 0; j < n; ++j) k.matvec_rows(w, *px[j], y[j], r0, r1);
}
}  // namespace

void set_tile_digits(int digits) {
  MF_ASSERT(digits == 2 || digits == 3);
  g_tile_digits.store(digits, std::memory_order_relaxed);
}

void matmul(const QWeight& w, const float* x, int64_t T, float* y) {
  const QWeight* ws[1] = {&w};  // T == 1: matmul_multi runs the matvec
  matmul_multi(1, ws, x, T, &y);
}

void matmul_multi(int n, const QWeight* const* ws, const float* x, int64_t T, float* const* ys) {
  MF_ASSERT(n >= 1);
  if (T == 1) return matvec_multi(n, ws, x, ys);
  for (int i = 1; i < n; ++i)
    if (!same_layout(*ws[0], *ws[i])) {
      for (int j = 0; j < n; ++j) matmul(*ws[j], x, T, ys[j]);
      return;
    }
  const cpu::Kernels& k = kernels();
  if (T <= kSmallBatch || takes_tile(k, *ws[0])) {
    // Each token prepared for the matvec kernels, and each block of rows run for every token
    // while it is in cache: the weights are read from memory once, the dots are the
    // matvec's (integer where the CPU has them), and each token's result is its matvec's.
    // Past kSmallBatch (a prefill) only weights the VNNI tiles take come here.
    std::vector<cpu::PreparedX>& pxs = prepared_pool(size_t(T));
    std::vector<const cpu::PreparedX*> pp(static_cast<size_t>(T));
    for_rows(T, ws[0]->cols * 8, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) cpu::prepare_for(k, *ws[0], x + t * ws[0]->cols, &pxs[size_t(t)]);
    });
    for (int64_t t = 0; t < T; ++t) pp[size_t(t)] = &pxs[size_t(t)];
    for_weight_rows(n, ws, T * int64_t(ws[0]->row_bytes()), [&](int i, int64_t lo, int64_t hi, int64_t) {
      std::vector<float*> yp(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) yp[size_t(t)] = ys[i] + t * ws[i]->rows;
      for (int64_t r = lo; r < hi; r += kSmallBatchRows)
        rows_for_tokens(k, *ws[i], pp.data(), int(T), yp.data(), r, std::min(hi, r + kSmallBatchRows));
    });
    return release_pool_if_large(ws[0]->cols);
  }
  cpu::PreparedX& px = prepared_x();
  prepare_batch(k, *ws[0], x, T, &px);
  // Decoding a row costs about as much as 4 tokens' dots over it.
  const int64_t row_work = int64_t(ws[0]->row_bytes()) + T * ws[0]->cols;
  for_weight_rows(n, ws, row_work, [&](int i, int64_t lo, int64_t hi, int64_t) {
    k.matmul_rows(*ws[i], px, ys[i], ws[i]->rows, lo, hi);
  });
}

void swiglu_expert(const QWeight& gate, const QWeight& up, const QWeight& down, const float* x,
                   float* out) {
  MF_ASSERT(gate.rows == up.rows && gate.rows == down.cols && gate.cols == up.cols);
  float* g = cpu::scratch(4, size_t(gate.rows));
  float* u = cpu::scratch(5, size_t(up.rows));
  const QWeight* gu[2] = {&gate, &up};
  float* ys[2] = {g, u};
  matvec_multi(2, gu, x, ys);
  kernels().swiglu(g, u, gate.rows, g);
  matvec(down, g, out);
}

namespace {
// A task of rows [r0, r1) of expert i.
struct ExpertRows {
  int i;
  int64_t r0, r1;
};

// fn(task) for blocks of `block` rows of each of n experts' `rows`, dealt out one at a time over
// the threads, so that experts with many tokens balance with those with few.
template <typename F>
void run_expert_row_tasks(int n, int64_t rows, int64_t block, F&& fn) {
  std::vector<ExpertRows> tasks;
  for (int i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; r += block) tasks.push_back({i, r, std::min(rows, r + block)});
  each_item(int64_t(tasks.size()), false, [&](int64_t j) { fn(tasks[size_t(j)]); });
}

// swiglu_experts_batch for experts of few tokens each (or any number the VNNI tiles take), as
// matmul_multi's small batches: each
// token prepared for the matvec kernels (by whichever thread takes it), then tasks of rows of
// one expert (see run_tasks) run for all of its tokens. at: token offsets of the experts; g / u:
// total * hidden floats of scratch.
void swiglu_experts_small(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                          const float* const* xs, const int64_t* T, const std::vector<int64_t>& at, float* g, float* u,
                          float* const* outs) {
  const cpu::Kernels& k = kernels();
  const int64_t hidden = gate[0]->rows, total = at[size_t(n)];
  std::vector<int32_t> expert_of(static_cast<size_t>(total));
  for (int i = 0; i < n; ++i) std::fill(expert_of.begin() + at[size_t(i)], expert_of.begin() + at[size_t(i) + 1], i);
  std::vector<cpu::PreparedX>& px = prepared_pool(size_t(total));
  // Token j (of expert i, its tok-th) prepared for ws[i] from x_of(i, tok).
  auto prepare = [&](const QWeight* const* ws, auto&& x_of) {
    for_rows(total, ws[0]->cols * 8, 1, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int i = expert_of[size_t(j)];
        cpu::prepare_for(k, *ws[i], x_of(i, j - at[size_t(i)]), &px[size_t(j)]);
      }
    });
  };
  // Tasks of max_chunks_per_thread() per thread (at least kSmallBatchRows rows, at most a whole
  // matrix): each task restarts the kernels' four streams of codes, and a step of 8 sequences on
  // 2 threads decoded 2-5% faster in whole-matrix tasks than in 256-row ones (paired).
  auto run_tasks = [&](int64_t rows, auto&& fn) {
    const int64_t tasks = max_chunks_per_thread() * cpu_thread_pool().size();
    const int64_t block = std::min(rows, std::max(kSmallBatchRows, (rows * n + tasks - 1) / tasks));
    run_expert_row_tasks(n, rows, block, fn);
  };
  prepare(gate, [&](int i, int64_t tok) { return xs[i] + tok * gate[i]->cols; });
  // Expert i's tokens' prepared x and, per token, a row of `rows` floats at base + token * ld.
  struct Tokens {
    std::vector<const cpu::PreparedX*> px;
    std::vector<float*> y;
    int n;
  };
  auto tokens = [&](int i, float* base, int64_t ld) {
    Tokens tk;
    tk.n = int(T[i]);
    tk.px.resize(size_t(tk.n)), tk.y.resize(size_t(tk.n));
    for (int j = 0; j < tk.n; ++j) tk.px[size_t(j)] = &px[size_t(at[size_t(i)] + j)], tk.y[size_t(j)] = base + j * ld;
    return tk;
  };
  run_tasks(hidden, [&](const ExpertRows& t) {
    const Tokens tg = tokens(t.i, g + at[size_t(t.i)] * hidden, hidden);
    const Tokens tu = tokens(t.i, u + at[size_t(t.i)] * hidden, hidden);
    rows_for_tokens(k, *gate[t.i], tg.px.data(), tg.n, tg.y.data(), t.r0, t.r1);
    rows_for_tokens(k, *up[t.i], tu.px.data(), tu.n, tu.y.data(), t.r0, t.r1);
    for (int j = 0; j < tg.n; ++j)
      k.swiglu(tg.y[size_t(j)] + t.r0, tu.y[size_t(j)] + t.r0, t.r1 - t.r0, tg.y[size_t(j)] + t.r0);
  });
  prepare(down, [&](int i, int64_t tok) { return g + (at[size_t(i)] + tok) * hidden; });
  run_tasks(down[0]->rows, [&](const ExpertRows& t) {
    const Tokens td = tokens(t.i, outs[t.i], down[t.i]->rows);
    rows_for_tokens(k, *down[t.i], td.px.data(), td.n, td.y.data(), t.r0, t.r1);
  });
  release_pool_if_large(gate[0]->cols);
}
}  // namespace

void swiglu_experts_batch(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                          const float* const* xs, const int64_t* T, float* const* outs) {
  MF_ASSERT(n >= 1);
  const cpu::Kernels& k = kernels();
  std::vector<int64_t> at(static_cast<size_t>(n) + 1, 0);  // token offsets into g / u
  for (int i = 0; i < n; ++i) {
    MF_ASSERT(gate[i]->rows == up[i]->rows && gate[i]->rows == down[i]->cols && gate[i]->cols == up[i]->cols &&
              gate[i]->rows == gate[0]->rows && T[i] >= 1);
    at[size_t(i) + 1] = at[size_t(i)] + T[i];
  }
  // Each expert's path is its own (few tokens, gate and up alike: the matvecs' small batches),
  // never its companions', so that an expert gives the same bits whichever experts share the
  // call (an expert cache runs them in windows and as they arrive, resident experts all at once).
  auto small = [&](int i) {
    return (T[i] <= kSmallBatch || (takes_tile(k, *gate[i]) && takes_tile(k, *down[i]))) && same_layout(*gate[i], *up[i]);
  };
  int n_small = 0;
  for (int i = 0; i < n; ++i) n_small += small(i);
  if (n_small > 0 && n_small < n) {
    for (const bool s : {true, false}) {
      std::vector<const QWeight*> sg, su, sd;
      std::vector<const float*> sx;
      std::vector<int64_t> st;
      std::vector<float*> so;
      for (int i = 0; i < n; ++i)
        if (small(i) == s)
          sg.push_back(gate[i]), su.push_back(up[i]), sd.push_back(down[i]), sx.push_back(xs[i]), st.push_back(T[i]),
              so.push_back(outs[i]);
      swiglu_experts_batch(int(sg.size()), sg.data(), su.data(), sd.data(), sx.data(), st.data(), so.data());
    }
    return;
  }
  const int64_t hidden = gate[0]->rows, total = at[size_t(n)];
  float* g = cpu::scratch(6, size_t(total * hidden));  // gate, then h = silu(gate) * up
  float* u = cpu::scratch(7, size_t(total * hidden));
  if (n_small == n) return swiglu_experts_small(n, gate, up, down, xs, T, at, g, u, outs);
  // pool[i]: expert i's x for gate (then h for down); pool[n + i]: its x for up when up's
  // layout differs from gate's (mixed quantisation), else unused.
  std::vector<cpu::PreparedX>& pool = prepared_pool(size_t(2 * n));
  auto up_x = [&](int64_t i) -> const cpu::PreparedX& {
    return same_layout(*gate[i], *up[i]) ? pool[size_t(i)] : pool[size_t(n + i)];
  };
  // Each expert's x prepared by whichever thread takes it (many experts: a serial loop here
  // would leave the other threads idle).
  auto prepare_all = [&](const QWeight* const* ws, auto&& x_of) {
    for_rows(n, ws[0]->cols * 4 * (total / n + 1), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        prepare_batch(k, *ws[i], x_of(i), T[i], &pool[size_t(i)]);
        if (ws == gate && !same_layout(*gate[i], *up[i])) prepare_batch(k, *up[i], x_of(i), T[i], &pool[size_t(n + i)]);
      }
    });
  };
  prepare_all(gate, [&](int64_t i) { return xs[i]; });
  constexpr int64_t kRowBlock = 64;  // rows of an expert per task (run_expert_row_tasks)
  auto run_tasks = [&](int64_t rows, auto&& fn) { run_expert_row_tasks(n, rows, kRowBlock, fn); };
  // Gate and up rows of a block, then h = silu(gate) * up on the block.
  run_tasks(hidden, [&](const ExpertRows& t) {
    float* gi = g + at[size_t(t.i)] * hidden;
    float* ui = u + at[size_t(t.i)] * hidden;
    k.matmul_rows(*gate[t.i], pool[size_t(t.i)], gi, hidden, t.r0, t.r1);
    k.matmul_rows(*up[t.i], up_x(t.i), ui, hidden, t.r0, t.r1);
    for (int64_t tok = 0; tok < T[t.i]; ++tok)
      k.swiglu(gi + tok * hidden + t.r0, ui + tok * hidden + t.r0, t.r1 - t.r0, gi + tok * hidden + t.r0);
  });
  prepare_all(down, [&](int64_t i) { return g + at[size_t(i)] * hidden; });
  run_tasks(down[0]->rows,
            [&](const ExpertRows& t) { k.matmul_rows(*down[t.i], pool[size_t(t.i)], outs[t.i], down[t.i]->rows, t.r0, t.r1); });
}

namespace {
// One head of one query over n_ctx cached positions (attention_ref's order of operations).
// Query heads [0, nh) of one kv head (kvh) attend together: each K and V row is loaded from
// memory once for all of them (then from L1), not once per query head. Per head the dots, the
// softmax and the axpys are the single-head ones in the same order, so the result does not
// depend on how heads are grouped. q / oh: the first head's query and output (heads adjacent);
// p: nh * n_ctx floats of scratch.
void attend_heads(const cpu::Kernels& kn, const float* q, int64_t nh, const float* k, const float* v, int64_t n_ctx,
                  int64_t n_kv_heads, int64_t kvh, int64_t head_dim, int64_t v_dim, float scale, float* p, float* oh) {
  for (int64_t t = 0; t < n_ctx; ++t) {
    const float* kr = k + (t * n_kv_heads + kvh) * head_dim;
    for (int64_t j = 0; j < nh; ++j) p[j * n_ctx + t] = kn.dot(q + j * head_dim, kr, head_dim) * scale;
  }
  for (int64_t j = 0; j < nh; ++j) {
    softmax_ref(p + j * n_ctx, n_ctx);
    std::fill(oh + j * v_dim, oh + (j + 1) * v_dim, 0.0f);
  }
  for (int64_t t = 0; t < n_ctx; ++t) {
    const float* vr = v + (t * n_kv_heads + kvh) * v_dim;
    for (int64_t j = 0; j < nh; ++j) kn.axpy(p[j * n_ctx + t], vr, oh + j * v_dim, v_dim);
  }
}
}  // namespace

void attention(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t n_heads,
               int64_t n_kv_heads, int64_t head_dim, int64_t v_dim, float scale, float* out) {
  attention_causal(q, k, v, 1, n_ctx - 1, 0, n_heads, n_kv_heads, head_dim, v_dim, scale, out);
}

namespace {
// attention_causal's work: item i is (token, kv head, slice of its query heads). A group is
// split only as far as needed to give every thread ~2 items (decode: T = 1, often 4-8 kv heads
// for 16 threads).
struct CausalItems {
  const float *q, *k, *v;
  int64_t T, len0, window, n_heads, n_kv_heads, head_dim, v_dim;
  float scale;
  float* out;
  int64_t group, split, per_slice;
  CausalItems(const float* q_, const float* k_, const float* v_, int64_t T_, int64_t len0_, int64_t window_,
              int64_t n_heads_, int64_t n_kv_heads_, int64_t head_dim_, int64_t v_dim_, float scale_, float* out_)
      : q(q_), k(k_), v(v_), T(T_), len0(len0_), window(window_), n_heads(n_heads_), n_kv_heads(n_kv_heads_),
        head_dim(head_dim_), v_dim(v_dim_), scale(scale_), out(out_) {
    MF_ASSERT(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && T > 0 && len0 >= 0);
    group = n_heads / n_kv_heads;
    const int64_t threads = cpu_thread_pool().size();
    split = std::clamp<int64_t>((2 * threads + T * n_kv_heads - 1) / (T * n_kv_heads), 1, group);
    per_slice = (group + split - 1) / split;
  }
  int64_t count() const { return T * n_kv_heads * split; }
  // Bytes of K and V one item reads, at the average context.
  int64_t item_bytes() const { return (len0 + (T + 1) / 2) * (head_dim + v_dim) * 4 * per_slice; }
  struct Heads {
    int64_t first, count;  // of the item's token
  };
  // Runs item i with p: per_slice * (len0 + T) floats of scratch; returns the query heads it
  // wrote (count 0: none).
  Heads run(const cpu::Kernels& kn, int64_t i, float* p) const {
    const int64_t t = i / (n_kv_heads * split), g = i / split % n_kv_heads, s = i % split;
    const int64_t h0 = g * group + s * per_slice, nh = std::min(per_slice, (g + 1) * group - h0);
    if (nh <= 0) return {h0, 0};
    const int64_t n_ctx = len0 + t + 1, first = window > 0 && n_ctx > window ? n_ctx - window : 0;
    const float *qh = q + (t * n_heads + h0) * head_dim, *kf = k + first * n_kv_heads * head_dim,
                *vf = v + first * n_kv_heads * v_dim;
    float* oh = out + (t * n_heads + h0) * v_dim;
    if (!kn.attend || !kn.attend(qh, nh, kf + g * head_dim, vf + g * v_dim, n_ctx - first, n_kv_heads * head_dim,
                                 n_kv_heads * v_dim, head_dim, v_dim, scale, p, oh))
      attend_heads(kn, qh, nh, kf, vf, n_ctx - first, n_kv_heads, g, head_dim, v_dim, scale, p, oh);
    return {h0, nh};
  }
};
}  // namespace

void sigmoid_gate(const float* gate, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

void attention_causal(const float* q, const float* k, const float* v, int64_t T, int64_t len0, int64_t window,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t v_dim, float scale, float* out) {
  const cpu::Kernels& kn = kernels();
  const CausalItems items(q, k, v, T, len0, window, n_heads, n_kv_heads, head_dim, v_dim, scale, out);
  for_rows(items.count(), items.item_bytes(), 1, [&](int64_t i0, int64_t i1) {
    float* p = cpu::scratch(3, size_t(items.per_slice * (len0 + T)));
    for (int64_t i = i0; i < i1; ++i) items.run(kn, i, p);
  });
}

void attention_causal_seqs(const CausalSeq* seqs, int n, int64_t window, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, int64_t v_dim, float scale) {
  MF_ASSERT(n >= 1);
  const cpu::Kernels& kn = kernels();
  std::vector<CausalItems> items;
  std::vector<int64_t> first{0};  // sequence i's items are [first[i], first[i + 1])
  int64_t bytes = 0, scratch_floats = 0;
  for (int i = 0; i < n; ++i) {
    const CausalSeq& s = seqs[i];
    items.emplace_back(s.q, s.k, s.v, s.T, s.len0, window, n_heads, n_kv_heads, head_dim, v_dim, scale, s.out);
    first.push_back(first.back() + items.back().count());
    bytes += items.back().count() * items.back().item_bytes();
    scratch_floats = std::max(scratch_floats, items.back().per_slice * (s.len0 + s.T));
  }
  const int64_t total = first.back();
  for_rows(total, bytes / total, 1, [&](int64_t i0, int64_t i1) {
    float* p = cpu::scratch(3, size_t(scratch_floats));
    size_t s = size_t(std::upper_bound(first.begin(), first.end(), i0) - first.begin()) - 1;
    for (int64_t i = i0; i < i1; ++i) {
      while (i >= first[s + 1]) ++s;
      items[s].run(kn, i - first[s], p);
    }
  });
}

namespace {
// attention_project's merged region (MOEFLUX_MERGED_ATTN_O=0: attention, then matvec) and its
// att prepared in pieces.
TuningSwitch merged_attention_o_switch("MOEFLUX_MERGED_ATTN_O");
TuningSwitch att_pieces_switch("MOEFLUX_ATT_PIECES");  // 0: att prepared for wo in one unit
}  // namespace

void attention_project(const float* q, const float* k, const float* v, int64_t len0, int64_t window, int64_t n_heads,
                       int64_t n_kv_heads, int64_t head_dim, float scale, const float* gate, float* att,
                       const QWeight& wo, float* out) {
  MF_ASSERT(wo.cols == n_heads * head_dim);
  const cpu::Kernels& kn = kernels();
  const CausalItems items(q, k, v, 1, len0, window, n_heads, n_kv_heads, head_dim, head_dim, scale, att);
  ThreadPool& pool = cpu_thread_pool();
  const int64_t rb = int64_t(wo.row_bytes());
  if (!merged_attention_o_switch.on() || pool.size() == 1 || wo.rows * rb < parallel_min_bytes()) {
    attention_causal(q, k, v, 1, len0, window, n_heads, n_kv_heads, head_dim, head_dim, scale, att);
    if (gate) sigmoid_gate(gate, att, n_heads * head_dim);
    return matvec(wo, att, out);
  }
  // Blocks of wo's rows, shrinking as in for_rows' guided chunks (multiples of the matvec's
  // 4-row blocks, at least chunk_min_bytes()).
  const int64_t min_rows = (std::max<int64_t>(1, chunk_min_bytes() / rb) + 3) / 4 * 4;
  const std::vector<int64_t> at = shrinking_bounds(wo.rows, 2 * pool.size(), 4, min_rows, std::max(min_rows, wo.rows));
  const int64_t n_attn = items.count(), n_rows = int64_t(at.size()) - 1;
  cpu::PreparedX& px = prepared_x();
  // att is prepared for wo in units of 16 quantisation groups (one block of the group-lane
  // layout) where the kernels prepare x in pieces: the attention item that finishes a unit's
  // last columns prepares that unit, so that no thread prepares all of att while the rest wait
  // (7.6 us a layer on 16 threads, the o rows' start; a9dc2a6:docs/benchmarks.md).
  // Otherwise one unit: the item that finishes att prepares it whole.
  const bool pieces = att_pieces_switch.on() && kn.prepare_layout && kn.prepare_groups && kn.prepare_layout(wo, att, &px);
  const int64_t ucols = pieces ? 16 * wo.group_size : wo.cols, n_units = (wo.cols + ucols - 1) / ucols;
  std::vector<std::atomic<int64_t>> cols_left(static_cast<size_t>(n_units));  // per unit: att columns not yet written
  for (int64_t u = 0; u < n_units; ++u) cols_left[size_t(u)].store(std::min(ucols, wo.cols - u * ucols), std::memory_order_relaxed);
  std::atomic<int64_t> units_left{n_units};  // units not yet prepared
  std::atomic<bool> ready{false}, failed{false}, nonfinite{false};  // ready: att prepared for wo (px)
  // Columns [c0, c1) of att are written: prepare the units they complete; the last one
  // publishes px (redone whole by prepare_for when a unit met a non-finite value).
  auto written = [&](int64_t c0, int64_t c1) {
    for (int64_t u = c0 / ucols; u * ucols < c1; ++u) {
      const int64_t n = std::min(c1, (u + 1) * ucols) - std::max(c0, u * ucols);
      if (cols_left[size_t(u)].fetch_sub(n, std::memory_order_acq_rel) != n) continue;
      if (pieces) {
        const int64_t g0 = u * ucols / wo.group_size, g1 = std::min(wo.cols, (u + 1) * ucols) / wo.group_size;
        if (!kn.prepare_groups(wo, att, g0, g1, &px)) nonfinite.store(true, std::memory_order_relaxed);
      }
      if (units_left.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
      if (!pieces || nonfinite.load(std::memory_order_relaxed)) cpu::prepare_for(kn, wo, att, &px);
      ready.store(true, std::memory_order_release);
    }
  };
  each_item(n_attn + n_rows, false, [&](int64_t b) {
    if (b < n_attn) {
      try {
        float* p = cpu::scratch(3, size_t(items.per_slice * (len0 + 1)));
        const CausalItems::Heads h = items.run(kn, b, p);  // of the one token
        if (gate) sigmoid_gate(gate + h.first * head_dim, att + h.first * head_dim, h.count * head_dim);
        if (h.count > 0) written(h.first * head_dim, (h.first + h.count) * head_dim);
      } catch (...) {
        failed.store(true, std::memory_order_release);
        throw;
      }
      return;
    }
    // Items are handed out in order: every attention item is running or done by now.
    ThreadPool::wait_until(
        [&] { return ready.load(std::memory_order_acquire) || failed.load(std::memory_order_acquire); });
    if (!ready.load(std::memory_order_acquire)) return;  // failed
    kn.matvec_rows(wo, px, out, at[size_t(b - n_attn)], at[size_t(b - n_attn) + 1]);
  });
}

void mla_attention_absorbed(const float* q_c, const float* q_pe, const float* c, const float* k_pe, int64_t n_ctx,
                            int64_t n_heads, int64_t rank, int64_t rope_dim, float scale, float* out) {
  MF_ASSERT(n_ctx > 0);
  const cpu::Kernels& kn = kernels();
  auto heads = [&](int64_t h0, int64_t h1) {
    float* p = cpu::scratch(3, size_t(n_ctx));
    for (int64_t h = h0; h < h1; ++h) {
      const float *qc = q_c + h * rank, *qp = q_pe + h * rope_dim;
      for (int64_t t = 0; t < n_ctx; ++t)
        p[t] = (kn.dot(qc, c + t * rank, rank) + kn.dot(qp, k_pe + t * rope_dim, rope_dim)) * scale;
      softmax_ref(p, n_ctx);
      float* oh = out + h * rank;
      std::fill(oh, oh + rank, 0.0f);
      for (int64_t t = 0; t < n_ctx; ++t) kn.axpy(p[t], c + t * rank, oh, rank);
    }
  };
  for_rows(n_heads, n_ctx * (2 * rank + rope_dim) * 4, 1, heads);
}

void matvec_row_blocks(const QWeight& w, int64_t n_blocks, int64_t r0, int64_t rstride, int64_t n, const float* x,
                       int64_t ldx, float* y, int64_t ldy) {
  MF_ASSERT(n_blocks >= 0 && n >= 0 && r0 >= 0 && r0 + (n_blocks - 1) * rstride + n <= w.rows);
  const cpu::Kernels& k = kernels();
  for_rows(n_blocks, n * int64_t(w.row_bytes()), 1, [&](int64_t b0, int64_t b1) {
    thread_local AlignedVector<float> rows;  // matvec_rows writes y[r] at the row's own index
    if (rows.size() < size_t(w.rows)) rows.resize(size_t(w.rows));
    cpu::PreparedX& px = prepared_x();
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t rb = r0 + b * rstride;
      cpu::prepare_for(k, w, x + b * ldx, &px);
      k.matvec_rows(w, px, rows.data(), rb, rb + n);
      std::copy(rows.data() + rb, rows.data() + rb + n, y + b * ldy);
    }
  });
}

void matvec_t_row_blocks(const QWeight& w, int64_t n_blocks, int64_t r0, int64_t rstride, int64_t n,
                         const float* x, int64_t ldx, float* y, int64_t ldy) {
  MF_ASSERT(n_blocks >= 0 && n >= 0 && r0 >= 0 && r0 + (n_blocks - 1) * rstride + n <= w.rows);
  const cpu::Kernels& k = kernels();
  for_rows(n_blocks, n * int64_t(w.row_bytes()), 1, [&](int64_t b0, int64_t b1) {
    // Rows decode in the kernels' own layout (lane-interleaved for affine codes); the sum is
    // taken in that layout and put back in natural order once per block.
    cpu::PreparedX layout;
    cpu::prepare_x(w, nullptr, 0, k.lanes, false, &layout);
    const int64_t len = layout.interleaved ? layout.stride : w.cols;
    thread_local AlignedVector<float> row, acc, sb, bb;
    row.resize(size_t(len)), acc.resize(size_t(len));
    sb.resize(cpu::decode_params_size(w)), bb.resize(cpu::decode_params_size(w));
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x + b * ldx;
      float* yb = y + b * ldy;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        k.decode_row(w, layout, r0 + b * rstride + i, row.data(), sb.data(), bb.data());
        k.axpy(xb[i], row.data(), acc.data(), len);
      }
      if (!layout.interleaved) {
        std::copy(acc.data(), acc.data() + w.cols, yb);
        continue;
      }
      if (layout.group_lanes)
        cpu::for_each_interleaved_lanes(w.cols, w.group_size, [&](int64_t c, int64_t i, int64_t) { yb[c] = acc[size_t(i)]; });
      else
        cpu::for_each_interleaved(w.cols, 32 / w.bits, k.lanes,
                                  [&](int64_t c, int64_t i, int64_t) { yb[c] = acc[size_t(i)]; });
    }
  });
}

void gated_delta_step(float* S, const float* q, const float* k, const float* v, float g, float beta, int64_t k_dim,
                      int64_t v_dim, float* out) {
  const cpu::Kernels& kn = kernels();
  const float decay = std::exp(g);
  // Pass 1: decay each row of S and accumulate S^T k; delta = (v - S^T k) * beta.
  float* kv = cpu::scratch(5, size_t(v_dim));
  std::fill(kv, kv + v_dim, 0.0f);
  for (int64_t i = 0; i < k_dim; ++i) {
    float* si = S + i * v_dim;
    for (int64_t j = 0; j < v_dim; ++j) si[j] *= decay;
    kn.axpy(k[i], si, kv, v_dim);
  }
  for (int64_t j = 0; j < v_dim; ++j) kv[j] = (v[j] - kv[j]) * beta;
  // Pass 2: S += k delta^T, row by row, and read out S^T q from the updated rows.
  std::fill(out, out + v_dim, 0.0f);
  for (int64_t i = 0; i < k_dim; ++i) {
    float* si = S + i * v_dim;
    kn.axpy(k[i], kv, si, v_dim);
    kn.axpy(q[i], si, out, v_dim);
  }
}

}  // namespace moeflux
