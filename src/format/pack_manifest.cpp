// manifest.json parsing, validation and serialisation. Every field read from the file is
// type-checked and every offset bounds-checked before use; errors name the field.
#include "format/pack_manifest.h"

#include <algorithm>
#include <set>

#include "core/crc32.h"
#include "core/crc32c.h"
#include "core/error.h"

namespace moeflux {

using nlohmann::json;

namespace {

const json& field(const json& o, const char* key, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end()) fail(where, ": missing field '", key, "'");
  return *it;
}

uint64_t get_u64(const json& o, const char* key, const std::string& where) {
  const json& v = field(o, key, where);
  if (!v.is_number_unsigned()) fail(where, ": field '", key, "' must be a non-negative integer");
  return v.get<uint64_t>();
}

std::string get_str(const json& o, const char* key, const std::string& where) {
  const json& v = field(o, key, where);
  if (!v.is_string()) fail(where, ": field '", key, "' must be a string");
  return v.get<std::string>();
}

uint64_t arr_u64(const json& a, size_t i, const std::string& where) {
  if (!a[i].is_number_unsigned()) fail(where, ": entry ", i, " must be a non-negative integer");
  return a[i].get<uint64_t>();
}

void check_file_name(const std::string& f, const std::string& where) {
  if (f.empty() || f.front() == '/' || f.find("..") != std::string::npos || f.find('\\') != std::string::npos)
    fail(where, ": invalid file name '", f, "' (must be relative, without '..')");
}

DType get_dtype(const json& o, const char* key, const std::string& where) {
  auto d = dtype_from_name(get_str(o, key, where));
  if (!d) fail(where, ": unknown dtype '", get_str(o, key, where), "'");
  return *d;
}

PackQuant parse_quant(const json& q, const std::string& where) {
  if (!q.is_object()) fail(where, ": 'quant' must be an object");
  PackQuant p;
  const std::string fmt = get_str(q, "format", where);
  p.scale_dtype = get_dtype(q, "scale_dtype", where);
  if (!dtype_is_float(p.scale_dtype) || p.scale_dtype == DType::F8_E4M3 || p.scale_dtype == DType::F64)
    fail(where, ": scale_dtype must be F32, F16 or BF16");
  if (fmt == "affine") {
    p.format = PackQuant::Format::Affine;
    const uint64_t b = get_u64(q, "bits", where), g = get_u64(q, "group_size", where);
    if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8) fail(where, ": unsupported bits ", b);
    if (g != 32 && g != 64 && g != 128) fail(where, ": unsupported group_size ", g);
    p.bits = int(b), p.group_size = int(g);
  } else if (fmt == "fp8") {
    p.format = PackQuant::Format::Fp8;
    const json& blk = field(q, "block", where);
    if (!blk.is_array() || blk.size() != 2) fail(where, ": 'block' must be [rows, cols]");
    const uint64_t r = arr_u64(blk, 0, where + " block"), c = arr_u64(blk, 1, where + " block");
    if (r == 0 || c == 0 || r > 65536 || c > 65536) fail(where, ": fp8 block [", r, ", ", c, "] out of range");
    p.block_rows = int(r), p.block_cols = int(c);
  } else {
    fail(where, ": unknown quant format '", fmt, "' (affine or fp8)");
  }
  return p;
}

