// Matmul of a weight in any format with T token rows: steps of fewer than kTcRows rows over
// the weights mma_vec.cu takes go there; the others a warp per weight row, tiles of kTile
// tokens per block row (each weight row is read once per tile), 8 values at a time. One token
// over rows that read wide (dot_rows_x1): a warp per kRowsPerWarp rows.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kRowsPerBlock = 8;

template <int F>
__global__ void __launch_bounds__(kRowsPerBlock * 32) matmul_kernel(DW w, const float* x, int64_t T, float* y) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  await_previous();
  if (r >= w.rows) return;
  const int64_t t0 = int64_t(blockIdx.y) * kTile;
  const int nt = int(min(int64_t(kTile), T - t0));
  const float* xs[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t) xs[t] = x + (t0 + min(t, nt - 1)) * w.cols;
  float acc[kTile] = {};
  dot_row_any<F>(w, r, xs, nt, acc);
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    if (t >= nt) break;
    const float a = warp_sum(acc[t]);
    if (lane == 0) y[(t0 + t) * w.rows + r] = a;
  }
}

// One token, rows read wide: a warp per R rows, x read once for them. Up to kMaxShared weights
// of one format and width in one launch: block b runs weight i where first[i] <= b <
// first[i + 1]. R is kRowsPerWarp unless the launch would then have fewer blocks than the
// device has multiprocessors (a router, a narrow projection): then one row a warp.
constexpr int kRowsPerWarp = 4, kMaxShared = 4;
struct Shared {
  DW w[kMaxShared];
  float* y[kMaxShared];
  int32_t first[kMaxShared + 1];
};

template <int F, int R>
__global__ void __launch_bounds__(kRowsPerBlock * 32, 2) matvec_x1_kernel(Shared sw, const float* x) {
  int i = 0;
  while (int32_t(blockIdx.x) >= sw.first[i + 1]) ++i;
  const DW& w = sw.w[i];
  float* y = sw.y[i];
  const int64_t r0 = (int64_t(blockIdx.x - sw.first[i]) * kRowsPerBlock + threadIdx.x / 32) * R;
  // This warp's rows (and their affine scales) start coming while the kernel before ends.
  const int64_t sbytes = w.stype == kSF32 ? 4 : 2;
  for (int j = 0; j < R && r0 + j < w.rows; ++j) {
    prefetch_l2_span(w.data + (r0 + j) * w.row_bytes, w.row_bytes, threadIdx.x & 31);
    if (w.fmt <= kQ8 && (threadIdx.x & 31) == 0)
      prefetch_l2(w.scales + (r0 + j) * w.scale_cols * sbytes), prefetch_l2(w.biases + (r0 + j) * w.scale_cols * sbytes);
  }
  await_previous();
  if (r0 >= w.rows) return;
  float acc[1][R] = {};
  const DW ws[1] = {w};
  dot_rows_x1<F, R, 1>(ws, r0, x, acc);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float a = warp_sum(acc[0][i]);
    if ((threadIdx.x & 31) == 0 && r0 + i < w.rows) y[r0 + i] = a;
  }
}

// Attribute A of the current device, read once per thread while the device stays current.
template <cudaDeviceAttr A>
int device_attribute() {
  thread_local int device = -1, n = 0;
  int d = 0;
  MF_CUDA(cudaGetDevice(&d));
  if (d != device) MF_CUDA(cudaDeviceGetAttribute(&n, A, d)), device = d;
  return n;
}

}  // namespace

int multiprocessors() { return device_attribute<cudaDevAttrMultiProcessorCount>(); }
int64_t smem_optin() { return device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(); }

namespace {

// ys[i] = x ws[i]^T by the warp-per-row kernels.
void matmul_rows(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, cudaStream_t s) {
  size_t i = 0;
  while (i < ws.size()) {
    if (T != 1 || !ws[i].wide) {
      matmul(ws[i], x, T, ys[i], s);
      ++i;
      continue;
    }
    // The following weights of the same format and width, in one launch.
    Shared sw{};
    int n = 0;
    const DW& lead = ws[i];
    const size_t i0 = i;
    for (; i < ws.size() && n < kMaxShared && ws[i].wide && ws[i].fmt == lead.fmt && ws[i].cols == lead.cols; ++i, ++n)
      sw.w[n] = ws[i], sw.y[n] = ys[i];
    const auto blocks = [&](int64_t rows_per_warp) {
      sw.first[0] = 0;
      for (int j = 0; j < n; ++j)
        sw.first[j + 1] = sw.first[j] + int32_t((ws[i0 + size_t(j)].rows + kRowsPerBlock * rows_per_warp - 1) /
                                                (kRowsPerBlock * rows_per_warp));
      for (int j = n + 1; j <= kMaxShared; ++j) sw.first[j] = INT32_MAX;
      return sw.first[n];
    };
    const bool narrow = blocks(kRowsPerWarp) < multiprocessors();
    if (narrow) blocks(1);
    if (sw.first[n] == 0) continue;
    with_fmt(sw.w[0].fmt, [&](auto f) {
      constexpr int F = decltype(f)::value;
      if constexpr (kWide<F> > 0) {
        if (narrow)
          launch("matvec_x1", matvec_x1_kernel<F, 1>, dim3(unsigned(sw.first[n])), dim3(kRowsPerBlock * 32), s, sw, x);
        else
          launch("matvec_x1", matvec_x1_kernel<F, kRowsPerWarp>, dim3(unsigned(sw.first[n])), dim3(kRowsPerBlock * 32),
                 s, sw, x);
      }
    });
  }
}

}  // namespace

void matmul(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, cudaStream_t s) {
  MF_ASSERT(ws.size() == ys.size());
  if (T >= 1 && T < kTcRows && std::any_of(ws.begin(), ws.end(), vec_rows)) {  // mma_vec.cu's share, then the rest
    std::vector<DW> vw, rw;
    std::vector<float*> vy, ry;
    for (size_t j = 0; j < ws.size(); ++j) {
      const bool v = vec_rows(ws[j]);
      (v ? vw : rw).push_back(ws[j]), (v ? vy : ry).push_back(ys[j]);
    }
    matmul_vec(vw, x, T, vy, s);
    if (!rw.empty()) matmul_rows(rw, x, T, ry, s);
    return;
  }
  matmul_rows(ws, x, T, ys, s);
}

void matmul(const DW& w, const float* x, int64_t T, float* y, cudaStream_t s) {
  if (T == 0 || w.rows == 0) return;
  if ((T == 1 && w.wide) || (T < kTcRows && vec_rows(w))) {
    float* ys[1] = {y};
    matmul(std::span<const DW>(&w, 1), x, T, ys, s);
    return;
  }
  const dim3 grid(unsigned((w.rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned((T + kTile - 1) / kTile));
  with_fmt(w.fmt, [&](auto f) {
    launch("matmul", matmul_kernel<decltype(f)::value>, grid, dim3(kRowsPerBlock * 32), s, w, x, T, y);
  });
}

}  // namespace moeflux::cuda
