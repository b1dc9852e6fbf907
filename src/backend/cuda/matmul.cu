// Matmul of a weight in any format with T token rows: a warp per weight row, tiles of kTile
// tokens per block row (each weight row is read once per tile), 8 values at a time. One token
// over rows that read wide (dot_rows_x1): a warp per kRowsPerWarp rows.
#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kRowsPerBlock = 8;

template <int F>
__global__ void __launch_bounds__(kRowsPerBlock * 32) matmul_kernel(DW w, const float* x, int64_t T, float* y) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= w.rows) return;
  const int64_t t0 = int64_t(blockIdx.y) * kTile;
  const int nt = int(min(int64_t(kTile), T - t0));
  const float* xs[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t) xs[t] = x + (t0 + min(t, nt - 1)) * w.cols;
  float acc[kTile] = {};
  dot_rows<F>(w, r, xs, nt, acc);
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    if (t >= nt) break;
    const float a = warp_sum(acc[t]);
    if (lane == 0) y[(t0 + t) * w.rows + r] = a;
  }
}

// One token, rows read wide: a warp per kRowsPerWarp rows, x read once for them.
constexpr int kRowsPerWarp = 4;

template <int F>
__global__ void __launch_bounds__(kRowsPerBlock * 32, 2) matvec_x1_kernel(DW w, const float* x, float* y) {
  const int64_t r0 = (int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32) * kRowsPerWarp;
  if (r0 >= w.rows) return;
  float acc[1][kRowsPerWarp] = {};
  const DW ws[1] = {w};
  dot_rows_x1<F, kRowsPerWarp, 1>(ws, r0, x, acc);
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const float a = warp_sum(acc[0][i]);
    if ((threadIdx.x & 31) == 0 && r0 + i < w.rows) y[r0 + i] = a;
  }
}

}  // namespace

void matmul(const DW& w, const float* x, int64_t T, float* y, cudaStream_t s) {
  if (T == 0 || w.rows == 0) return;
  if (T == 1 && w.wide) {
    const int64_t per_block = kRowsPerBlock * kRowsPerWarp;
    with_fmt(w.fmt, [&](auto f) {
      if constexpr (kWide<decltype(f)::value> > 0)
        matvec_x1_kernel<decltype(f)::value><<<unsigned((w.rows + per_block - 1) / per_block), kRowsPerBlock * 32, 0, s>>>(
            w, x, y);
    });
    MF_CUDA_LAUNCHED("matvec_x1");
    return;
  }
  const dim3 grid(unsigned((w.rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned((T + kTile - 1) / kTile));
  with_fmt(w.fmt, [&](auto f) { matmul_kernel<decltype(f)::value><<<grid, kRowsPerBlock * 32, 0, s>>>(w, x, T, y); });
  MF_CUDA_LAUNCHED("matmul");
}

}  // namespace moeflux::cuda
