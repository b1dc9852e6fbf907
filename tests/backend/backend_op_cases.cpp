// OpRun and the table's per-token ops: embed, add + RMSNorm, add, RoPE, matmul (one weight
// and several sharing x), logits. The mixers and FFNs: backend_op_block_cases.cpp.
#include "backend/backend_op_cases.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace moeflux::test {

namespace {
std::string lower(std::string_view s) {
  std::string l(s);
  for (char& c : l) c = char(std::tolower(c));
  return l;
}
}  // namespace

std::string WSpec::name() const {
  const std::string s = sdtype == DType::BF16 ? "" : lower(dtype_name(sdtype));
  switch (format) {
    case WFormat::Dense: return lower(dtype_name(dtype));
    case WFormat::Affine: return "q" + std::to_string(bits) + "g" + std::to_string(group) + s;
    case WFormat::Fp8Block:
      return "fp8b" + std::to_string(block_rows) + "x" + std::to_string(block_cols) + s;
  }
  return "?";
}

WSpec dense(DType t) { return WSpec{WFormat::Dense, t}; }
WSpec affine(int bits, int group, DType sdtype) { return WSpec{WFormat::Affine, DType::U32, bits, group, sdtype}; }
WSpec fp8(int block_rows, int block_cols, DType sdtype) {
  return WSpec{WFormat::Fp8Block, DType::F8_E4M3, 0, 0, sdtype, block_rows, block_cols};
}

OwnedWeight& OpRun::raw(const WSpec& f, int64_t rows, int64_t cols, uint32_t seed) {
  OwnedWeight o = f.format == WFormat::Dense    ? random_dense(rows, cols, f.dtype, seed)
                  : f.format == WFormat::Affine ? random_affine(rows, cols, f.bits, f.group, f.sdtype, seed)
                                                : random_fp8(rows, cols, f.block_rows, f.block_cols, f.sdtype, seed);
  if (!b.supports(op, o.w)) throw Unsupported{std::string(op_name(op)) + " on " + o.name()};
  weights_.push_back(std::move(o));  // the view points into the moved buffers
  return weights_.back();
}

QWeight OpRun::weight(const WSpec& f, int64_t rows, int64_t cols, uint32_t seed,
                      const std::function<void(OwnedWeight&)>& edit) {
  OwnedWeight& o = raw(f, rows, cols, seed);
  if (edit) edit(o);
  b.prepare_weight(o.w, 1, /*rewrite=*/true);  // o's bytes are private and not yet prepared
  return o.w;
}

Act OpRun::act(int64_t rows, int64_t cols, const std::vector<float>& x) {
  acts_.push_back(b.alloc(size_t(rows * cols)));
  const Act a = acts_.back()->view(rows, cols);
  const std::vector<float> fill = x.empty() ? std::vector<float>(a.size(), NAN) : x;
  MF_ASSERT(fill.size() == a.size());
  b.from_host(fill.data(), a);
  return a;
}

std::vector<float> OpRun::host(Act a) const {
  std::vector<float> v(a.size());
  b.to_host(a, v.data());
  return v;
}

namespace {

constexpr double kTol = 1e-5;  // float reordering (and the CPU's integer x, within 2^-21)

// A ragged width for f: odd for dense, three groups for affine, partial blocks for fp8.
int64_t ragged_cols(const WSpec& f) {
  return f.format == WFormat::Affine ? 3 * f.group : f.format == WFormat::Dense ? 75 : 200;
}

std::vector<WSpec> every_format() {
  std::vector<WSpec> fs = {dense(DType::BF16), dense(DType::F16), dense(DType::F32)};
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) fs.push_back(affine(bits, group));
  fs.push_back(affine(4, 64, DType::F16));
  fs.push_back(affine(8, 32, DType::F32));
  fs.push_back(fp8(128, 128));
  fs.push_back(fp8(16, 32, DType::F32));
  return fs;
}

std::string tokens(int64_t T) { return "_T" + std::to_string(T); }

