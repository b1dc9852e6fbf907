// Weight re-encoding for the converter (see encode.h).
#include "convert/encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/cpu_count.h"
#include "core/thread_pool.h"

namespace moeflux {

std::string Target::describe() const {
  switch (kind) {
    case Kind::Keep: return "as source";
    case Kind::Bf16: return "bf16";
    case Kind::Affine: return "q" + std::to_string(bits) + " g" + std::to_string(group_size);
    case Kind::Fp8: return "fp8";
  }
  return "";
}

void parallel_rows(int64_t rows, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  // Below 64K elements of work the hand-off costs more than it saves.
  if (rows <= 1 || rows * work_per_row < (int64_t(1) << 16)) return fn(0, rows);
  static ThreadPool pool(physical_core_count());
  pool.parallel_for_guided(rows, 1, 1, [&](int64_t r0, int64_t r1) { fn(r0, r1); });
}

uint8_t f32_to_f8e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;
  int e = 0;
  std::frexp(a, &e);
  const int E = std::max(e - 1, -6);  // binade; below 2^-6 the subnormal step 2^-9 applies
  const float step = std::ldexp(1.0f, E - 3);
  const float v = std::nearbyint(a / step) * step;  // ties to even (default rounding mode)
  if (v == 0.0f) return sign;
  std::frexp(v, &e);
  const int Ev = e - 1;
  if (Ev < -6) return sign | uint8_t(std::ldexp(v, 9));
  const uint32_t man = uint32_t(std::ldexp(v, -Ev) * 8.0f) - 8u;
  return sign | uint8_t(((Ev + 7) << 3) | man);
}

QWeight view_linear(const LinearSrc& s, const ModelConfig& cfg, int64_t expert, int64_t n_stack) {
  const bool stacked = expert >= 0;
  const size_t nd = s.wshape.size();
  if (nd != (stacked ? 3u : 2u))
    fail(s.module, ": weight has ", nd, " dimensions, expected ", stacked ? 3 : 2);
  if (stacked && s.wshape[0] != n_stack) fail(s.module, ": stacked weight has ", s.wshape[0], " experts");
  const uint64_t div = stacked ? uint64_t(n_stack) : 1;
  QWeight q;
  q.rows = s.wshape[nd - 2];
  const int64_t stored = s.wshape[nd - 1];
  const uint64_t wstride = s.wbytes / div, sstride = s.sbytes / div;
  const uint64_t e = stacked ? uint64_t(expert) : 0;
  q.data = s.w + e * wstride;
  if (s.scales) {
    const QuantSpec spec = cfg.quant.for_module(s.module);
    if (spec.bits == 0) fail(cfg.path, ": '", s.module, "' has scales but config.json has no quantization for it");
    if (s.wdtype != DType::U32) fail(s.module, ": quantised weight must be U32");
    q.format = WFormat::Affine;
    q.dtype = DType::U32;
    q.bits = spec.bits;
    q.group_size = spec.group_size;
    q.cols = stored * 32 / spec.bits;
    if (q.cols % spec.group_size != 0 || (stored * 32) % spec.bits != 0)
      fail(s.module, ": ", stored, " words per row do not hold whole groups of ", spec.group_size);
    q.sdtype = s.sdtype;
    if (sstride != uint64_t(q.rows * (q.cols / spec.group_size)) * dtype_size(s.sdtype))
      fail(s.module, ": scales/biases size does not match the weight");
    q.scales = s.scales + e * sstride;
    q.biases = s.biases + e * sstride;
  } else if (s.wdtype == DType::F8_E4M3) {
    if (!s.scale_inv) fail(s.module, ": FP8 weight without weight_scale_inv");
    q.format = WFormat::Fp8Block;
    q.dtype = DType::F8_E4M3;
    q.cols = stored;
    q.block_rows = cfg.quant.fp8_block_rows;
    q.block_cols = cfg.quant.fp8_block_cols;
    q.sdtype = s.sdtype;
    const uint64_t nb = uint64_t((q.rows + q.block_rows - 1) / q.block_rows) *
                        uint64_t((q.cols + q.block_cols - 1) / q.block_cols);
    if (sstride != nb * dtype_size(s.sdtype)) fail(s.module, ": weight_scale_inv shape does not match the weight");
    q.block_scales = s.scale_inv + e * sstride;
  } else {
    if (!dtype_is_float(s.wdtype) || s.wdtype == DType::F64)
      fail(s.module, ": weight dtype ", dtype_name(s.wdtype), " is not F32, F16 or BF16");
    q.format = WFormat::Dense;
    q.dtype = s.wdtype;
    q.cols = stored;
  }
  if (wstride != q.data_bytes()) fail(s.module, ": weight byte size does not match its shape");
  return q;
}

bool target_fits(const Target& t, int64_t cols) {
  if (t.kind != Target::Kind::Affine) return true;
  return cols % t.group_size == 0 && (cols * t.bits) % 32 == 0;
}