PackTensor parse_tensor(const json& t, const std::string& where0, bool want_crc) {
  if (!t.is_object()) fail(where0, ": tensor entry is not an object");
  PackTensor p;
  p.name = get_str(t, "name", where0);
  if (p.name.empty()) fail(where0, ": empty tensor name");
  const std::string where = where0 + ": tensor '" + p.name + "'";
  p.dtype = get_dtype(t, "dtype", where);
  const json& sh = field(t, "shape", where);
  if (!sh.is_array() || sh.size() > 8) fail(where, ": 'shape' must be a list of at most 8 integers");
  for (size_t i = 0; i < sh.size(); ++i) {
    const uint64_t d = arr_u64(sh, i, where + " shape");
    if (d > (1ull << 40)) fail(where, ": shape entry ", d, " is too large");
    p.shape.push_back(int64_t(d));
  }
  p.offset = get_u64(t, "offset", where);
  p.nbytes = get_u64(t, "nbytes", where);
  if (p.offset % kDenseAlign != 0) fail(where, ": offset ", p.offset, " is not a multiple of ", kDenseAlign);
  const uint64_t want = tensor_nbytes(p.dtype, p.shape, where);
  if (p.nbytes != want)
    fail(where, ": nbytes ", p.nbytes, " does not match shape and dtype (", want, ")");
  if (want_crc) {
    const uint64_t c = get_u64(t, "crc32", where);
    if (c > 0xffffffffull) fail(where, ": crc32 out of range");
    p.crc32 = uint32_t(c);
  }
  if (auto q = t.find("quant"); q != t.end()) {
    p.quant = parse_quant(*q, where);
    const auto& qq = *p.quant;
    if (qq.format == PackQuant::Format::Affine && p.dtype != DType::U32)
      fail(where, ": affine weights must be U32");
    if (qq.format == PackQuant::Format::Fp8 && p.dtype != DType::F8_E4M3)
      fail(where, ": fp8 weights must be F8_E4M3");
  }
  return p;
}

// Tensors sorted by offset must not overlap and must end within `limit`.
void check_extents(std::vector<const PackTensor*> ts, uint64_t limit, const std::string& where,
                   const char* limit_name) {
  std::sort(ts.begin(), ts.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < ts.size(); ++i) {
    const PackTensor& t = *ts[i];
    if (t.nbytes > limit || t.offset > limit - t.nbytes)
      fail(where, ": tensor '", t.name, "' [", t.offset, ", +", t.nbytes, ") runs past the ", limit_name, " (",
           limit, " bytes)");
    if (i && t.offset < ts[i - 1]->offset + ts[i - 1]->nbytes)
      fail(where, ": tensors '", ts[i - 1]->name, "' and '", t.name, "' overlap");
  }
}