void add_embed(std::vector<OpCase>& cases) {
  for (const WSpec& f : {dense(DType::BF16), dense(DType::F16), dense(DType::F32), affine(4, 64), affine(3, 32),
                         affine(8, 128), fp8(128, 128)})
    cases.push_back({"embed_" + f.name(), Op::Embed, 1e-6, [f](OpRun& r) {
                       const int64_t dim = ragged_cols(f);
                       const QWeight table = r.weight(f, 37, dim, 11);
                       const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
                       const Act out = r.act(int64_t(ids.size()), dim);
                       r.b.embed(table, ids, out);
                       return r.host(out);
                     }});
}

// x += y (when y), h = rmsnorm(x) * w (w null: no weight), h either x itself or its own
// buffer; `inf`: an infinity in row 1 of x (that row's h is NaN or 0, the others unharmed).
void add_norms(std::vector<OpCase>& cases) {
  struct C {
    int64_t T, dim;
    bool y, alias, weight, inf;
  };
  for (const C c : {C{1, 7, false, false, true, false}, C{4, 129, true, false, true, false},
                    C{1, 2048, true, true, true, false}, C{5, 2048, true, true, true, false},
                    C{3, 129, false, true, false, false}, C{1, 129, true, false, false, false},
                    C{2, 1, true, false, true, false}, C{2, 2049, false, true, true, false},
                    C{3, 129, true, false, true, true}})
    cases.push_back({"rms_norm_" + std::to_string(c.dim) + tokens(c.T) + (c.y ? "_add" : "") + (c.alias ? "_inplace" : "") +
                         (c.weight ? "" : "_noweight") + (c.inf ? "_inf" : ""),
                     Op::RmsNorm, kTol, [c](OpRun& r) {
                       auto x = randn(size_t(c.T * c.dim), 21);
                       if (c.inf) x[size_t(c.dim + 3)] = INFINITY;
                       const auto w = randn(size_t(c.dim), 22);
                       const Act xa = r.act(c.T, c.dim, x), ya = r.act(c.T, c.dim, randn(size_t(c.T * c.dim), 23));
                       const Act h = c.alias ? xa : r.act(c.T, c.dim);
                       r.b.add_rms_norm(xa, c.y ? &ya : nullptr, c.weight ? w.data() : nullptr, 1e-6f, h);
                       auto out = r.host(xa);
                       for (float v : r.host(h)) out.push_back(v);
                       return out;
                     }});
  for (const auto& shape : {std::pair<int64_t, int64_t>{1, 7}, {3, 129}}) {
    const int64_t T = shape.first, dim = shape.second;  // named copies: lambdas capture them
    cases.push_back({"add_" + std::to_string(dim) + tokens(T), Op::Add, 0.0, [T, dim](OpRun& r) {
                       const Act x = r.act(T, dim, randn(size_t(T * dim), 24));
                       r.b.add(x, r.act(T, dim, randn(size_t(T * dim), 25)));
                       return r.host(x);
                     }});
  }
}

void add_rope(std::vector<OpCase>& cases) {
  struct C {
    const char* name;
    RopeConfig cfg;
    int64_t head_dim, n_heads, pos0;
  };
  RopeConfig plain, partial, yarn, linear;
  partial.partial_rotary_factor = 0.25, partial.theta = 1e6;
  yarn.type = "yarn", yarn.factor = 4, yarn.original_max_position_embeddings = 4096, yarn.mscale = 1, yarn.mscale_all_dim = 0.5;
  linear.type = "linear", linear.factor = 2;
  for (const C& c : {C{"default", plain, 64, 4, 0}, C{"partial", partial, 128, 2, 17}, C{"yarn", yarn, 64, 3, 5000},
                     C{"linear", linear, 32, 1, 300}})
    for (int64_t T : {1, 5})
      cases.push_back({std::string("rope_") + c.name + "_hd" + std::to_string(c.head_dim) + tokens(T), Op::Rope, kTol,
                       [c, T](OpRun& r) {
                         const RopeTable t = make_rope_table(c.cfg, c.head_dim);
                         const Act x = r.act(T, c.n_heads * c.head_dim, randn(size_t(T * c.n_heads * c.head_dim), 26));
                         r.b.rope(t, c.head_dim, c.pos0, x);
                         return r.host(x);
                       }});
}

