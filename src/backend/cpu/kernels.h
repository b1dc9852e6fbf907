// Internal interface between the CPU op dispatchers (cpu_ops.cpp) and the per-ISA kernel
// files (kernels_avx2.cpp, kernels_avx512.cpp, kernels_scalar.cpp). Each ISA file compiles
// its code under `#pragma GCC target`, so the binary still runs on CPUs without it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/aligned.h"
#include "core/dtype.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/group_lanes.h"
#include "format/qweight.h"

namespace moeflux::cpu {

// Affine weights with 2-, 4- or 8-bit codes take the fast path: a u32 word holds P = 32 / bits
// codes, and a vector of L lanes reads L consecutive words, so lane l of word-vector j holds
// codes j*L*P + l*P + k for k < P. Instead of reordering codes, x is reordered once per call
// ("lane-interleaved"): chunk j of x holds P vectors, vector k lane l = x[j*L*P + l*P + k].
// The dot then needs only masks and FMAs per chunk; scales apply per lane. For matvec x is
// also prescaled ("shifted codes"): vector k (0 < k < P-1) is multiplied by 2^-(bits*k), so
// code k can be used in place, (v & (mask << bits*k)) converted exactly, without a shift.
bool affine_fast(const QWeight& w, int lanes);

// fn(c, i, k) for each natural column c < cols, i its index in the lane-interleaved layout of
// P codes per word and `lanes` lanes, k its code position in the word (no divisions: x is
// laid out this way once per call). cols: a multiple of P.
template <typename F>
inline void for_each_interleaved(int64_t cols, int64_t P, int64_t lanes, F&& fn) {
  const int64_t chunk = P * lanes;
  for (int64_t j = 0; j * chunk < cols; ++j)
    for (int64_t l = 0; l < lanes && j * chunk + l * P < cols; ++l)
      for (int64_t k = 0; k < P; ++k) fn(j * chunk + l * P + k, j * chunk + k * lanes + l, k);
}

// The same for a 4-bit group-lane weight (backend/cpu/group_lanes.h) read 16 lanes wide: chunk
// b * wg + t (wg = group_size / 8 words per group) is step t of block b, its lane l word t of
// group 16 b + l (lanes l >= nb of a partial last block stay zero). fn(c, i, k) for each
// natural column c, i its index (chunk * 128 + k * 16 + l), k its code position in the word.
// The layout holds group_lane_steps(cols, group_size) chunks of 128 floats.
template <typename F>
inline void for_each_interleaved_lanes(int64_t cols, int64_t group_size, F&& fn) {
  const int64_t ng = cols / group_size, wg = group_size / 8;
  int64_t chunk = 0;
  for (int64_t b = 0; 16 * b < ng; ++b) {
    const int64_t nb = std::min<int64_t>(16, ng - 16 * b);
    for (int64_t t = 0; t < wg; ++t, ++chunk)
      for (int64_t l = 0; l < nb; ++l)
        for (int64_t k = 0; k < 8; ++k) fn((16 * b + l) * group_size + 8 * t + k, chunk * 128 + k * 16 + l, k);
  }
}

// The integer path's largest |q| for codes of `bits`: three balanced base-256 int8 digits hold
// about 24 bits; 8-bit codes keep 22, so that 4 codes < 256 times q stay inside int32.
constexpr int32_t digit_qmax(int bits) { return bits == 4 ? 127 << 16 : (1 << 21) - 1; }
// The AVX2 integer path (kernels_avx2_int.cpp) holds each x within this fraction of its
// group's largest |x| (an int16 part and an int8 rest).
constexpr double kWordXError = 0x1p-21;

// x (T, cols) prepared for one weight and one ISA; read-only while rows run in parallel.
struct PreparedX {
  int64_t T = 0, cols = 0;
  bool interleaved = false;  // affine fast path: xs holds lane-interleaved x
  bool shifted = false;      // interleaved x prescaled for in-place codes (matvec)
  const float* x = nullptr;  // natural x (T, cols) when !interleaved
  int64_t stride = 0;        // floats per token in xs (cols padded to whole chunks)
  int64_t gstride = 0;       // floats per token in gsum (n_groups padded by >= 16 zeros)
  AlignedVector<float> xs;   // (T, stride)
  AlignedVector<float> gsum; // (T, gstride): sum of x over each quantisation group
  // Integer path (CpuIsa::Avx512Vnni, T == 1): x per quantisation group as q = round(x / dx)
  // (|q| <= digit_qmax(bits)) in three int8 digits, laid out per 64-byte chunk of codes
  // (kernels_avx512_vnni.cpp); dx the per-group steps (padded with >= 16 zeros).
  bool digits = false;
  // xs (16 lanes, not shifted: for_each_interleaved_lanes) or the digits in the group-lane
  // order of a group_lanes weight
  bool group_lanes = false;
  int bits = 0, lanes = 0;  // of the weight and table x was laid out for
  int64_t group_size = 0;
  AlignedVector<int8_t> xd;
  AlignedVector<float> dx;
  // Integer path of the Avx2 level (T == 1, kernels_avx2_int.cpp): x per quantisation group as
  // int16 q and an int8 rest, in xw in that file's chunk order; dx (powers of two) and gsum as
  // for the digits.
  bool words = false;
  AlignedVector<int16_t> xw;
  const float* token(int64_t t) const { return interleaved ? xs.data() + t * stride : x + t * cols; }
};
void prepare_x(const QWeight& w, const float* x, int64_t T, int lanes, bool shifted, PreparedX* px);
// prepare_x in two steps, so that threads can share a batch's tokens: the layout and buffers
// (true when tokens need preparing), then the tokens [t0, t1).
bool prepare_x_layout(const QWeight& w, const float* x, int64_t T, int lanes, bool shifted, PreparedX* px);
void prepare_x_tokens(PreparedX* px, int64_t t0, int64_t t1);

// First quantisation group of chunk j (CH codes) as the chunks are walked in order, without
// a division per chunk (affine_fast: gs divides CH or CH divides gs).
struct GroupCursor {
  int64_t per_chunk, chunks_per_group, g = 0, k = 0;
  GroupCursor(int64_t CH, int64_t gs)
      : per_chunk(CH >= gs ? CH / gs : 0), chunks_per_group(CH >= gs ? 1 : gs / CH) {}
  void next() {
    if (per_chunk) g += per_chunk;
    else if (++k == chunks_per_group) k = 0, ++g;
  }
};

struct Kernels {
  int lanes;  // f32 lanes of one vector (the x layout); 1 for scalar
  // Optional: prepares x (one token) for an ISA-specific path; false when w does not take it.
  bool (*prepare_special)(const QWeight& w, const float* x, PreparedX* px);
  // y[r] for r in [r0, r1), one token.
  void (*matvec_rows)(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1);
  // y[t * ldy + r] for r in [r0, r1) and all px.T tokens; each row is decoded once.
  void (*matmul_rows)(const QWeight& w, const PreparedX& px, float* y, int64_t ldy, int64_t r0,
                      int64_t r1);
  // Row r as f32 in the layout of px (lane-interleaved when px.interleaved, else natural;
  // PRECOND: !px.shifted) into out; returns its length (px.stride or w.cols). sb / bb:
  // scratch of params_size floats each (kernels_avx512.cpp), unused by some formats.
  int64_t (*decode_row)(const QWeight& w, const PreparedX& px, int64_t r, float* out, float* sb, float* bb);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a * x
  // y += a * x with the product rounded before the add (no FMA): the same bits at every ISA.
  void (*add_scaled)(float a, const float* x, float* y, int64_t n);
  // out[i] = silu(gate[i]) * up[i] (out may be gate): swiglu_ref, or within a few ulps of it.
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
  // Optional (nullptr: the caller's dot / softmax / axpy loop): query heads [0, nh) (q: nh x
  // head_dim) sharing one kv head over n_ctx positions, K row t at k + t * kstride and V row t
  // at v + t * vstride; p: nh * n_ctx floats of scratch; out: nh x v_dim. Per head the result
  // does not depend on nh. False (nothing written) for shapes it does not take.
  bool (*attend)(const float* q, int64_t nh, const float* k, const float* v, int64_t n_ctx, int64_t kstride,
                 int64_t vstride, int64_t head_dim, int64_t v_dim, float scale, float* p, float* out);
  // Optional (nullptr: prepare_for only): prepare_special in pieces that threads can share, for
  // an x whose parts are finished by different threads. prepare_layout sizes px for w and
  // records x without reading it (false: w does not take the path); prepare_groups then fills
  // quantisation groups [g0, g1) (false: a non-finite value there; prepare_for must then redo
  // px). Disjoint ranges may run at once; layout + all groups give prepare_special's bytes.
  bool (*prepare_layout)(const QWeight& w, const float* x, PreparedX* px);
  bool (*prepare_groups)(const QWeight& w, const float* x, int64_t g0, int64_t g1, PreparedX* px);
  // Optional (nullptr: matvec_rows per token): y[j][r] for r in [r0, r1) and tokens j < n, x_j
  // = *px[j] (each prepared by prepare_special for w), each line of codes read once for several
  // tokens; the same bits as matvec_rows per token. False (nothing written) when w or an x does
  // not take it.
  bool (*matvec_rows_tokens)(const QWeight& w, const PreparedX* const* px, int n, float* const* y, int64_t r0,
                             int64_t r1);
  // Optional (nullptr: never): whether matmul_rows_tokens runs w. Prefill then prepares each
  // token for the matvec (prepare_special) instead of a batch for matmul_rows.
  bool (*takes_tokens)(const QWeight& w);
  // Optional: as matvec_rows_tokens for any number of tokens, tiles of rows x tokens sharing
  // each load of codes and of x; with digits 3 the same bits as matvec_rows per token, with 2
  // x's lowest int8 digit left out (set_tile_digits in cpu_ops.h).
  bool (*matmul_rows_tokens)(const QWeight& w, const PreparedX* const* px, int n, int digits, float* const* y,
                             int64_t r0, int64_t r1);
};

// One token's x prepared for w on k's path: its integer path (prepare_special) when it takes w,
// else lanes (prepare_x, shifted for matvec).
inline void prepare_for(const Kernels& k, const QWeight& w, const float* x, PreparedX* px) {
  if (!k.prepare_special || !k.prepare_special(w, x, px)) prepare_x(w, x, 1, k.lanes, true, px);
}

const Kernels& kernels_scalar();
// The Avx2 level's integer matvec (kernels_avx2_int.cpp): prepare_special of its table (false
// for weights it does not take), and rows of y for x it prepared (px.words).
bool avx2_prepare_words(const QWeight& w, const float* x, PreparedX* px);
bool avx2_prepare_layout(const QWeight& w, const float* x, PreparedX* px);  // its prepare_layout
bool avx2_prepare_groups(const QWeight& w, const float* x, int64_t g0, int64_t g1, PreparedX* px);
void avx2_words_matvec_rows(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1);
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();
const Kernels& kernels_avx512_vnni();
// Kernels::matvec_rows_tokens of the Avx512Vnni table (kernels_avx512_vnni_tokens.cpp): 4-bit
// group-lane weights.
bool vnni_matvec_rows_tokens(const QWeight& w, const PreparedX* const* px, int n, float* const* y, int64_t r0,
                             int64_t r1);
// Kernels::takes_tokens and matmul_rows_tokens of the Avx512Vnni table
// (kernels_avx512_vnni_tile.cpp): 4-bit group-lane weights.
bool vnni_takes_tokens(const QWeight& w);
bool vnni_matmul_rows_tokens(const QWeight& w, const PreparedX* const* px, int n, int digits, float* const* y,
                             int64_t r0, int64_t r1);

// Kernels::attend of the Avx2 table (attend_avx2.cpp) and of the AVX-512 tables (attend_avx512.cpp).
bool attend_avx2(const float* q, int64_t nh, const float* k, const float* v, int64_t n_ctx, int64_t kstride,
                 int64_t vstride, int64_t head_dim, int64_t v_dim, float scale, float* p, float* out);
bool attend_avx512(const float* q, int64_t nh, const float* k, const float* v, int64_t n_ctx, int64_t kstride,
                   int64_t vstride, int64_t head_dim, int64_t v_dim, float scale, float* p, float* out);

// Floats of scratch decode_row needs for each of sb and bb.
inline size_t decode_params_size(const QWeight& w) { return size_t(w.cols / std::max<int64_t>(1, w.group_size) + 32); }

// Prefetches the scales and biases of affine rows r .. r + n - 1 (addresses only: a row past
// the end is harmless). The matvecs call it for the rows matvec_params_ahead() ahead
// (backend/cpu/cpu_features.h): on Zen 5 the short per-row runs of
// those two arrays were not fetched in time by the hardware prefetchers (the AVX2 kernel,
// compute-bound there, did not gain: 42.7 / 43.3 vs 43.0 / 47.1 t/s); on Intel a shorter
// distance is faster.
inline void prefetch_row_params(const QWeight& w, int64_t r, int64_t n, size_t row_bytes) {
  const uintptr_t at = uintptr_t(r) * row_bytes, end = at + uintptr_t(n) * row_bytes;
  for (uintptr_t off = at; off < end; off += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(w.scales) + off), 0, 3);
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(w.biases) + off), 0, 3);
  }
}

