// Scalar CPU kernels (the CpuIsa::Scalar level) and the ISA-independent helpers: x
// preparation for the affine fast path and per-thread scratch. The scalar kernels compute
// exactly what matvec_ref does (dequantise a row, f32 dot), split by rows.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cpu/kernels.h"
#include "ops/ref/ref.h"

namespace moeflux::cpu {

bool affine_fast(const QWeight& w, int lanes) {
  if (w.format != WFormat::Affine || lanes < 8) return false;
  if (w.bits != 2 && w.bits != 4 && w.bits != 8) return false;
  const int64_t p = 32 / w.bits, chunk = p * lanes, gs = w.group_size;
  if (gs <= 0 || gs % p != 0 || w.cols % gs != 0) return false;
  return gs % chunk == 0 || chunk % gs == 0;
}

void prepare_x(const QWeight& w, const float* x, int64_t T, int lanes, bool shifted, PreparedX* px) {
  px->T = T, px->cols = w.cols, px->x = x;
  px->interleaved = affine_fast(w, lanes);
  px->shifted = px->interleaved && shifted;
  px->digits = false;
  // Decoded rows of a group-lane weight (matmul) in the layout's own order at 16 lanes; the
  // matvec (shifted) and 8 lanes read rows converted back to natural order.
  px->group_lanes = px->interleaved && w.group_lanes && !shifted && lanes == 16;
  if (!px->interleaved) return;
  const int64_t p = 32 / w.bits, chunk = p * lanes, cols = w.cols;
  const int64_t ng = cols / w.group_size;
  px->stride = px->group_lanes ? 128 * group_lane_steps(cols, w.group_size) : (cols + chunk - 1) / chunk * chunk;
  px->gstride = (ng + 16 + 15) / 16 * 16;
  px->xs.assign(size_t(T * px->stride), 0.0f);
  px->gsum.assign(size_t(T * px->gstride), 0.0f);
  float scale[16];  // per code position k: 2^-(bits*k) for in-place codes, else 1
  for (int64_t k = 0; k < p; ++k)
    scale[k] = px->shifted && k > 0 && k < p - 1 ? std::ldexp(1.0f, -int(w.bits * k)) : 1.0f;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * cols;
    float* xs = px->xs.data() + t * px->stride;
    if (px->group_lanes) for_each_interleaved_lanes(cols, w.group_size, [&](int64_t c, int64_t i, int64_t) { xs[i] = xt[c]; });
    else for_each_interleaved(cols, p, lanes, [&](int64_t c, int64_t i, int64_t k) { xs[i] = xt[c] * scale[k]; });
    float* gs = px->gsum.data() + t * px->gstride;
    for (int64_t g = 0; g < ng; ++g) {
      float s = 0.0f;
      for (int64_t c = g * w.group_size; c < (g + 1) * w.group_size; ++c) s += xt[c];
      gs[g] = s;
    }
  }
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
                         axpy_scalar, axpy_scalar, swiglu_ref, nullptr};
  return k;
}

}  // namespace moeflux::cpu
