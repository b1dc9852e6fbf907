// The CUDA backend's kernel launchers (host functions; every pointer is device memory unless
// named otherwise). All work is queued on `s`; nothing here synchronises.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/device_memory.cuh"
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
// The current device's multiprocessors (the backend's device, current on its thread).
int multiprocessors();
// The shared memory a block of the current device may opt in to, in bytes.
int64_t smem_optin();
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
// splits > 1: split-K, each query's positions in `splits` slices, part scratch of
// gqa_part_floats floats.
// flash: the query heads of a kv head in one block (where gqa_flash_fits).
void gqa_attend(const GqaDev& a, const float* q, const float* gate, const float* k, const float* v, int64_t T,
                const int32_t* pos, int64_t ctx_max, float* att, cudaStream_t s, int splits = 1, float* part = nullptr,
                bool flash = false);
bool gqa_flash_fits(const GqaDev& a);
// The slices split-K takes for T queries over a cache of ctx_max positions (1: none).
constexpr int64_t kSplitPositions = 512, kMaxSplits = 64;
int gqa_splits(const GqaDev& a, int64_t T, int64_t ctx_max, bool flash = false);
// Split-K's slices of a context of ctx_max positions for `blocks` blocks a slice: slices of at
// least min_positions, as many as give two blocks a multiprocessor, at most kMaxSplits.
int split_slices(int64_t blocks, int64_t ctx_max, int64_t min_positions);
inline int64_t gqa_part_floats(const GqaDev& a, int64_t T, int splits) {
  return T * a.n_heads * splits * (a.head_dim + 4);
}

// --- gdn.cu ---
struct GdnDev {
  int32_t n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  float norm_eps = 1e-6f;
  const float* conv_w = nullptr;   // (conv_dim, conv_kernel)
  const float* A_log = nullptr;    // (n_v_heads)
  const float* dt_bias = nullptr;  // (n_v_heads)
  const float* norm = nullptr;     // (v_dim)
};
// Whether gdn_heads runs this shape (conv kernel, head widths within its shared memory).
bool gdn_fits(const GdnDev& g);
// out (rows, width)[r, dst[i]] = y (rows, n)[r, i].
void gdn_scatter(const float* y, int64_t rows, int64_t n, const int32_t* dst, int64_t width, float* out, cudaStream_t s);
// One sequence's T tokens (proj: (T, proj_dim) per-token vectors [q | k | v | z | b | a]) through
// the conv, the gated delta rule and the gated RMSNorm: out (T, n_v_heads * v_dim). The conv
// window conv_state is updated through conv_next (the same size), the recurrent state in place.
void gdn_heads(const GdnDev& g, const float* proj, int64_t T, float* conv_state, float* conv_next, float* rec_state,
               float* out, cudaStream_t s);

// --- mla.cu ---
struct MlaDev {
  int32_t n_heads = 0, nope = 0, rope_dim = 0, v_dim = 0, rank = 0;
  bool interleave = true;
  float scale = 0.0f, eps = 1e-6f;
  const float* kv_a_norm = nullptr;  // (rank)
  RopeDev rope;
};
// Whether the MLA kernels run this shape.
bool mla_fits(const MlaDev& a);
// T new tokens at positions *pos ..: qpe (T, H, rope_dim) = q's roped q_pe (q: (T, H * (nope +
// rope_dim))); kv (T, rank + rope_dim) -> cache_c row *pos + t = kv_a_layernorm(c), cache_kpe
// row = roped k_pe.
void mla_prep(const MlaDev& a, const float* q, const float* kv, int64_t T, const int32_t* pos, float* qpe,
              float* cache_c, float* cache_kpe, cudaStream_t s);