// prefetch_row_params for the rows matvec_params_ahead() past each of the R rows r + i * stride
// of a block.
inline void prefetch_block_params(const QWeight& w, int64_t r, int R, int64_t stride, size_t row_bytes) {
  if (stride == 1) prefetch_row_params(w, r + matvec_params_ahead(), R, row_bytes);
  else
    for (int i = 0; i < R; ++i) prefetch_row_params(w, r + i * stride + matvec_params_ahead(), 1, row_bytes);
}

// Scratch that lives per thread and only grows (row buffers, per-row scales).
float* scratch(int slot, size_t n);

// Rows [r0, r1) of a group-lane weight (backend/cpu/group_lanes.h) through fn(view, r): blocks of rows
// converted back to natural code order in per-thread scratch, view holding only those rows
// (its row i is w's row r + i). For the kernels that read natural codes (the float ones).
template <typename F>
void natural_row_blocks(const QWeight& w, int64_t r0, int64_t r1, F&& fn) {
  thread_local std::vector<uint8_t> buf;
  const size_t rb = w.row_bytes();
  const int64_t step = std::max<int64_t>(1, int64_t((size_t(64) << 10) / rb));
  if (buf.size() < size_t(step) * rb) buf.resize(size_t(step) * rb);
  const size_t sbytes = size_t(w.cols / w.group_size) * dtype_size(w.sdtype);
  for (int64_t r = r0; r < r1; r += step) {
    const int64_t n = std::min(step, r1 - r);
    convert_group_lanes(w, r, r + n, false, buf.data());
    QWeight v = w;
    v.group_lanes = false, v.rows = n, v.data = buf.data();
    v.scales = w.scales + size_t(r) * sbytes, v.biases = w.biases + size_t(r) * sbytes;
    fn(v, r);
  }
}

}  // namespace moeflux::cpu
