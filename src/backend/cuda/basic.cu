// Per-token kernels: embedding rows, add + RMSNorm, adds, SiLU * up, RoPE.
#include "backend/cuda/block_math.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux::cuda {

namespace {

template <int F>
__global__ void embed_kernel(DW w, const int32_t* ids, float* out) {
  await_previous();
  const int64_t t = blockIdx.y, r = ids[t];
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < w.cols; c += int64_t(gridDim.x) * blockDim.x)
    out[t * w.cols + c] = load1<F>(w, r, c);
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  __syncthreads();  // sh may still be read from a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void add_rms_norm_kernel(float* x, const float* y, const float* w, float eps, float* h, int64_t cols) {
  await_previous();
  __shared__ float sh[32];
  float* xr = x + blockIdx.x * cols;
  float* hr = h + blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = xr[i];
    if (y) xr[i] = v = v + y[blockIdx.x * cols + i];
    ss += v * v;
  }
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(cols) + eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) hr[i] = xr[i] * inv * (w ? w[i] : 1.0f);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  await_previous();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void add_scaled_rows_kernel(float* out, const float* y, const float* scale, bool sig, int64_t cols) {
  await_previous();
  float g = scale ? scale[blockIdx.y] : 1.0f;
  if (sig) g = 1.0f / (1.0f + expf(-g));
  const int64_t base = blockIdx.y * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < cols; i += int64_t(gridDim.x) * blockDim.x)
    out[base + i] += g * y[base + i];
}

__global__ void silu_mul_kernel(const float* g, const float* u, float* h, int64_t n) {
  await_previous();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float a = g[i];
    h[i] = a / (1.0f + expf(-a)) * u[i];
  }
}

// One block per (row, head): the pairs (i, i + rot_dim / 2).
__global__ void rope_kernel(RopeDev t, int64_t head_dim, int64_t pos0, float* x, int64_t cols) {
  await_previous();
  float* v = x + blockIdx.x * cols + blockIdx.y * head_dim;
  rope_rotate_half(v, t, float(pos0 + blockIdx.x));
}

unsigned blocks_for(int64_t n, int threads) {
  return unsigned(std::min<int64_t>((n + threads - 1) / threads, 65535));
}

}  // namespace

void embed(const DW& w, const int32_t* ids, int64_t T, float* out, cudaStream_t s) {
  if (T == 0) return;
  with_fmt(w.fmt, [&](auto f) {
    launch("embed", embed_kernel<decltype(f)::value>, dim3(blocks_for(w.cols, 256), unsigned(T)), dim3(256), s, w, ids,
           out);
  });
}

void add_rms_norm(float* x, const float* y, const float* w, float eps, float* h, int64_t rows, int64_t cols,
                  cudaStream_t s) {
  if (rows == 0) return;
  const int threads = cols >= 1024 ? 1024 : cols >= 256 ? 256 : 32;
  launch("add_rms_norm", add_rms_norm_kernel, dim3(unsigned(rows)), dim3(threads), s, x, y, w, eps, h, cols);
}

void add(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch("add", add_kernel, dim3(blocks_for(n, 256)), dim3(256), s, x, y, n);
}

void add_scaled_rows(float* out, const float* y, const float* scale, bool sigmoid, int64_t rows, int64_t cols,
                     cudaStream_t s) {
  if (rows == 0) return;
  launch("add_scaled_rows", add_scaled_rows_kernel, dim3(blocks_for(cols, 256), unsigned(rows)), dim3(256), s, out, y,
         scale, sigmoid, cols);
}

void silu_mul(const float* g, const float* u, float* h, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch("silu_mul", silu_mul_kernel, dim3(blocks_for(n, 256)), dim3(256), s, g, u, h, n);
}

void rope(const RopeDev& t, int64_t head_dim, int64_t pos0, float* x, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return;
  launch("rope", rope_kernel, dim3(unsigned(rows), unsigned(cols / head_dim)), dim3(64), s, t, head_dim, pos0, x, cols);
}

}  // namespace moeflux::cuda
