// Optimised CPU ops: the same signatures and results (within float rounding) as the
// references in backend/ref/ref.h, dispatched at run time to AVX-512, AVX2 or scalar kernels
// (backend/cpu/cpu_features.h: cpu_isa) and split over cpu_thread_pool() when the work pays for it.
// Tests: tests/ops/test_ops_cpu.cpp (every ISA level vs the reference); bench: bench_ops.
#pragma once
#include <cstdint>
#include <functional>

#include "format/qweight.h"

namespace moeflux {

// fn(t0, t1) over ranges of T tokens, split over the threads when T * bytes_per_token (the
// bytes each token's work touches) pays for the hand-off: the per-token steps of a prefill
// (norms, RoPE, gathers) that would otherwise run on one thread between parallel ops.
void for_tokens(int64_t T, int64_t bytes_per_token, const std::function<void(int64_t, int64_t)>& fn);

// y (w.rows) = W x (w.cols). Any QWeight format.
void matvec(const QWeight& w, const float* x, float* y);

// ys[i] (ws[i]->rows) = W_i x for n (1..8) weights over one x (gate + up, q + k + v): x is
// prepared once and all their rows are split over the threads in one parallel region.
// Weights of different layouts are run one by one.
void matvec_multi(int n, const QWeight* const* ws, const float* x, float* const* ys);

// matvec_multi, then epilogue(i, r0, r1) on the thread that computed rows [r0, r1) of weight
// i, right after them, in the same parallel region: every range holds whole multiples of
// `align` rows (PRECOND: align divides each weight's rows), so a per-head step (q / k norm,
// RoPE) needs no serial pass of its own. The ranges cover each weight's rows once.
void matvec_multi_epilogue(int n, const QWeight* const* ws, const float* x, float* const* ys, int64_t align,
                           const std::function<void(int i, int64_t r0, int64_t r1)>& epilogue);

// y (n) += a * x, each product rounded before the add (as the plain loop, the same bits at
// every ISA level; vectorised, which -O2 does not do for the loop).
void add_scaled(float a, const float* x, float* y, int64_t n);

// out (n) = x / sqrt(mean(x^2) + eps) * w (w: n weights, or null for none), the reference's
// RMSNorm with the sum of squares through the ISA's dot (float reordering only). out may be x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);

// Batches of at most this many tokens (a decode step of several sequences) run as one matvec
// per token over each block of kSmallBatchRows rows while it is in cache: the matvec kernels'
// dots (integer where the CPU has them) with the weights read from memory once, and each
// token's result bit-identical to its own matvec (up to 4 tokens: two per pass over the rows
// where the kernels have it, Kernels::matvec_rows_tokens). Blocks of 256 rows: 32-row blocks spent the
// gain on per-call overhead (8 sequences on 2 threads: 1.08x one sequence's t/s; 128 rows:
// 1.29x; 256: ~1.4x); the float matmul (decode each row once, T float dots) was slower than
// one sequence at every T up to 8.
constexpr int64_t kSmallBatch = 16, kSmallBatchRows = 256;

// y (T, w.rows) = x (T, w.cols) W^T: batched prefill / grouped experts. Each weight row is
// decoded once for all T tokens (small batches: see kSmallBatch; 4-bit group-lane weights at
// Avx512Vnni: tiles of rows x tokens over the matvec's int8 digits, each token its matvec's
// bits, kernels_avx512_vnni_tile.cpp).
void matmul(const QWeight& w, const float* x, int64_t T, float* y);

// x's int8 digits in those VNNI tiles (and the grouped experts' of 3 or more tokens): 3, the
// default (each token its matvec's bits), or 2 (each x within about 2^-16 of its group's largest
// |x|, two thirds of the integer dots). CpuBackend sets 2 for the steps that hold a prompt chunk
// under CpuOptions::fast_prefill, and 3 again at the step's end.
void set_tile_digits(int digits);

// matmul of n weights over the same x (T, cols), ys[i] (T, ws[i]->rows): x prepared once when
// they share a layout, all their rows in one parallel region (a layer's q / k / v over a
// batch). The same bits as n matmuls.
void matmul_multi(int n, const QWeight* const* ws, const float* x, int64_t T, float* const* ys);

// out (down.rows) = down (silu(gate x) * (up x)): one expert (or dense) SwiGLU FFN.
// PRECOND: gate.rows == up.rows == down.cols, gate.cols == up.cols.
void swiglu_expert(const QWeight& gate, const QWeight& up, const QWeight& down, const float* x,
                   float* out);

// One token through n experts: outs[i] (down[i].rows) = down_i(silu(gate_i x) * (up_i x)).
// All gate and up rows of the n experts are split over the threads in one parallel region and
// all down rows in a second (decode runs top-k small matrices per layer; a region per matrix
// spends more on hand-offs than on rows). Experts of mixed layouts run one by one.
void swiglu_experts(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                    const float* x, float* const* outs);

// out[r] = sum over i = 0..n-1 of w[i] * ys[i][r] for r in [r0, r1), summed from 0 in that
// order with each product rounded before it is added (a mixture's weighted combine). Every
// combine of expert outputs goes through this, so that fused and unfused paths agree bitwise.
void combine_weighted(int n, const float* const* ys, const float* w, float* out, int64_t r0, int64_t r1);

constexpr int kMaxFusedExperts = 32;  // swiglu_experts_combined's n at most

// One token through n experts, combined: out (down[0].rows) = sum_i w[i] * down_i(silu(gate_i x)
// * (up_i x)), bit-identical to swiglu_experts then combine_weighted. One parallel region: the
// gate / up blocks come first and the thread that completes an expert prepares its h; then
// blocks of output rows, each running every expert's down rows and adding them up where they
// were computed (no serial preparation, combine or second hand-off between). Experts of mixed
// layouts run unfused. PRECOND: 1 <= n <= kMaxFusedExperts.
void swiglu_experts_combined(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                             const float* x, const float* w, float* out);

// route_softmax_topk_ref's results (the same ids and bits, for finite logits) without its
// allocations and sort: softmax over the n experts, the k best in its order, optionally
// renormalised. The decode router of qwen3_moe and the hybrids.
void route_softmax_topk(const float* logits, int64_t n_experts, int64_t k, bool renorm, int32_t* ids,
                        float* weights);

// A router: logits (router rows) -> ids, weights (k each).
using RouteFn = std::function<void(const float* logits, int32_t* ids, float* weights)>;

// One token's routing and experts in one parallel region: logits = router x, route(logits,
// ids, weights) picks k experts, and out (down rows) = sum_j weights[j] * expert ids[j] (x),
// bit-identical to matvec(router), route, then swiglu_experts_combined over the experts in
// ascending id. The router's rows come first; the thread that completes their last block runs
// route, while x is prepared for the experts (in pieces where the kernels can) by other
// items; the gate / up items wait for both. gate, up, down: every expert's weights, by id (the
// router's rows of them). Returns false, with ids and weights written but not out, when the
// choice cannot run fused (a repeated id; experts of another layout than gate[0] / down[0]):
// the caller then runs them another way. PRECOND: 1 <= k <= kMaxFusedExperts.
bool route_experts_combined(const QWeight& router, const float* x, const RouteFn& route, int k,
                            const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                            int32_t* ids, float* weights, float* out);
// Whether decode routes with route_experts_combined (MOEFLUX_MERGED_ROUTE=0: no, for A/Bs).
bool merged_route();

// Several experts, each over its own tokens (batched prefill): outs[i] (T[i], down[i].rows)
// = down_i(silu(gate_i x) * (up_i x)) for x = xs[i] (T[i], gate[i].cols). All experts' gate
// and up rows run in one parallel region and all down rows in a second, in tasks of a few
// rows of one expert each, so that experts with many tokens balance with those with few.
// PRECOND: the experts have the same hidden size.
void swiglu_experts_batch(int n, const QWeight* const* gate, const QWeight* const* up, const QWeight* const* down,
                          const float* const* xs, const int64_t* T, float* const* outs);

// Causal GQA attention of one query over n_ctx cached positions; as attention_ref.
// q (n_heads, head_dim); k (n_ctx, n_kv_heads, head_dim); v (n_ctx, n_kv_heads, v_dim);
// out (n_heads, v_dim).
void attention(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t n_heads,
               int64_t n_kv_heads, int64_t head_dim, int64_t v_dim, float scale, float* out);

// T causal queries at positions len0 .. len0 + T - 1 in one parallel region over (token,
// head): query t attends to positions [first, len0 + t], first = len0 + t + 1 - window when
// window > 0 and that is positive, else 0. q (T, n_heads, head_dim); k, v hold >= len0 + T
// positions (n_kv_heads per position); out (T, n_heads, v_dim). Each query's result equals
// attention() over its own context.
void attention_causal(const float* q, const float* k, const float* v, int64_t T, int64_t len0, int64_t window,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t v_dim, float scale, float* out);

// attention_causal of several sequences (a decode step of many) in one parallel region: sequence
// i's T[i] queries q[i] over its own cache k[i], v[i] of len0[i] positions before them, into
// out[i]; the same bits as attention_causal per sequence, without a region each.
struct CausalSeq {
  const float *q, *k, *v;
  int64_t T, len0;
  float* out;
};
void attention_causal_seqs(const CausalSeq* seqs, int n, int64_t window, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, int64_t v_dim, float scale);

// out[i] *= sigmoid(gate[i]) for i < n: gated attention's output gate (every path's same bits).
void sigmoid_gate(const float* gate, float* out, int64_t n);

// One decoded token's attention_causal (T = 1) and output projection, out = wo (att * sigmoid(gate))
// (no gate when gate is null), in one parallel region: the attention items first, then blocks of
// wo's rows, which start once att is prepared for wo: by the attention items that finish each
// 16 groups of it where the kernels prepare x in pieces (Kernels::prepare_groups), else by the
// last one. Saves a region's start and tail a layer. att (n_heads, head_dim) receives the gated attention output. The same
// bits as attention_causal, the gate and matvec in turn (MOEFLUX_MERGED_ATTN_O=0 runs those).
void attention_project(const float* q, const float* k, const float* v, int64_t len0, int64_t window, int64_t n_heads,
                       int64_t n_kv_heads, int64_t head_dim, float scale, const float* gate, float* att,
                       const QWeight& wo, float* out);

// Absorbed MLA attention of one query over n_ctx latent positions, as
// mla_attention_absorbed_ref (backend/ref): per head, scores q_c . c_t + q_pe . k_pe_t, softmax,
// out = sum_t p_t c_t; heads split over the threads. q_c (n_heads, rank), q_pe (n_heads,
// rope_dim), c (n_ctx, rank), k_pe (n_ctx, rope_dim), out (n_heads, rank).
void mla_attention_absorbed(const float* q_c, const float* q_pe, const float* c, const float* k_pe, int64_t n_ctx,
                            int64_t n_heads, int64_t rank, int64_t rope_dim, float scale, float* out);

// Per block b < n_blocks (the heads of absorbed MLA, which multiply each head's x by its own
// rows of kv_b): y_b (n) = rows r0 + b * rstride .. + n - 1 of W times x_b (w.cols), as
// matvec_rows_ref (backend/ref); x_b = x + b * ldx, y_b = y + b * ldy. Blocks split over the threads.
void matvec_row_blocks(const QWeight& w, int64_t n_blocks, int64_t r0, int64_t rstride, int64_t n, const float* x,
                       int64_t ldx, float* y, int64_t ldy);
// The transposed products, as matvec_t_rows_ref: y_b (w.cols) = (rows r0 + b * rstride .. + n
// - 1 of W)^T x_b (n). Each row is decoded by the SIMD kernels and added in with axpy.
void matvec_t_row_blocks(const QWeight& w, int64_t n_blocks, int64_t r0, int64_t rstride, int64_t n,
                         const float* x, int64_t ldx, float* y, int64_t ldy);

// One gated delta rule step of one head, as gated_delta_step_ref (backend/ref/linear_attn.h): S
// (k_dim, v_dim) decays by exp(g), takes the rank-one update k (beta (v - S^T k))^T, and out
// (v_dim) = S^T q; two passes over S with SIMD row operations instead of four.
void gated_delta_step(float* S, const float* q, const float* k, const float* v, float g, float beta, int64_t k_dim,
                      int64_t v_dim, float* out);

}  // namespace moeflux
