// The CUDA backend's kernel launchers (host functions; every pointer is device memory unless
// named otherwise). All work is queued on `s`; nothing here synchronises.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/dweight.cuh"

namespace moeflux::cuda {

// --- basic.cu ---
// out (T, w.cols) = rows ids[0 .. T) of the table, dequantised.
void embed(const DW& w, const int32_t* ids, int64_t T, float* out, cudaStream_t s);
// Per row: x += y (when y), h = rmsnorm(x) * w (w null: no weight). h may be x.
void add_rms_norm(float* x, const float* y, const float* w, float eps, float* h, int64_t rows, int64_t cols,
                  cudaStream_t s);
// x (n) += y (n).
void add(float* x, const float* y, int64_t n, cudaStream_t s);
// out (rows, cols) += g(scale[r]) * y: g = sigmoid when `sigmoid`, identity otherwise; scale
// null: 1.
void add_scaled_rows(float* out, const float* y, const float* scale, bool sigmoid, int64_t rows, int64_t cols,
                     cudaStream_t s);
// h (n) = silu(g) * u.
void silu_mul(const float* g, const float* u, float* h, int64_t n, cudaStream_t s);

struct RopeDev {
  const float* inv_freq = nullptr;  // (rot_dim / 2)
  int32_t rot_dim = 0;
  float attn_factor = 1.0f;
};
// Rotate-half RoPE of the first rot_dim values of every head_dim-wide head of each row of x
// (rows, cols); row r at position pos0 + r.
void rope(const RopeDev& t, int64_t head_dim, int64_t pos0, float* x, int64_t rows, int64_t cols, cudaStream_t s);

// --- matmul.cu ---
// y (T, w.rows) = x (T, w.cols) W^T.
void matmul(const DW& w, const float* x, int64_t T, float* y, cudaStream_t s);
// ys[i] = x ws[i]^T for weights sharing x: one launch for several of one format and width
// (one token, rows read wide), else one each.
void matmul(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, cudaStream_t s);

// --- attention.cu ---
struct GqaDev {
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0, window = 0;
  bool gated = false;
  float norm_eps = 1e-6f;
  const float* q_norm = nullptr;  // (head_dim) or null
  const float* k_norm = nullptr;
  RopeDev rope;
};
// One sequence's T new tokens at positions *pos .. (device memory; also their cache indices):
// splits qg (T, n_heads * head_dim * (gated ? 2 : 1)) into q and gate, normalises and ropes q
// and the new keys kn (T, n_kv * head_dim), and appends kn / vn to the cache k, v ((*pos + T,
// n_kv, head_dim) each, capacity already there).
void gqa_prep(const GqaDev& a, const float* qg, const float* kn, const float* vn, int64_t T, const int32_t* pos,
              float* q, float* gate, float* k, float* v, cudaStream_t s);
// att (T, n_heads * head_dim): causal attention of each of the T queries (cache index *pos + t)
// over the cache (its window), times sigmoid(gate) when gated. ctx_max: at least the positions
// any query attends to (the kernel is chosen by it: recorded steps keep their choice).
void gqa_attend(const GqaDev& a, const float* q, const float* gate, const float* k, const float* v, int64_t T,
                const int32_t* pos, int64_t ctx_max, float* att, cudaStream_t s);

// --- moe.cu ---
struct RouteDev {
  int32_t kind = 0;  // RouteKind
  int32_t n_experts = 0, k = 0;
  bool renorm = false;
  int32_t n_group = 1, topk_group = 1;
  float scaling = 1.0f;
  const float* bias = nullptr;  // SigmoidGrouped selection bias (n_experts) or null
};
// ids, weights (T, k) of the router logits (T, n_experts); order (T, k): each token's slots in
// ascending (expert id, slot), the order in which outputs are summed.
void route(const RouteDev& r, const float* logits, int64_t T, int32_t* ids, float* weights, int32_t* order,
           cudaStream_t s);

// The routed experts of a step. Pairs p = t * k + j (token t, slot j) are grouped by expert into
// tiles of at most kTile pairs; tiles (kTileFields ints each: expert, first sorted pair, count)
// and the count of tiles are written on the device, the grid covers max_tiles.
constexpr int kTile = 8, kTileFields = 3;
int64_t max_tiles(int64_t pairs, int64_t n_experts);
void group_pairs(const int32_t* ids, int64_t pairs, int32_t n_experts, int32_t* sorted, int32_t* tiles,
                 int32_t* n_tiles, cudaStream_t s);
// h (pairs, hidden) = silu(gate_e x_t) * (up_e x_t); table: per expert [gate, up, down]; an
// expert whose gate data is null is skipped (not in this window). wide: the experts' rows read
// 16 bytes at a time (wide_rows, dot_rows.cuh).
void experts_gate_up(const DW* table, int fmt, bool wide, int64_t hidden, int64_t dim, const float* x, int32_t k,
                     const int32_t* sorted, const int32_t* tiles, const int32_t* n_tiles, int64_t tiles_max, float* h,
                     cudaStream_t s);
// y (pairs, dim) = down_e h_p.
void experts_down(const DW* table, int fmt, bool wide, int64_t hidden, int64_t dim, const float* h, const int32_t* sorted,
                  const int32_t* tiles, const int32_t* n_tiles, int64_t tiles_max, float* y, cudaStream_t s);
// out (T, dim) = sum over slots in `order` of weight * y.
void combine(const float* y, const float* weights, const int32_t* order, int64_t T, int32_t k, int64_t dim, float* out,
             cudaStream_t s);

}  // namespace moeflux::cuda
