// GatedDeltaNet on the device: the projections' rows scattered into the per-token vector
// [q | k | v | z | b | a], then one block per value head walking the sequence's tokens in
// order: the causal conv1d + SiLU of the head's channels (its key head's q and k, its own v),
// L2-normalised q / k, the gated delta rule with a thread per column of the head's state, the
// gated RMSNorm. Blocks of value heads that share a key head compute the same q / k; the first
// of them writes those channels' new conv window (into another buffer: the others may not have
// read the old one yet).
#include <cmath>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kThreads = 128, kMaxConvHist = 8, kMaxChannels = 1024, kMaxDim = 512;

__global__ void scatter_kernel(const float* y, int64_t rows, int64_t n, const int32_t* dst, int64_t width, float* out) {
  const int64_t r = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[r * width + dst[i]] = y[r * n + i];
}

// The sum over the block of v (every thread gets it); red: kThreads / 32 floats of shared memory.
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) s += red[w];
  return s;
}

__global__ void __launch_bounds__(kThreads)
    gdn_heads_kernel(GdnDev g, const float* proj, int64_t T, const float* conv_state, float* conv_next, float* rec_state,
                     float* out) {
  __shared__ float win[kMaxConvHist][kMaxChannels];  // the head's channels' previous inputs, oldest first
  __shared__ float xin[kMaxChannels];                 // conv output + SiLU of this token: q | k | v
  __shared__ float red[kThreads / 32];
  const int h = blockIdx.x, kd = g.k_dim, vd = g.v_dim, hist = g.conv_kernel - 1;
  const int group = g.n_v_heads / g.n_k_heads, kh = h / group;
  const int64_t key_dim = int64_t(g.n_k_heads) * kd, value_dim = int64_t(g.n_v_heads) * vd;
  const int64_t conv_dim = 2 * key_dim + value_dim, proj_dim = conv_dim + value_dim + 2 * g.n_v_heads;
  const int nch = 2 * kd + vd;
  // Channel i of this head (q, then k, then v) in the conv's channel order.
  auto channel = [&](int i) -> int64_t {
    return i < kd ? int64_t(kh) * kd + i : i < 2 * kd ? key_dim + int64_t(kh) * kd + (i - kd) : 2 * key_dim + int64_t(h) * vd + (i - 2 * kd);
  };
  for (int i = threadIdx.x; i < nch; i += blockDim.x)
    for (int j = 0; j < hist; ++j) win[j][i] = conv_state[int64_t(j) * conv_dim + channel(i)];
  float* S = rec_state + int64_t(h) * kd * vd;  // (k_dim, v_dim), row-major
  const float A = -expf(g.A_log[h]), q_scale = 1.0f / sqrtf(float(kd));
  __syncthreads();
  for (int64_t t = 0; t < T; ++t) {
    const float* p = proj + t * proj_dim;
    for (int i = threadIdx.x; i < nch; i += blockDim.x) {  // conv step, SiLU; the window shifts
      const int64_t c = channel(i);
      const float* w = g.conv_w + c * g.conv_kernel;
      const float x = p[c];
      float acc = w[hist] * x;
      for (int j = 0; j < hist; ++j) acc += w[j] * win[j][i];
      for (int j = 0; j + 1 < hist; ++j) win[j][i] = win[j + 1][i];
      if (hist > 0) win[hist - 1][i] = x;
      xin[i] = acc / (1.0f + expf(-acc));
    }
    __syncthreads();
    float sq = 0.0f, sk = 0.0f;
    for (int i = threadIdx.x; i < kd; i += blockDim.x) sq += xin[i] * xin[i], sk += xin[kd + i] * xin[kd + i];
    sq = block_sum(sq, red);
    sk = block_sum(sk, red);
    const float iq = 1.0f / sqrtf(sq + 1e-6f), ik = 1.0f / sqrtf(sk + 1e-6f);  // kGdnL2NormEps
    __syncthreads();
    for (int i = threadIdx.x; i < kd; i += blockDim.x) xin[i] = xin[i] * iq * q_scale, xin[kd + i] = xin[kd + i] * ik;
    __syncthreads();
    const float* q = xin;
    const float* k = xin + kd;
    const float* v = xin + 2 * kd;
    const float a = p[conv_dim + value_dim + g.n_v_heads + h] + g.dt_bias[h];
    const float decay = expf(A * (a > 20.0f ? a : log1pf(expf(a))));
    const float beta = 1.0f / (1.0f + expf(-p[conv_dim + value_dim + h]));
    float o[kMaxDim / kThreads];
#pragma unroll
    for (int jj = 0; jj < kMaxDim / kThreads; ++jj) {
      const int j = threadIdx.x + jj * kThreads;
      o[jj] = 0.0f;
      if (j >= vd) continue;
      float kv = 0.0f;
      for (int i = 0; i < kd; ++i) kv += (S[int64_t(i) * vd + j] * decay) * k[i];
      const float delta = (v[j] - kv) * beta;
      float acc = 0.0f;
      for (int i = 0; i < kd; ++i) {
        const float s = S[int64_t(i) * vd + j] * decay + k[i] * delta;
        S[int64_t(i) * vd + j] = s;
        acc += s * q[i];
      }
      o[jj] = acc;
    }
    float ss = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kMaxDim / kThreads; ++jj) ss += o[jj] * o[jj];
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / float(vd) + g.norm_eps);
    const float* z = p + conv_dim + int64_t(h) * vd;