ExpertLayer parse_layer(const json& l, size_t idx, const std::string& what) {
  std::string where = what + ": experts[" + std::to_string(idx) + "]";
  if (!l.is_object()) fail(where, ": not an object");
  ExpertLayer e;
  const uint64_t layer = get_u64(l, "layer", where);
  if (layer > 100000) fail(where, ": layer ", layer, " out of range");
  e.layer = int64_t(layer);
  where = what + ": experts of layer " + std::to_string(layer);
  e.prefix = get_str(l, "prefix", where);
  if (e.prefix.empty()) fail(where, ": empty 'prefix'");
  e.file = get_str(l, "file", where);
  check_file_name(e.file, where);
  e.size = get_u64(l, "size", where);
  const json& lays = field(l, "layouts", where);
  if (!lays.is_array() || lays.empty()) fail(where, ": 'layouts' must be a non-empty list");
  std::vector<uint64_t> layout_end;
  for (size_t i = 0; i < lays.size(); ++i) {
    const std::string lw = where + " layout " + std::to_string(i);
    if (!lays[i].is_array() || lays[i].empty()) fail(lw, ": must be a non-empty list of tensors");
    std::vector<PackTensor> ts;
    std::set<std::string> names;
    for (const auto& t : lays[i]) {
      ts.push_back(parse_tensor(t, lw, false));
      if (!names.insert(ts.back().name).second) fail(lw, ": duplicate tensor '", ts.back().name, "'");
    }
    std::vector<const PackTensor*> ptrs;
    uint64_t end = 0;
    for (const auto& t : ts) {
      ptrs.push_back(&t);
      if (t.nbytes > (1ull << 50) || t.offset > (1ull << 50)) fail(lw, ": tensor '", t.name, "' is too large");
      end = std::max(end, t.offset + t.nbytes);
    }
    check_extents(ptrs, end, lw, "layout");
    layout_end.push_back(end);
    e.layouts.push_back(std::move(ts));
  }
  const json& recs = field(l, "records", where);
  if (!recs.is_array() || recs.empty()) fail(where, ": 'records' must be a non-empty list");
  if (recs.size() > (1u << 20)) fail(where, ": too many records");
  for (size_t i = 0; i < recs.size(); ++i) {
    const std::string rw = where + " expert " + std::to_string(i);
    const json& r = recs[i];
    if (!r.is_array() || r.size() != 5) fail(rw, ": record must be [offset, size, bits, crc32, layout]");
    PackRecord p;
    p.offset = arr_u64(r, 0, rw);
    p.size = arr_u64(r, 1, rw);
    const uint64_t bits = arr_u64(r, 2, rw), crc = arr_u64(r, 3, rw), lay = arr_u64(r, 4, rw);
    if (bits > 32) fail(rw, ": bits ", bits, " out of range");
    if (crc > 0xffffffffull) fail(rw, ": crc32 out of range");
    if (lay >= e.layouts.size()) fail(rw, ": layout ", lay, " does not exist (", e.layouts.size(), " layouts)");
    p.bits = int(bits), p.crc32 = uint32_t(crc), p.layout = uint32_t(lay);
    if (p.offset % kRecordAlign || p.size % kRecordAlign || p.size == 0)
      fail(rw, ": offset ", p.offset, " and size ", p.size, " must be non-zero multiples of ", kRecordAlign);
    if (p.size > e.size || p.offset > e.size - p.size)
      fail(rw, ": record [", p.offset, ", +", p.size, ") runs past the end of ", e.file, " (", e.size, " bytes)");
    if (layout_end[lay] > p.size)
      fail(rw, ": layout ", lay, " needs ", layout_end[lay], " bytes but the record has ", p.size);
    e.records.push_back(p);
  }
  std::vector<const PackRecord*> byoff;
  for (const auto& r : e.records) byoff.push_back(&r);
  std::sort(byoff.begin(), byoff.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < byoff.size(); ++i)
    if (byoff[i]->offset < byoff[i - 1]->offset + byoff[i - 1]->size) fail(where, ": records overlap");
  return e;
}

json quant_json(const PackQuant& q) {
  json j;
  j["format"] = q.format == PackQuant::Format::Affine ? "affine" : "fp8";
  if (q.format == PackQuant::Format::Affine) j["bits"] = q.bits, j["group_size"] = q.group_size;
  else j["block"] = {q.block_rows, q.block_cols};
  j["scale_dtype"] = std::string(dtype_name(q.scale_dtype));
  return j;
}

json tensor_json(const PackTensor& t, bool crc) {
  json j = {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape},
            {"offset", t.offset}, {"nbytes", t.nbytes}};
  if (crc) j["crc32"] = t.crc32;
  if (t.quant) j["quant"] = quant_json(*t.quant);
  return j;
}

}  // namespace

const char* checksum_name(PackChecksum k) { return k == PackChecksum::Crc32 ? "crc32" : "crc32c"; }

uint32_t checksum_update(PackChecksum k, uint32_t crc, const uint8_t* p, uint64_t n) {
  return k == PackChecksum::Crc32 ? crc32_update(crc, p, n) : crc32c_update(crc, p, n);
}

uint64_t tensor_nbytes(DType t, const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t n = dtype_size(t);
  for (int64_t d : shape) {
    if (d < 0) fail(where, ": negative dimension");
    if (d && n > (1ull << 50) / uint64_t(d)) fail(where, ": tensor is too large");
    n *= uint64_t(d);
  }
  return n;
}

