// The routed experts on the device: routing (a warp per token), grouping of (token, slot)
// pairs by expert into tiles, gate/up + SiLU and down over each tile (a warp per weight row,
// each row read once per tile; the experts with many pairs on tensor cores, mma_rows.cu), and
// the weighted combine in ascending expert id.
#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/cuda/check.cuh"
#include "backend/cuda/dot_rows.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux::cuda {

namespace {

constexpr int kRowsPerBlock = 8, kMaxExperts = 1024, kMaxK = 32;

struct Cand {
  float v;
  int i;  // INT_MAX: none
};

// a before b: larger value, ties to the lower index; none last.
__device__ __forceinline__ bool before(Cand a, Cand b) {
  if (a.i == INT_MAX) return false;
  if (b.i == INT_MAX) return true;
  return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ Cand warp_best(Cand c) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const Cand d{__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.i, o)};
    if (before(d, c)) c = d;
  }
  return c;
}

// Lane l's value i is expert l + 32 i (P a lane: n <= 32 P). The k best of v (ties to the lower
// index) in order: lane j < k gets slot j's expert (id) and value (val); every lane calls
// pick(j, c) with slot j's choice as it is made. taken: the bits of the lane's values chosen.
template <int P, typename Pick>
__device__ __forceinline__ void warp_topk(const float (&v)[P], int n, int k, int& id, float& val, Pick pick) {
  const int lane = threadIdx.x & 31;
  uint32_t taken = 0;
  for (int j = 0; j < k; ++j) {
    Cand c{0.0f, INT_MAX};
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = lane + 32 * i;
      if (e < n && !(taken >> i & 1u) && before(Cand{v[i], e}, c)) c = Cand{v[i], e};
    }
    c = warp_best(c);
    if (c.i != INT_MAX && c.i % 32 == lane) taken |= 1u << (c.i / 32);
    if (lane == j) id = c.i, val = c.v;
    pick(j, c);
  }
}

// v[i] of the lane that holds expert e (every lane calls it).
template <int P>
__device__ __forceinline__ float value_of(const float (&v)[P], int e) {
  float r = 0.0f;
#pragma unroll
  for (int i = 0; i < P; ++i)
    if (i == e / 32) r = v[i];
  return __shfl_sync(0xffffffffu, r, e % 32);
}

// A warp a token: the k experts of its logits (n), their weights and ascending (id, slot) order;
// for one token also its tiles (a tile of one pair for each expert, ascending, as group_kernel's).
template <int P>
__global__ void __launch_bounds__(32)
    route_kernel(RouteDev r, const float* logits, int32_t* ids_out, float* w_out, int32_t* order_out,
                 int32_t* ids_host, int32_t* sorted, int32_t* tiles, int32_t* n_tiles) {
  await_previous();
  __shared__ float choice[kMaxExperts];
  __shared__ float gscore[64];
  __shared__ int kept[64];
  const int lane = threadIdx.x, n = r.n_experts, K = r.k;
  const int64_t t = blockIdx.x;
  const float* lg = logits + t * n;
  float v[P];  // the scores ranked
#pragma unroll
  for (int i = 0; i < P; ++i) v[i] = lane + 32 * i < n ? lg[lane + 32 * i] : 0.0f;
  int id = 0;
  float w = 0.0f, val = 0.0f;
  if (r.kind == 0) {  // SoftmaxTopK
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (lane + 32 * i < n) m = fmaxf(m, v[i]);
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (lane + 32 * i < n) s += (v[i] = expf(v[i] - m));
    s = warp_sum(s);
#pragma unroll
    for (int i = 0; i < P; ++i) v[i] /= s;
    float sum = 0.0f;
    warp_topk(v, n, K, id, val, [&](int, Cand c) { sum += c.v; });
    w = r.renorm ? val / sum : val;
  } else if (r.kind == 1) {  // TopKSoftmax
    warp_topk(v, n, K, id, val, [](int, Cand) {});
    const float m = __shfl_sync(0xffffffffu, val, 0);  // the first is the largest
    const float ex = lane < K ? expf(val - m) : 0.0f;
    float s = 0.0f;
    for (int j = 0; j < K; ++j) s += __shfl_sync(0xffffffffu, ex, j);
    w = ex / s;
  } else {  // SigmoidGrouped
    float p[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = lane + 32 * i;
      p[i] = 1.0f / (1.0f + expf(-v[i]));
      v[i] = p[i] + (r.bias && e < n ? r.bias[e] : 0.0f);
      if (e < n) choice[e] = v[i];
    }
    __syncwarp();
    const int per = n / r.n_group;
    for (int g = lane; g < r.n_group; g += 32) {  // the group's two best choice scores
      int b0 = -1, b1 = -1;
      for (int i = 0; i < per; ++i) {
        const Cand c{choice[g * per + i], i};
        if (b0 < 0 || before(c, Cand{choice[g * per + b0], b0})) b1 = b0, b0 = i;
        else if (b1 < 0 || before(c, Cand{choice[g * per + b1], b1})) b1 = i;
      }
      gscore[g] = choice[g * per + b0] + choice[g * per + b1];
    }
    __syncwarp();
    if (lane == 0) {
      for (int g = 0; g < r.n_group; ++g) kept[g] = 0;
      for (int j = 0; j < r.topk_group; ++j) {
        int best = -1;
        for (int g = 0; g < r.n_group; ++g)
          if (!kept[g] && (best < 0 || before(Cand{gscore[g], g}, Cand{gscore[best], best}))) best = g;
        kept[best] = 1;
      }
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < P; ++i) {  // dropped groups compete with 0, as transformers' masked_fill
      const int e = lane + 32 * i;
      if (e < n && !kept[e / per]) v[i] = 0.0f;
    }
    float sum = 0.0f, mine = 0.0f;
    warp_topk(v, n, K, id, val, [&](int j, Cand c) {
      const float pj = value_of(p, c.i);
      sum += pj;
      if (lane == j) mine = pj;
    });
    const float denom = r.renorm ? sum + 1e-20f : 1.0f;
    w = mine / denom * r.scaling;
  }
  if (lane < K) {
    int rank = 0;  // the slot's place in ascending (id, slot)
    for (int i = 0; i < K; ++i) {
      const int o = __shfl_sync(0xffffffffu >> (32 - K), id, i);
      rank += o < id || (o == id && i < lane);
    }
    ids_out[t * K + lane] = id, w_out[t * K + lane] = w, order_out[t * K + rank] = lane;
    if (ids_host) ids_host[t * K + lane] = id;
    if (tiles) {
      sorted[rank] = lane;
      tiles[rank * kTileFields] = id, tiles[rank * kTileFields + 1] = rank, tiles[rank * kTileFields + 2] = 1;
    }
  }
  if (tiles && lane == 0) *n_tiles = K;
}