#pragma unroll
    for (int jj = 0; jj < kMaxDim / kThreads; ++jj) {
      const int j = threadIdx.x + jj * kThreads;
      if (j >= vd) continue;
      const float zj = z[j];
      out[t * value_dim + int64_t(h) * vd + j] = o[jj] * inv * g.norm[j] * (zj / (1.0f + expf(-zj)));
    }
    __syncthreads();  // xin is rewritten by the next token
  }
  for (int i = threadIdx.x; i < nch; i += blockDim.x) {
    if (i < 2 * kd && h % group != 0) continue;  // the key head's first value head writes q / k
    for (int j = 0; j < hist; ++j) conv_next[int64_t(j) * conv_dim + channel(i)] = win[j][i];
  }
}

}  // namespace

bool gdn_fits(const GdnDev& g) {
  return g.conv_kernel - 1 <= kMaxConvHist && 2 * g.k_dim + g.v_dim <= kMaxChannels && g.v_dim <= kMaxDim &&
         g.n_k_heads > 0 && g.n_v_heads % g.n_k_heads == 0;
}

void gdn_scatter(const float* y, int64_t rows, int64_t n, const int32_t* dst, int64_t width, float* out, cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  scatter_kernel<<<dim3(unsigned(std::min<int64_t>((n + 255) / 256, 1024)), unsigned(rows)), 256, 0, s>>>(y, rows, n, dst,
                                                                                                        width, out);
  MF_CUDA_LAUNCHED("gdn_scatter");
}

void gdn_heads(const GdnDev& g, const float* proj, int64_t T, float* conv_state, float* conv_next, float* rec_state,
               float* out, cudaStream_t s) {
  MF_ASSERT(gdn_fits(g));
  if (T == 0) return;
  gdn_heads_kernel<<<unsigned(g.n_v_heads), kThreads, 0, s>>>(g, proj, T, conv_state, conv_next, rec_state, out);
  MF_CUDA_LAUNCHED("gdn_heads");
  const int64_t conv_floats = int64_t(g.conv_kernel - 1) * (2 * g.n_k_heads * g.k_dim + g.n_v_heads * g.v_dim);
  if (conv_floats > 0)
    MF_CUDA(cudaMemcpyAsync(conv_state, conv_next, size_t(conv_floats) * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

}  // namespace moeflux::cuda