namespace {

OutPart view_part(const char* suffix, DType dt, std::vector<int64_t> shape, const uint8_t* data) {
  OutPart p;
  p.suffix = suffix;
  p.dtype = dt;
  p.shape = std::move(shape);
  p.nbytes = tensor_nbytes(dt, p.shape, suffix);
  p.data = data;
  return p;
}

OutPart owned_part(const char* suffix, DType dt, std::vector<int64_t> shape) {
  OutPart p = view_part(suffix, dt, std::move(shape), nullptr);
  p.owned.resize(p.nbytes);
  p.data = p.owned.data();
  return p;
}

std::vector<OutPart> keep(const QWeight& w) {
  std::vector<OutPart> out;
  switch (w.format) {
    case WFormat::Dense: out.push_back(view_part(".weight", w.dtype, {w.rows, w.cols}, w.data)); break;
    case WFormat::Affine: {
      const int64_t ng = w.cols / w.group_size;
      out.push_back(view_part(".weight", DType::U32, {w.rows, w.cols * w.bits / 32}, w.data));
      out.back().quant = PackQuant{PackQuant::Format::Affine, w.bits, w.group_size, 0, 0, w.sdtype};
      out.push_back(view_part(".scales", w.sdtype, {w.rows, ng}, w.scales));
      out.push_back(view_part(".biases", w.sdtype, {w.rows, ng}, w.biases));
      break;
    }
    case WFormat::Fp8Block: {
      const int64_t br = (w.rows + w.block_rows - 1) / w.block_rows, bc = (w.cols + w.block_cols - 1) / w.block_cols;
      out.push_back(view_part(".weight", DType::F8_E4M3, {w.rows, w.cols}, w.data));
      out.back().quant = PackQuant{PackQuant::Format::Fp8, 0, 0, w.block_rows, w.block_cols, w.sdtype};
      out.push_back(view_part(".weight_scale_inv", w.sdtype, {br, bc}, w.block_scales));
      break;
    }
  }
  return out;
}

// Releases the source pages of rows [r0, r1) once they are consumed (see encode_linear).
struct RowDropper {
  const QWeight& w;
  bool on;
  void operator()(int64_t r0, int64_t r1) const {
    if (on && r1 > r0) drop_mapped_pages(w.data + size_t(r0) * w.row_bytes(), size_t(r1 - r0) * w.row_bytes());
  }
};

// Row of `w` as f32; bf16 / f32 sources without the per-element dtype switch.
void row_f32(const QWeight& w, int64_t r, float* out) {
  if (w.format == WFormat::Dense && w.dtype == DType::BF16) {
    const uint8_t* p = w.data + size_t(r) * w.row_bytes();
    for (int64_t c = 0; c < w.cols; ++c) {
      uint16_t h;
      std::memcpy(&h, p + 2 * c, 2);
      out[c] = bf16_to_f32(h);
    }
  } else if (w.format == WFormat::Dense && w.dtype == DType::F32) {
    std::memcpy(out, w.data + size_t(r) * w.row_bytes(), size_t(w.cols) * 4);
  } else {
    dequant_row_ref(w, r, out);
  }
}

std::vector<OutPart> to_bf16(const QWeight& w, RowDropper drop) {
  std::vector<OutPart> out;
  out.push_back(owned_part(".weight", DType::BF16, {w.rows, w.cols}));
  uint16_t* dst = reinterpret_cast<uint16_t*>(out[0].owned.data());
  parallel_rows(w.rows, w.cols, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = r0; r < r1; ++r) {
      row_f32(w, r, row.data());
      for (int64_t c = 0; c < w.cols; ++c) dst[r * w.cols + c] = f32_to_bf16(row[size_t(c)]);
      if ((r + 1 - r0) % 256 == 0 || r + 1 == r1) drop(std::max(r0, r + 1 - 256), r + 1);
    }
  });
  return out;
}

// quantize_row_affine_ref, bit for bit (the tests compare them), restructured for speed:
// clamping before rounding is equivalent because the bounds are integers, and adding 1.5*2^23
// rounds |x| < 2^22 to nearest even exactly as nearbyint does (which is a libm call here).
void quantize_row_affine_fast(const float* x, int64_t cols, int bits, int group, uint32_t* packed,
                              uint16_t* scales, uint16_t* biases, uint32_t* qtmp) {
  const float nb = float((1 << bits) - 1);
  const volatile float magic_v = 12582912.0f;  // volatile: keep the add/sub pair from folding
  const float magic = magic_v;
  for (int64_t g = 0; g < cols / group; ++g) {
    const float* v = x + g * group;
    float lo = v[0], hi = v[0];
    for (int k = 1; k < group; ++k) lo = std::min(lo, v[k]), hi = std::max(hi, v[k]);
    const uint16_t sb = f32_to_bf16(std::max((hi - lo) / nb, 1e-7f));
    const uint16_t bb = f32_to_bf16(lo);
    scales[g] = sb, biases[g] = bb;
    const float s = bf16_to_f32(sb), b = bf16_to_f32(bb);
    for (int k = 0; k < group; ++k) {
      const float t = std::min(std::max((v[k] - b) / s, 0.0f), nb);
      qtmp[g * group + k] = uint32_t((t + magic) - magic);
    }
  }
  const int64_t words = cols * bits / 32;
  if (bits == 4 || bits == 8 || bits == 2) {
    const int per = 32 / bits;
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t acc = 0;
      for (int k = 0; k < per; ++k) acc |= qtmp[wi * per + k] << (k * bits);
      packed[wi] = acc;
    }
    return;
  }
  std::memset(packed, 0, size_t(words) * 4);
  for (int64_t c = 0; c < cols; ++c) {
    const uint64_t bit = uint64_t(c) * uint64_t(bits);
    packed[bit / 32] |= qtmp[c] << (bit % 32);
    if (bit % 32 + uint64_t(bits) > 32) packed[bit / 32 + 1] |= qtmp[c] >> (32 - bit % 32);
  }
}