__global__ void group_kernel(const int32_t* ids, int64_t pairs, int32_t n_experts, int32_t tc_min, int32_t* sorted,
                             int32_t* tiles, int32_t* n_tiles, int32_t* tc_tiles, int32_t* n_tc) {
  await_previous();
  __shared__ int cnt[kMaxExperts], fill[kMaxExperts];
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&cnt[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x < 32) {  // a warp scans the counts: each lane a slice of experts
    const int lane = threadIdx.x, per = (n_experts + 31) / 32, lo = min(n_experts, lane * per),
              hi = min(n_experts, lo + per);
    auto on_tc = [&](int e) { return tc_tiles && cnt[e] >= tc_min; };
    int pairs_in = 0, tiles_in = 0, tc_in = 0;
    for (int e = lo; e < hi; ++e) {
      pairs_in += cnt[e];
      if (on_tc(e)) tc_in += (cnt[e] + kTcM - 1) / kTcM;
      else tiles_in += (cnt[e] + kTile - 1) / kTile;
    }
    int off = pairs_in, nt = tiles_in, ntc = tc_in;  // inclusive scans over the lanes
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int a = __shfl_up_sync(0xffffffffu, off, o), b = __shfl_up_sync(0xffffffffu, nt, o),
                c = __shfl_up_sync(0xffffffffu, ntc, o);
      if (lane >= o) off += a, nt += b, ntc += c;
    }
    if (lane == 31) {
      *n_tiles = nt;
      if (tc_tiles) *n_tc = ntc;
    }
    off -= pairs_in, nt -= tiles_in, ntc -= tc_in;
    for (int e = lo; e < hi; ++e) {
      fill[e] = off;
      const bool tc = on_tc(e);
      const int size = tc ? kTcM : kTile;
      int32_t* out = tc ? tc_tiles : tiles;
      int& n = tc ? ntc : nt;
      for (int j = 0; j < cnt[e]; j += size, ++n)
        out[n * kTileFields] = e, out[n * kTileFields + 1] = off + j, out[n * kTileFields + 2] = min(size, cnt[e] - j);
      off += cnt[e];
    }
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) sorted[atomicAdd(&fill[ids[p]], 1)] = int32_t(p);
}

// Rows per warp where the rows read wide (a tile of one token then reads x once for them,
// dot_rows_x1), else one: two gate and two up rows, or four down rows (the down rows are
// narrower: hidden columns).
constexpr int kGateUpRows = 2, kDownRows = 4;
template <bool Wide, int Rows>
constexpr int kWarpRows = Wide ? Rows : 1;

