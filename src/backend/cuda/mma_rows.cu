// Rows on tensor cores (the tile: mma_rows.cuh): split_rows (x as f16 hi + lo per row, a warp a
// row), the dense matmul of T >= kTcRows rows (tiles of kTcM rows x kTcN weight rows, up to
// kMaxTc weights sharing x in one launch), and the routed experts' gate / up + SiLU and down
// over the tiles of kTcM pairs that group_pairs makes for experts with many pairs. Tested by
// the op table (test_backend_ops: matmul_*_T64 / _T100, moe_*_tc); compared on a GPU with
// `bench --backend cuda --alternate tc_prefill`.
//
// Work of a pp512 step of qwen3-30b-a3b (48 layers, dim 2048, 32 + 2 x 4 heads of 128, 128
// experts of 768, top 8): per layer and token q 4096 x 2048, k and v 512 x 2048 each, o
// 2048 x 4096, router 128 x 2048 and 8 experts' 3 x 768 x 2048 make 56.9 M multiply-adds:
// 2.73 G a token, 5.46 GFLOP a token (the lm_head's 0.62 GFLOP only for the rows whose logits
// are asked for). 15000 tok/s is then 82 TFLOP/s of matmul, 164 TFLOP/s of f16 MMAs with hi and
// lo: a sixth of an H100's dense f16 peak (~990 TFLOP/s through wgmma; mma.sync, used here,
// reaches roughly two thirds of it), so the ceiling of this design is ~300 TFLOP/s of real work,
// ~55000 tok/s for the matmuls alone (unmeasured: this file has not yet run on a GPU). Bytes:
// q4g64 with bf16 scales and biases is 4.5 bits a weight, 340 MB of experts a layer (16.3 GB
// over 48 layers) read once or twice a step (an expert with more than kTcM pairs reads its
// weights once per tile of kTcM): ~7 ms of 3.35 TB/s for 512 tokens (~70000 tok/s); the split
// copies of x and h add ~60 MB a layer (~0.9 ms a step).
#include <algorithm>
#include <span>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_rows.cuh"

namespace moeflux::cuda {

namespace {

// A warp per row: e such that max |x * 2^e| is in [2^13, 2^14) (e = 0 for a row of zeros or with
// a value not finite; |e| <= 126), then hi, lo and the sums of each 32 columns.
constexpr int kSplitWarps = 8;
__global__ void __launch_bounds__(kSplitWarps * 32)
    split_kernel(const float* x, int64_t rows, int64_t cols, __half* hi, __half* lo, float* sums, float* inv) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kSplitWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  const int64_t nq = cols / 8;  // 8 columns a lane
  float m = 0.0f;
  bool finite = true;
  for (int64_t q0 = 0; q0 < nq; q0 += 32) {
    float v[8];
    load8(xr, q0 + lane, q0 + lane < nq, 1.0f, v);
    max8(v, m, finite);
  }
  m = warp_max(m);
  finite = __all_sync(0xffffffffu, finite);
  const int e = split_exponent(m, finite);
  const float scale = pow2f(e);
  for (int64_t q0 = 0; q0 < nq; q0 += 32) {
    float v[8];
    const bool ok = q0 + lane < nq;
    load8(xr, q0 + lane, ok, scale, v);
    split_store8(v, q0 + lane, ok, hi + r * cols, lo + r * cols, sums + r * (cols / 32));
  }
  if (lane == 0) inv[r] = pow2f(-e);
}

// x (rows, cols) split into pool memory held by sc.
XSplit split_rows(const float* x, int64_t rows, int64_t cols, Scratch& sc, cudaStream_t s) {
  MF_ASSERT(cols % 32 == 0 && rows > 0);
  XSplit xs;
  __half* hi = sc.get<__half>(size_t(rows * cols));
  __half* lo = sc.get<__half>(size_t(rows * cols));
  float* sums = sc.get<float>(size_t(rows * cols / 32));
  float* inv = sc.get<float>(size_t(rows));
  split_kernel<<<unsigned((rows + kSplitWarps - 1) / kSplitWarps), kSplitWarps * 32, 0, s>>>(x, rows, cols, hi, lo,
                                                                                            sums, inv);
  MF_CUDA_LAUNCHED("split_rows");
  xs.hi = hi, xs.lo = lo, xs.sums = sums, xs.inv = inv, xs.cols = cols;
  return xs;
}

// Calls fn(integral_constant<F>) for kQ4 / kQ8; other formats are the caller's error.
template <typename Fn>
void with_tc_fmt(int fmt, Fn&& fn) {
  if (fmt == kQ4) fn(std::integral_constant<int, kQ4>{});
  else if (fmt == kQ8) fn(std::integral_constant<int, kQ8>{});
  else MF_ASSERT(!"tensor-core rows: affine 4-bit or 8-bit only");
}

// Element (i, j, r) of tc_tile's acc: its row of the tile and its column (0 .. kTcN).
__device__ __forceinline__ int acc_row(int i, int r) { return 16 * i + (threadIdx.x % 32) / 4 + 8 * (r / 2); }
__device__ __forceinline__ int acc_col(int j, int r) {
  return (threadIdx.x / 32) * 32 + 8 * j + 2 * (threadIdx.x % 4) + r % 2;
}

// Calls out(m, n, v) for each element of the tile's acc in rows m < used and columns
// n0 + (0 .. kTcN) below cols.
template <typename Out>
__device__ __forceinline__ void store_acc(const float (&acc)[2][4][4], int used, int64_t n0, int64_t cols, Out out) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int m = acc_row(i, r);
        const int64_t n = n0 + acc_col(j, r);
        if (m < used && n < cols) out(m, n, acc[i][j][r]);
      }
}