// Non-finite inputs of a matmul case: an infinity in x (the CPU's integer paths refuse it),
// or the two fp8 NaN codes (S.1111.111) in rows 3 (last column: a vector tail) and 5. Scaled
// (all finite): rows of x far apart in magnitude (row 1 times 1e6, row 2 times 1e-6, row 3
// zeros), which the tensor-core path splits into f16 by a power of two per row.
enum class NonFinite { None, InfX, Fp8Nan, Scaled };

// ys[i] = x W_i^T over weights sharing x (rows each); each output non-finite where ref's is.
OpCase matmul_case(const std::string& name, std::vector<std::pair<WSpec, int64_t>> ws, int64_t cols, int64_t T,
                   NonFinite nf = NonFinite::None) {
  return {"matmul_" + name + tokens(T), Op::Matmul, kTol, [=](OpRun& r) {
            auto nan_codes = [cols](OwnedWeight& o) {
              o.data[size_t(3 * cols + cols - 1)] = 0x7f;
              o.data[size_t(5 * cols + 2)] = 0xff;
            };
            std::vector<QWeight> w;
            for (size_t i = 0; i < ws.size(); ++i)
              w.push_back(r.weight(ws[i].first, ws[i].second, cols, uint32_t(31 + i),
                                   nf == NonFinite::Fp8Nan ? nan_codes : std::function<void(OwnedWeight&)>{}));
            auto x = randn(size_t(T * cols), 32);
            if (nf == NonFinite::InfX) x[size_t(cols / 2)] = INFINITY;
            if (nf == NonFinite::Scaled)
              for (int64_t c = 0; c < cols; ++c)
                x[size_t(cols + c)] *= 1e6f, x[size_t(2 * cols + c)] *= 1e-6f, x[size_t(3 * cols + c)] = 0.0f;
            std::vector<const QWeight*> wp;
            std::vector<Act> ys;
            for (const QWeight& wi : w) wp.push_back(&wi), ys.push_back(r.act(T, wi.rows));
            r.b.matmul(wp, r.act(T, cols, x), ys);
            std::vector<float> out;
            for (const Act& y : ys)
              for (float v : r.host(y)) out.push_back(v);
            return out;
          }};
}

// Steps of at least kTcRows (16) rows: the cuda backend runs affine 4-bit and 8-bit weights with
// groups of 32 or more on tensor cores (mma_rows.cu), in tiles of 32 rows x 256 weight rows over
// stages of 64 columns. Whole and ragged tiles (64, 100 rows), weight rows past a tile (300,
// 513), columns that end a stage half-way (3 groups of 32: 96), scale types, several weights
// sharing x (some on tensor cores, some not), an infinity in x, rows of x far apart in size.
void add_tc_matmuls(std::vector<OpCase>& cases) {
  for (const WSpec& f : {affine(4, 64), affine(8, 64), affine(4, 32), affine(8, 32), affine(4, 128), affine(4, 64, DType::F16),
                         affine(8, 32, DType::F32)})
    for (int64_t T : {64, 100}) {
      const int64_t cols = ragged_cols(f);
      cases.push_back(matmul_case(f.name() + "_300x" + std::to_string(cols), {{f, 300}}, cols, T));
    }
  for (const WSpec& f : {affine(4, 64), affine(8, 64)})
    cases.push_back(matmul_case(f.name() + "_513x2048", {{f, 513}}, 2048, 40));
  cases.push_back(matmul_case("q4g64_67x320", {{affine(4, 64), 67}}, 320, 16));
  cases.push_back(matmul_case("qkv_q4g64", {{affine(4, 64), 64}, {affine(4, 64), 32}, {affine(4, 64), 32}}, 192, 64));
  cases.push_back(matmul_case("qkv_q4g64_q8g32", {{affine(4, 64), 300}, {affine(8, 32), 32}, {affine(4, 64), 40}}, 192, 33));
  cases.push_back(matmul_case("mixed", {{dense(DType::BF16), 67}, {affine(8, 32), 13}, {fp8(128, 128), 40}}, 96, 64));
  cases.push_back(matmul_case("q4g64_67x192_inf", {{affine(4, 64), 67}}, 192, 64, NonFinite::InfX));
  cases.push_back(matmul_case("q8g64_67x192_scaled", {{affine(8, 64), 67}}, 192, 64, NonFinite::Scaled));
  cases.push_back(matmul_case("q4g32_67x96_scaled", {{affine(4, 32), 67}}, 96, 100, NonFinite::Scaled));
}