template <int F, bool Wide>
__global__ void __launch_bounds__(kRowsPerBlock * 32, 2)
    gate_up_kernel(const DW* table, int64_t hidden, int64_t dim, const float* x, int32_t k, const int32_t* sorted,
                   const int32_t* tiles, const int32_t* n_tiles, float* h) {
  await_previous();
  constexpr int RW = kWarpRows<Wide, kGateUpRows>;
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  const DW g = table[3 * e], u = table[3 * e + 1];
  if (!g.data) return;
  const int64_t r0 = (int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32) * RW;
  if (r0 >= hidden) return;
  const bool lane0 = (threadIdx.x & 31) == 0;
  if constexpr (Wide && kWide<F> > 0) {
    if (n == 1) {
      const int32_t p = sorted[first];
      float acc[2][RW] = {};
      const DW ws[2] = {g, u};
      dot_rows_x1<F, RW, 2>(ws, r0, x + int64_t(p / k) * dim, acc);
#pragma unroll
      for (int i = 0; i < RW; ++i) {
        const float a = warp_sum(acc[0][i]), b = warp_sum(acc[1][i]);
        if (lane0 && r0 + i < hidden) h[int64_t(p) * hidden + r0 + i] = a / (1.0f + expf(-a)) * b;
      }
      return;
    }
  }
  const float* xs[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t) xs[t] = x + int64_t(sorted[first + min(t, n - 1)] / k) * dim;
  for (int i = 0; i < RW && r0 + i < hidden; ++i) {
    float ag[kTile] = {}, au[kTile] = {};
    if constexpr (Wide && kWide<F> > 0) {
      dot_row_wide<F>(g, r0 + i, xs, n, ag);
      dot_row_wide<F>(u, r0 + i, xs, n, au);
    } else {
      dot_rows<F>(g, r0 + i, xs, n, ag);
      dot_rows<F>(u, r0 + i, xs, n, au);
    }
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t >= n) break;
      const float a = warp_sum(ag[t]), b = warp_sum(au[t]);
      if (lane0) h[int64_t(sorted[first + t]) * hidden + r0 + i] = a / (1.0f + expf(-a)) * b;
    }
  }
}

template <int F, bool Wide>
__global__ void __launch_bounds__(kRowsPerBlock * 32, 2)
    down_kernel(const DW* table, int64_t hidden, int64_t dim, const float* h, const int32_t* sorted,
                const int32_t* tiles, const int32_t* n_tiles, float* y) {
  await_previous();
  constexpr int RW = kWarpRows<Wide, kDownRows>;
  const int tile = blockIdx.y;
  if (tile >= *n_tiles) return;
  const int e = tiles[tile * kTileFields], first = tiles[tile * kTileFields + 1], n = tiles[tile * kTileFields + 2];
  const DW d = table[3 * e + 2];
  if (!d.data) return;
  const int64_t r0 = (int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32) * RW;
  if (r0 >= dim) return;
  const bool lane0 = (threadIdx.x & 31) == 0;
  if constexpr (Wide && kWide<F> > 0) {
    if (n == 1) {
      const int32_t p = sorted[first];
      float acc[1][RW] = {};
      const DW ws[1] = {d};
      dot_rows_x1<F, RW, 1>(ws, r0, h + int64_t(p) * hidden, acc);
#pragma unroll
      for (int i = 0; i < RW; ++i) {
        const float a = warp_sum(acc[0][i]);
        if (lane0 && r0 + i < dim) y[int64_t(p) * dim + r0 + i] = a;
      }
      return;
    }
  }
  const float* xs[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t) xs[t] = h + int64_t(sorted[first + min(t, n - 1)]) * hidden;
  for (int i = 0; i < RW && r0 + i < dim; ++i) {
    float acc[kTile] = {};
    if constexpr (Wide && kWide<F> > 0) dot_row_wide<F>(d, r0 + i, xs, n, acc);
    else dot_rows<F>(d, r0 + i, xs, n, acc);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t >= n) break;
      const float a = warp_sum(acc[t]);
      if (lane0) y[int64_t(sorted[first + t]) * dim + r0 + i] = a;
    }
  }
}

__global__ void combine_kernel(const float* y, const float* weights, const int32_t* order, int32_t k, int64_t dim,
                               float* out) {
  await_previous();
  const int64_t t = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < dim; i += int64_t(gridDim.x) * blockDim.x) {
    float o = 0.0f;
    for (int n = 0; n < k; ++n) {
      const int j = order[t * k + n];
      o = __fadd_rn(o, __fmul_rn(weights[t * k + j], y[(t * k + j) * dim + i]));
    }
    out[t * dim + i] = o;
  }
}

__global__ void scatter_rows_kernel(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* y) {
  await_previous();
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    float* dst = y + int64_t(rows[i]) * dim;
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < dim; c += int64_t(gridDim.x) * blockDim.x)
      dst[c] = src[i * dim + c];
  }
}

}  // namespace