template <int F>
__global__ void __launch_bounds__(kTcThreads, 1) matmul_tc_kernel(TcDense d, XSplit xs, int64_t T) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t xrow[kTcM];
  TcView w;
  float* y;
  int32_t first;
  tc_weight(d, w, y, first);
  const int64_t n0 = int64_t(blockIdx.x - first) * kTcN, m0 = int64_t(blockIdx.y) * kTcM;
  const int used = int(min(int64_t(kTcM), T - m0));
  if (threadIdx.x < kTcM) xrow[threadIdx.x] = int32_t(m0 + min(int(threadIdx.x), used - 1));
  __syncthreads();
  const TcHalves hw{w, w, n0, n0 + kTcHalf};
  float acc[2][4][4];
  tc_tile<F>(xs, xrow, used, hw, smem, acc);
  store_acc(acc, used, n0, w.rows, [&](int m, int64_t n, float v) { y[(m0 + m) * w.rows + n] = v * xs.inv[m0 + m]; });
}

// The tile's pairs (tiles of group_pairs): x rows (gate / up: tokens p / k; down: pairs p)
// and the pairs, in shared memory; false where the block has nothing to do.
__device__ __forceinline__ bool tile_rows(const PairTiles& pt, int32_t k, const DW* table, int which, int32_t* xrow,
                                          int32_t* pair, int& used, int& expert) {
  const int tile = blockIdx.y;
  if (tile >= *pt.n_tc) return false;
  expert = pt.tc_tiles[tile * kTileFields];
  const int first = pt.tc_tiles[tile * kTileFields + 1];
  used = pt.tc_tiles[tile * kTileFields + 2];
  if (!table[3 * expert + which].data) return false;  // not in this window
  if (threadIdx.x < kTcM) {
    const int32_t p = pt.sorted[first + min(int(threadIdx.x), used - 1)];
    pair[threadIdx.x] = p, xrow[threadIdx.x] = p / k;
  }
  __syncthreads();
  return true;
}

// Block (x, tile): hidden rows [x * kTcHalf, (x + 1) * kTcHalf) of gate (warps 0-3) and up
// (warps 4-7); up's results go through shared memory to the gate warps, which write
// silu(gate) * up.
template <int F>
__global__ void __launch_bounds__(kTcThreads, 1)
    gate_up_tc_kernel(const DW* table, int64_t hidden, XSplit xs, int32_t k, PairTiles pt, float* h) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t xrow[kTcM], pair[kTcM];
  int used = 0, e = 0;
  if (!tile_rows(pt, k, table, 0, xrow, pair, used, e)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kTcHalf;
  const TcHalves hw{tc_view(table[3 * e]), tc_view(table[3 * e + 1]), n0, n0};
  float acc[2][4][4];
  tc_tile<F>(xs, xrow, used, hw, smem, acc);
  float* up = reinterpret_cast<float*>(smem);  // (kTcM, kTcHalf): the stages are free
  const bool gate = threadIdx.x / 32 * 32 < kTcHalf;
  if (!gate)
    store_acc(acc, kTcM, 0, kTcN, [&](int m, int64_t n, float v) { up[m * kTcHalf + n - kTcHalf] = v * xs.inv[xrow[m]]; });
  __syncthreads();
  if (!gate) return;
  store_acc(acc, used, 0, hidden - n0, [&](int m, int64_t n, float v) {
    const float a = v * xs.inv[xrow[m]], b = up[m * kTcHalf + n];
    h[int64_t(pair[m]) * hidden + n0 + n] = a / (1.0f + expf(-a)) * b;
  });
}