std::vector<OutPart> to_affine(const QWeight& w, int bits, int group, RowDropper drop) {
  const int64_t ng = w.cols / group, words = w.cols * bits / 32;
  std::vector<OutPart> out;
  out.push_back(owned_part(".weight", DType::U32, {w.rows, words}));
  out.back().quant = PackQuant{PackQuant::Format::Affine, bits, group, 0, 0, DType::BF16};
  out.push_back(owned_part(".scales", DType::BF16, {w.rows, ng}));
  out.push_back(owned_part(".biases", DType::BF16, {w.rows, ng}));
  auto* q = reinterpret_cast<uint32_t*>(out[0].owned.data());
  auto* s = reinterpret_cast<uint16_t*>(out[1].owned.data());
  auto* b = reinterpret_cast<uint16_t*>(out[2].owned.data());
  parallel_rows(w.rows, w.cols, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    std::vector<uint32_t> qtmp(static_cast<size_t>(w.cols));
    for (int64_t r = r0; r < r1; ++r) {
      row_f32(w, r, row.data());
      quantize_row_affine_fast(row.data(), w.cols, bits, group, q + r * words, s + r * ng, b + r * ng, qtmp.data());
      if ((r + 1 - r0) % 256 == 0 || r + 1 == r1) drop(std::max(r0, r + 1 - 256), r + 1);
    }
  });
  return out;
}

std::vector<OutPart> to_fp8(const QWeight& w, RowDropper drop) {
  constexpr int64_t B = 128;
  const int64_t br = (w.rows + B - 1) / B, bc = (w.cols + B - 1) / B;
  std::vector<OutPart> out;
  out.push_back(owned_part(".weight", DType::F8_E4M3, {w.rows, w.cols}));
  out.back().quant = PackQuant{PackQuant::Format::Fp8, 0, 0, int(B), int(B), DType::F32};
  out.push_back(owned_part(".weight_scale_inv", DType::F32, {br, bc}));
  uint8_t* q = out[0].owned.data();
  float* sinv = reinterpret_cast<float*>(out[1].owned.data());
  parallel_rows(br, B * w.cols, [&](int64_t b0, int64_t b1) {
    std::vector<float> strip(static_cast<size_t>(B * w.cols));
    for (int64_t rb = b0; rb < b1; ++rb) {
      const int64_t r0 = rb * B, nr = std::min(B, w.rows - r0);
      for (int64_t i = 0; i < nr; ++i) dequant_row_ref(w, r0 + i, strip.data() + i * w.cols);
      for (int64_t cb = 0; cb < bc; ++cb) {
        const int64_t c0 = cb * B, nc = std::min(B, w.cols - c0);
        float amax = 0;
        for (int64_t i = 0; i < nr; ++i)
          for (int64_t j = 0; j < nc; ++j) amax = std::max(amax, std::fabs(strip[size_t(i * w.cols + c0 + j)]));
        const float scale = amax > 0 ? amax / 448.0f : 1.0f;
        sinv[rb * bc + cb] = scale;
        for (int64_t i = 0; i < nr; ++i)
          for (int64_t j = 0; j < nc; ++j)
            q[(r0 + i) * w.cols + c0 + j] = f32_to_f8e4m3(strip[size_t(i * w.cols + c0 + j)] / scale);
      }
      drop(r0, r0 + nr);
    }
  });
  return out;
}

}  // namespace

std::vector<OutPart> encode_linear(const QWeight& w, const Target& t, bool drop_source) {
  const RowDropper drop{w, drop_source};
  switch (t.kind) {
    case Target::Kind::Keep: return keep(w);
    case Target::Kind::Bf16:
      return w.format == WFormat::Dense && w.dtype == DType::BF16 ? keep(w) : to_bf16(w, drop);
    case Target::Kind::Affine:
      if (w.format == WFormat::Affine && w.bits == t.bits && w.group_size == t.group_size) return keep(w);
      return to_affine(w, t.bits, t.group_size, drop);
    case Target::Kind::Fp8:
      if (w.format == WFormat::Fp8Block && w.block_rows == 128 && w.block_cols == 128) return keep(w);
      return to_fp8(w, drop);
  }
  return {};
}

}  // namespace moeflux