void scatter_rows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* y, cudaStream_t s) {
  if (n == 0) return;
  const dim3 grid(unsigned((dim + 255) / 256), unsigned(std::min<int64_t>(n, 65535)));
  launch("scatter_rows", scatter_rows_kernel, grid, dim3(256), s, src, rows, n, dim, y);
}

void route(const RouteDev& r, const float* logits, int64_t T, int32_t* ids, float* weights, int32_t* order,
           cudaStream_t s, int32_t* ids_host, const TilesOut* one) {
  MF_ASSERT(r.n_experts <= kMaxExperts && r.k >= 1 && r.k <= kMaxK && r.k <= r.n_experts && r.n_group <= 64);
  MF_ASSERT(!one || T == 1);
  if (T == 0) return;
  const TilesOut out = one ? *one : TilesOut{};
  const auto go = [&](auto kernel) {
    launch("route", kernel, dim3(unsigned(T)), dim3(32), s, r, logits, ids, weights, order, ids_host, out.sorted,
           out.tiles, out.n_tiles);
  };
  if (r.n_experts <= 128) go(route_kernel<4>);
  else if (r.n_experts <= 256) go(route_kernel<8>);
  else if (r.n_experts <= 512) go(route_kernel<16>);
  else go(route_kernel<32>);
}

int64_t max_tiles(int64_t pairs, int64_t n_experts) { return pairs / kTile + std::min(pairs, n_experts) + 1; }
int64_t max_tc_tiles(int64_t pairs, int64_t n_experts) { return pairs / kTcM + std::min(pairs, n_experts) + 1; }

void group_pairs(const int32_t* ids, int64_t pairs, int32_t n_experts, int32_t tc_min, int32_t* sorted, int32_t* tiles,
                 int32_t* n_tiles, int32_t* tc_tiles, int32_t* n_tc, cudaStream_t s) {
  MF_ASSERT(n_experts <= kMaxExperts && (!tc_tiles || (n_tc && tc_min >= 1)));
  launch("group_pairs", group_kernel, dim3(1), dim3(256), s, ids, pairs, n_experts, tc_min, sorted, tiles, n_tiles, tc_tiles,
         n_tc);
}

void experts_gate_up(const DW* table, int fmt, bool wide, int64_t vec, int64_t hidden, int64_t dim, const float* x,
                     int32_t k, const PairTiles& pt, float* h, DevicePool& pool, cudaStream_t s) {
  if (vec) experts_gate_up_vec(table, vec, hidden, dim, x, k, pt, h, s);
  else with_fmt_wide(fmt, wide, [&](auto f, auto w) {
    const int64_t per_block = kRowsPerBlock * kWarpRows<decltype(w)::value, kGateUpRows>;
    const dim3 grid(unsigned((hidden + per_block - 1) / per_block), unsigned(pt.tiles_max));
    launch("experts_gate_up", gate_up_kernel<decltype(f)::value, decltype(w)::value>, grid, dim3(kRowsPerBlock * 32), s,
           table, hidden, dim, x, k, pt.sorted, pt.tiles, pt.n_tiles, h);
  });
  if (pt.tc_tiles) experts_gate_up_tc(table, fmt, hidden, dim, x, k, pt, h, pool, s);
}

void experts_down(const DW* table, int fmt, bool wide, int64_t vec, int64_t hidden, int64_t dim, const float* h,
                  int32_t k, const PairTiles& pt, float* y, DevicePool& pool, cudaStream_t s) {
  if (vec) experts_down_vec(table, vec, hidden, dim, h, pt, k, y, s);
  else with_fmt_wide(fmt, wide, [&](auto f, auto w) {
    const int64_t per_block = kRowsPerBlock * kWarpRows<decltype(w)::value, kDownRows>;
    const dim3 grid(unsigned((dim + per_block - 1) / per_block), unsigned(pt.tiles_max));
    launch("experts_down", down_kernel<decltype(f)::value, decltype(w)::value>, grid, dim3(kRowsPerBlock * 32), s, table,
           hidden, dim, h, pt.sorted, pt.tiles, pt.n_tiles, y);
  });
  if (pt.tc_tiles) experts_down_tc(table, fmt, hidden, dim, h, pt, y, pool, s);
}

void combine(const float* y, const float* weights, const int32_t* order, int64_t T, int32_t k, int64_t dim, float* out,
             cudaStream_t s) {
  if (T == 0) return;
  launch("combine", combine_kernel, dim3(unsigned((dim + 255) / 256), unsigned(T)), dim3(256), s, y, weights, order, k, dim,
         out);
}

}  // namespace moeflux::cuda