// qc (T, H, rank): each head's q_nope through kv_b's key rows, transposed.
void mla_absorb_q(const MlaDev& a, const DW& wkv_b, const float* q, int64_t T, float* qc, cudaStream_t s);
// ctx (T, H, rank): attention in the latent space over positions 0 .. *pos + t; splits > 1:
// split-K, each query's positions in `splits` slices (mla_splits of the cache's capacity), part
// scratch of mla_part_floats floats.
void mla_attend(const MlaDev& a, const float* qc, const float* qpe, const float* cache_c, const float* cache_kpe,
                int64_t T, const int32_t* pos, float* ctx, cudaStream_t s, int splits = 1, float* part = nullptr);
int mla_splits(const MlaDev& a, int64_t T, int64_t ctx_max);
inline int64_t mla_part_floats(const MlaDev& a, int64_t T, int splits) { return T * a.n_heads * splits * (a.rank + 4); }
// att (T, H * v_dim): each head's context through kv_b's value rows.
void mla_unabsorb(const MlaDev& a, const DW& wkv_b, const float* ctx, int64_t T, float* att, cudaStream_t s);

// --- moe.cu ---
struct RouteDev {
  int32_t kind = 0;  // RouteKind
  int32_t n_experts = 0, k = 0;
  bool renorm = false;
  int32_t n_group = 1, topk_group = 1;
  float scaling = 1.0f;
  const float* bias = nullptr;  // SigmoidGrouped selection bias (n_experts) or null
};

// The routed experts of a step. Pairs p = t * k + j (token t, slot j) are grouped by expert
// (sorted) into tiles (kTileFields ints each: expert, first sorted pair, count): of at most kTile
// pairs, or, for an expert with at least tc_min pairs, of at most kTcM pairs in a list of their
// own for the tensor cores (mma_rows.cu). The counts of tiles are written on the device; the
// grids cover the maxima.
constexpr int kTile = 8, kTileFields = 3;
struct PairTiles {
  int64_t pairs = 0;
  const int32_t* sorted = nullptr;    // (pairs)
  const int32_t* tiles = nullptr;     // (tiles_max, kTileFields)
  const int32_t* n_tiles = nullptr;   // (1)
  int64_t tiles_max = 0;
  const int32_t* tc_tiles = nullptr;  // (tc_max, kTileFields); null: every expert in `tiles`
  const int32_t* n_tc = nullptr;      // (1)
  int64_t tc_max = 0;
};
int64_t max_tiles(int64_t pairs, int64_t n_experts);
int64_t max_tc_tiles(int64_t pairs, int64_t n_experts);
// ids, weights (T, k) of the router logits (T, n_experts); order (T, k): each token's slots in
// ascending (expert id, slot), the order in which outputs are summed. ids_host (mapped host
// memory, or null): the ids again, written there by the kernel (no copy on the stream). one
// (one token, or null): its pairs grouped into these tiles as group_pairs would (no tensor-core
// tiles), by the same kernel.
struct TilesOut {
  int32_t* sorted = nullptr;
  int32_t* tiles = nullptr;  // at least k tiles
  int32_t* n_tiles = nullptr;
};
void route(const RouteDev& r, const float* logits, int64_t T, int32_t* ids, float* weights, int32_t* order,
           cudaStream_t s, int32_t* ids_host = nullptr, const TilesOut* one = nullptr);
// tc_tiles null: no tensor-core tiles (tc_min ignored).
void group_pairs(const int32_t* ids, int64_t pairs, int32_t n_experts, int32_t tc_min, int32_t* sorted, int32_t* tiles,
                 int32_t* n_tiles, int32_t* tc_tiles, int32_t* n_tc, cudaStream_t s);
// h (pairs, hidden) = silu(gate_e x_t) * (up_e x_t); table: per expert [gate, up, down]; an
// expert whose gate data is null is skipped (not in this window). wide: the experts' rows read
// 16 bytes at a time (wide_rows, dot_rows.cuh). The tensor-core tiles (when pt has them) take
// their temporaries from pool.
// vec: the experts' group where their views are vec_rows (then their tiles run on mma_vec.cu),
// else 0.
void experts_gate_up(const DW* table, int fmt, bool wide, int64_t vec, int64_t hidden, int64_t dim, const float* x,
                     int32_t k, const PairTiles& pt, float* h, DevicePool& pool, cudaStream_t s);