void add_matmuls(std::vector<OpCase>& cases) {
  for (const WSpec& f : every_format())
    for (int64_t T : {int64_t(1), int64_t(5), kPrefillT}) {
      const int64_t cols = ragged_cols(f);
      cases.push_back(matmul_case(f.name() + "_67x" + std::to_string(cols), {{f, 67}}, cols, T));
    }
  // Sizes where the CPU splits rows over threads and reads rows side by side (tails of 1-3 rows);
  // 11 rows of x: more than the GPU's small-step kernels take a launch.
  for (const WSpec& f : {affine(4, 64), affine(8, 128), affine(4, 32), dense(DType::BF16)})
    for (int64_t T : {1, 3, 11}) cases.push_back(matmul_case(f.name() + "_513x2048", {{f, 513}}, 2048, T));
  // Several weights over one x: one layout (q / k / v), and mixed layouts.
  for (int64_t T : {1, 4}) {
    cases.push_back(matmul_case("qkv_q4g64", {{affine(4, 64), 64}, {affine(4, 64), 32}, {affine(4, 64), 32}}, 192, T));
    cases.push_back(matmul_case("mixed", {{dense(DType::BF16), 67}, {affine(8, 32), 13}, {fp8(128, 128), 40}}, 96, T));
  }
  cases.push_back(matmul_case("bf16_67x75_inf", {{dense(DType::BF16), 67}}, 75, 2, NonFinite::InfX));
  cases.push_back(matmul_case("q4g32_67x96_inf", {{affine(4, 32), 67}}, 96, 2, NonFinite::InfX));
  cases.push_back(matmul_case("q4g64_64x2048_inf", {{affine(4, 64), 64}}, 2048, 1, NonFinite::InfX));
  for (int64_t cols : {40, 128})
    cases.push_back(matmul_case("fp8nan_8x" + std::to_string(cols), {{fp8(4, 16, DType::F32), 8}}, cols, 1, NonFinite::Fp8Nan));
  add_tc_matmuls(cases);
}

void add_logits(std::vector<OpCase>& cases) {
  for (const WSpec& f : {dense(DType::BF16), affine(4, 64), affine(6, 64), fp8(128, 128)})
    for (int64_t T : {int64_t(1), int64_t(3), kPrefillT})
      cases.push_back({"logits_" + f.name() + tokens(T), Op::Logits, kTol, [f, T](OpRun& r) {
                         const QWeight head = r.weight(f, 101, 192, 41);
                         std::vector<float> logits(size_t(T * head.rows), NAN);
                         r.b.logits(head, r.act(T, 192, randn(size_t(T * 192), 42)), logits.data());
                         return logits;
                       }});
}

}  // namespace

std::vector<OpCase> backend_op_cases() {
  std::vector<OpCase> cases;
  add_embed(cases);
  add_norms(cases);
  add_rope(cases);
  add_matmuls(cases);
  add_logits(cases);
  add_block_cases(cases);
  return cases;
}

}  // namespace moeflux::test