PackManifest parse_pack_manifest(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(what, ": not valid JSON");
  if (!j.is_object()) fail(what, ": not a JSON object");
  PackManifest m;
  const std::string fmt = get_str(j, "format", what);
  if (fmt != kPackFormatName) fail(what, ": format is '", fmt, "', expected '", kPackFormatName, "'");
  const uint64_t v = get_u64(j, "version", what);
  if (v < uint64_t(kPackVersionOldest) || v > uint64_t(kPackVersion))
    fail(what, ": unsupported pack version ", v, " (this build reads versions ", kPackVersionOldest, " to ",
         kPackVersion, "; re-convert)");
  m.version = int(v);
  m.architecture = get_str(j, "architecture", what);
  m.config = field(j, "config", what);
  if (!m.config.is_object()) fail(what, ": 'config' must be an object (the source config.json)");
  auto mt = m.config.find("model_type");
  if (mt == m.config.end() || !mt->is_string() || mt->get<std::string>() != m.architecture)
    fail(what, ": config.model_type does not match architecture '", m.architecture, "'");
  m.source_layout = get_str(j, "source_layout", what);
  if (m.source_layout != "hf" && m.source_layout != "mlx") fail(what, ": source_layout must be 'hf' or 'mlx'");
  m.checksum = v == 1 ? PackChecksum::Crc32 : PackChecksum::Crc32c;
  const std::string sum = get_str(j, "checksum", what);
  if (sum != checksum_name(m.checksum))
    fail(what, ": unsupported checksum '", sum, "' (version ", v, " packs use ", checksum_name(m.checksum), ")");
  const json& d = field(j, "dense", what);
  if (!d.is_object()) fail(what, ": 'dense' must be an object");
  m.dense_file = get_str(d, "file", what + ": dense");
  check_file_name(m.dense_file, what + ": dense");
  m.dense_size = get_u64(d, "size", what + ": dense");
  const json& ts = field(d, "tensors", what + ": dense");
  if (!ts.is_array()) fail(what, ": dense.tensors must be a list");
  std::set<std::string> names;
  for (const auto& t : ts) {
    m.dense.push_back(parse_tensor(t, what + ": dense", true));
    if (!names.insert(m.dense.back().name).second) fail(what, ": duplicate tensor '", m.dense.back().name, "'");
  }
  std::vector<const PackTensor*> ptrs;
  for (const auto& t : m.dense) ptrs.push_back(&t);
  check_extents(ptrs, m.dense_size, what + ": dense", "end of the dense file");
  const json& ex = field(j, "experts", what);
  if (!ex.is_array()) fail(what, ": 'experts' must be a list");
  std::set<int64_t> layers;
  std::set<std::string> files{m.dense_file};
  for (size_t i = 0; i < ex.size(); ++i) {
    m.experts.push_back(parse_layer(ex[i], i, what));
    if (!layers.insert(m.experts.back().layer).second) fail(what, ": layer ", m.experts.back().layer, " listed twice");
    if (!files.insert(m.experts.back().file).second) fail(what, ": file '", m.experts.back().file, "' used twice");
  }
  return m;
}

std::string pack_manifest_to_json(const PackManifest& m) {
  json j;
  j["format"] = kPackFormatName;
  j["version"] = m.version;
  j["architecture"] = m.architecture;
  j["source_layout"] = m.source_layout;
  j["checksum"] = checksum_name(m.checksum);
  j["config"] = m.config;
  json dense = json::array();
  for (const auto& t : m.dense) dense.push_back(tensor_json(t, true));
  j["dense"] = {{"file", m.dense_file}, {"size", m.dense_size}, {"tensors", std::move(dense)}};
  json ex = json::array();
  for (const auto& l : m.experts) {
    json lays = json::array();
    for (const auto& lay : l.layouts) {
      json a = json::array();
      for (const auto& t : lay) a.push_back(tensor_json(t, false));
      lays.push_back(std::move(a));
    }
    json recs = json::array();
    for (const auto& r : l.records) recs.push_back({r.offset, r.size, r.bits, r.crc32, r.layout});
    ex.push_back({{"layer", l.layer}, {"prefix", l.prefix}, {"file", l.file}, {"size", l.size},
                  {"layouts", std::move(lays)}, {"records", std::move(recs)}});
  }
  j["experts"] = std::move(ex);
  return j.dump(1);
}

}  // namespace moeflux