// y (pairs, dim) = down_e h_p.
void experts_down(const DW* table, int fmt, bool wide, int64_t vec, int64_t hidden, int64_t dim, const float* h,
                  int32_t k, const PairTiles& pt, float* y, DevicePool& pool, cudaStream_t s);
// out (T, dim) = sum over slots in `order` of weight * y.
// y[rows[i]] = src[i] for i < n (rows of dim floats).
void scatter_rows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* y, cudaStream_t s);
void combine(const float* y, const float* weights, const int32_t* order, int64_t T, int32_t k, int64_t dim, float* out,
             cudaStream_t s);

// --- mma_rows.cu ---
// Rows on tensor cores (mma.sync, f16 in, f32 accumulate, x split into f16 hi + lo per row:
// results within float rounding of the kernels above) for affine 4-bit and 8-bit weights with
// groups of 32 or more: steps of at least kTcRows rows (matmul) and experts with at least
// kTcRows pairs, in tiles of kTcM rows.
constexpr int kTcRows = 16, kTcM = 32;
// Whether w runs on tensor cores: format, group, rows whole 16-byte chunks (and its data
// 16-byte aligned where the view has it).
bool tc_rows(const DW& w);
// ys[i] = x ws[i]^T, every ws[i] tc_rows with ws[0]'s cols; temporaries from pool.
void matmul_tc(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, DevicePool& pool,
               cudaStream_t s);
// experts_gate_up / experts_down over pt's tensor-core tiles (fmt kQ4 or kQ8, the views
// tc_rows); x has pt.pairs / k rows.
void experts_gate_up_tc(const DW* table, int fmt, int64_t hidden, int64_t dim, const float* x, int32_t k,
                        const PairTiles& pt, float* h, DevicePool& pool, cudaStream_t s);
void experts_down_tc(const DW* table, int fmt, int64_t hidden, int64_t dim, const float* h, const PairTiles& pt,
                     float* y, DevicePool& pool, cudaStream_t s);

// --- mma_vec.cu ---
// Steps of fewer than kTcRows rows (kVecRows at a time) and the experts' tiles of at most kTile
// pairs over affine 4-bit weights with groups of 64 or more (vec_rows) on tensor cores, with
// mma_rows.cuh's arithmetic (a row of x gets the same bits alone and in a step of several).
constexpr int kVecRows = 8;
bool vec_rows(const DW& w);
// w's group where vec_rows(w) and a tile of kTile pairs fits a block, else 0.
int64_t vec_group(const DW& w);
// ys[i] = x ws[i]^T, every ws[i] vec_rows with ws[0]'s cols.
void matmul_vec(std::span<const DW> ws, const float* x, int64_t T, std::span<float* const> ys, cudaStream_t s);
// experts_gate_up / experts_down over pt's tiles (not its tensor-core tiles), the experts'
// views vec_rows.
void experts_gate_up_vec(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* x, int32_t k,
                         const PairTiles& pt, float* h, cudaStream_t s);
void experts_down_vec(const DW* table, int64_t group, int64_t hidden, int64_t dim, const float* h, const PairTiles& pt,
                      int32_t k, float* y, cudaStream_t s);

// The n (<= kTopMax, <= V) largest of each row of logits (rows, V) in logit_order_key's order
// (backend/backend.h) into vals and ids (rows, n); scratch: top_logits_scratch(rows, V, n) keys.
constexpr int64_t kTopMax = 1024;
int64_t top_logits_scratch(int64_t rows, int64_t V, int64_t n);
void top_logits(const float* logits, int64_t rows, int64_t V, int64_t n, uint64_t* scratch, float* vals, int32_t* ids,
                cudaStream_t s);
// out[i] = row[ids[i]] for i < n.
void gather_logits(const float* row, const int32_t* ids, int64_t n, float* out, cudaStream_t s);

}  // namespace moeflux::cuda
