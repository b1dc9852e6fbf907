// Scalar CPU kernels (the CpuIsa::Scalar level) and the ISA-independent helpers: x
// preparation for the affine fast path and per-thread scratch. The scalar kernels compute
// exactly what matvec_ref does (dequantise a row, f32 dot), split by rows.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "backend/cpu/kernels.h"
#include "backend/ref/ref.h"

namespace moeflux::cpu {

bool affine_fast(const QWeight& w, int lanes) {
  if (w.format != WFormat::Affine || lanes < 8) return false;
  if (w.bits != 2 && w.bits != 4 && w.bits != 8) return false;
  const int64_t p = 32 / w.bits, chunk = p * lanes, gs = w.group_size;
  if (gs <= 0 || gs % p != 0 || w.cols % gs != 0) return false;
  return gs % chunk == 0 || chunk % gs == 0;
}

bool prepare_x_layout(const QWeight& w, const float* x, int64_t T, int lanes, bool shifted, PreparedX* px) {
  px->T = T, px->cols = w.cols, px->x = x;
  px->interleaved = affine_fast(w, lanes);
  px->shifted = px->interleaved && shifted;
  px->digits = px->words = false;
  // Decoded rows of a group-lane weight (matmul) in the layout's own order at 16 lanes; the
  // matvec (shifted) and 8 lanes read rows converted back to natural order.
  px->group_lanes = px->interleaved && w.group_lanes && !shifted && lanes == 16;
  px->bits = w.bits, px->group_size = w.group_size, px->lanes = lanes;
  if (!px->interleaved) return false;
  const int64_t p = 32 / w.bits, chunk = p * lanes, cols = w.cols;
  const int64_t ng = cols / w.group_size;
  px->stride = px->group_lanes ? 128 * group_lane_steps(cols, w.group_size) : (cols + chunk - 1) / chunk * chunk;
  px->gstride = (ng + 16 + 15) / 16 * 16;
  // Every element is written by prepare_x_tokens (padding included).
  if (px->xs.size() < size_t(T * px->stride)) px->xs.resize(size_t(T * px->stride));
  if (px->gsum.size() < size_t(T * px->gstride)) px->gsum.resize(size_t(T * px->gstride));
  return true;
}

void prepare_x_tokens(PreparedX* px, int64_t t0, int64_t t1) {
  if (!px->interleaved) return;
  const int64_t p = 32 / px->bits, cols = px->cols, gsz = px->group_size, ng = cols / gsz;
  float scale[16];  // per code position k: 2^-(bits*k) for in-place codes, else 1
  for (int64_t k = 0; k < p; ++k)
    scale[k] = px->shifted && k > 0 && k < p - 1 ? std::ldexp(1.0f, -int(px->bits * k)) : 1.0f;
  for (int64_t t = t0; t < t1; ++t) {
    const float* xt = px->x + t * cols;
    float* xs = px->xs.data() + t * px->stride;
    std::fill(xs, xs + px->stride, 0.0f);  // the padding: zeros, as prepare_x always left it
    if (px->group_lanes) for_each_interleaved_lanes(cols, gsz, [&](int64_t c, int64_t i, int64_t) { xs[i] = xt[c]; });
    else for_each_interleaved(cols, p, px->lanes, [&](int64_t c, int64_t i, int64_t k) { xs[i] = xt[c] * scale[k]; });
    float* gs = px->gsum.data() + t * px->gstride;
    std::fill(gs, gs + px->gstride, 0.0f);
    for (int64_t g = 0; g < ng; ++g) {
      float s = 0.0f;
      for (int64_t c = g * gsz; c < (g + 1) * gsz; ++c) s += xt[c];
      gs[g] = s;
    }
  }
}

void prepare_x(const QWeight& w, const float* x, int64_t T, int lanes, bool shifted, PreparedX* px) {
  if (prepare_x_layout(w, x, T, lanes, shifted, px)) prepare_x_tokens(px, 0, T);
}

float* scratch(int slot, size_t n) {
  thread_local AlignedVector<float> bufs[8];
  MF_ASSERT(slot >= 0 && slot < 8);
  if (bufs[slot].size() < n) bufs[slot].resize(n);
  return bufs[slot].data();
}

namespace {
float dot_scalar(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Compiled without FMA (this file has no target pragma): the product is rounded, then added,
// so it also serves as the table's add_scaled.
void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void matvec_rows_scalar(const QWeight& w, const PreparedX& px, float* y, int64_t r0, int64_t r1) {
  float* row = scratch(0, size_t(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    dequant_row_ref(w, r, row);
    y[r] = dot_scalar(row, px.x, w.cols);
  }
}

int64_t decode_row_scalar(const QWeight& w, const PreparedX&, int64_t r, float* out, float*, float*) {
  dequant_row_ref(w, r, out);
  return w.cols;
}

void matmul_rows_scalar(const QWeight& w, const PreparedX& px, float* y, int64_t ldy, int64_t r0,
                        int64_t r1) {
  float* row = scratch(0, size_t(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    dequant_row_ref(w, r, row);
    for (int64_t t = 0; t < px.T; ++t) y[t * ldy + r] = dot_scalar(row, px.x + t * w.cols, w.cols);
  }
}
}  // namespace

const Kernels& kernels_scalar() {
  static const Kernels k{1, nullptr, matvec_rows_scalar, matmul_rows_scalar, decode_row_scalar, dot_scalar,
                         axpy_scalar, axpy_scalar, swiglu_ref, nullptr, nullptr, nullptr, nullptr,
                         nullptr, nullptr};
  return k;
}

}  // namespace moeflux::cpu