// Block (x, tile): down rows [x * kTcN, (x + 1) * kTcN) over the tile's pairs' h.
template <int F>
__global__ void __launch_bounds__(kTcThreads, 1)
    down_tc_kernel(const DW* table, int64_t dim, XSplit xs, PairTiles pt, float* y) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t xrow[kTcM], pair[kTcM];
  int used = 0, e = 0;
  if (!tile_rows(pt, 1, table, 2, xrow, pair, used, e)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kTcN;
  const TcView d = tc_view(table[3 * e + 2]);
  const TcHalves hw{d, d, n0, n0 + kTcHalf};
  float acc[2][4][4];
  tc_tile<F>(xs, xrow, used, hw, smem, acc);
  store_acc(acc, used, n0, dim, [&](int m, int64_t n, float v) { y[int64_t(pair[m]) * dim + n] = v * xs.inv[xrow[m]]; });
}

}  // namespace

bool tc_rows(const DW& w) {
  return (w.fmt == kQ4 || w.fmt == kQ8) && w.group >= 32 && w.cols % 32 == 0 && w.row_bytes % 16 == 0 &&
         w.rows > 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

void matmul_tc(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, DevicePool& pool,
               cudaStream_t s) {
  MF_ASSERT(ws.size() == ys.size());
  if (ws.empty() || T == 0) return;
  for (const DW& w : ws) MF_ASSERT(tc_rows(w) && w.cols == ws[0].cols);
  Scratch sc(pool);
  const XSplit xs = split_rows(x, T, ws[0].cols, sc, s);
  size_t i = 0;
  while (i < ws.size()) {  // the following weights of one format, up to kMaxTc, in one launch
    TcDense d{};
    int n = 0;
    d.first[0] = 0;
    const int fmt = ws[i].fmt;
    for (; i < ws.size() && n < kMaxTc && ws[i].fmt == fmt; ++i, ++n) {
      d.w[n] = ws[i], d.y[n] = ys[i];
      d.first[n + 1] = d.first[n] + int32_t((ws[i].rows + kTcN - 1) / kTcN);
    }
    for (int j = n + 1; j <= kMaxTc; ++j) d.first[j] = INT32_MAX;
    const dim3 grid(unsigned(d.first[n]), unsigned((T + kTcM - 1) / kTcM));
    with_tc_fmt(fmt, [&](auto f) {
      constexpr int F = decltype(f)::value;
      allow_smem<matmul_tc_kernel<F>>(kTcSmem<F>);
      matmul_tc_kernel<F><<<grid, kTcThreads, kTcSmem<F>, s>>>(d, xs, T);
    });
    MF_CUDA_LAUNCHED("matmul_tc");
  }
}

void experts_gate_up_tc(const DW* table, int fmt, int64_t hidden, int64_t dim, const float* x, int32_t k,
                        const PairTiles& pt, float* h, DevicePool& pool, cudaStream_t s) {
  if (pt.tc_max == 0 || pt.pairs == 0) return;
  Scratch sc(pool);
  const XSplit xs = split_rows(x, pt.pairs / k, dim, sc, s);
  const dim3 grid(unsigned((hidden + kTcHalf - 1) / kTcHalf), unsigned(pt.tc_max));
  with_tc_fmt(fmt, [&](auto f) {
    constexpr int F = decltype(f)::value;
    allow_smem<gate_up_tc_kernel<F>>(kTcSmem<F>);
    gate_up_tc_kernel<F><<<grid, kTcThreads, kTcSmem<F>, s>>>(table, hidden, xs, k, pt, h);
  });
  MF_CUDA_LAUNCHED("experts_gate_up_tc");
}

void experts_down_tc(const DW* table, int fmt, int64_t hidden, int64_t dim, const float* h, const PairTiles& pt,
                     float* y, DevicePool& pool, cudaStream_t s) {
  if (pt.tc_max == 0 || pt.pairs == 0) return;
  Scratch sc(pool);
  const XSplit xs = split_rows(h, pt.pairs, hidden, sc, s);
  const dim3 grid(unsigned((dim + kTcN - 1) / kTcN), unsigned(pt.tc_max));
  with_tc_fmt(fmt, [&](auto f) {
    constexpr int F = decltype(f)::value;
    allow_smem<down_tc_kernel<F>>(kTcSmem<F>);
    down_tc_kernel<F><<<grid, kTcThreads, kTcSmem<F>, s>>>(table, dim, xs, pt, y);
  });
  MF_CUDA_LAUNCHED("experts_down_tc");
}

}  // namespace moeflux::cuda
