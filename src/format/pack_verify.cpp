// Pack verification and summary (see pack_verify.h).
#include "format/pack_verify.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.h"

namespace moeflux {

namespace {
std::string quant_name(const PackTensor& t) {
  if (!t.quant) return std::string(dtype_name(t.dtype));
  if (t.quant->format == PackQuant::Format::Fp8) return "fp8";
  return "q" + std::to_string(t.quant->bits) + " g" + std::to_string(t.quant->group_size);
}

bool is_weight(const std::string& n) { return n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0; }
}  // namespace

std::string PackProblem::message() const {
  char crc[64];
  std::snprintf(crc, sizeof crc, "stored %s %08x, computed %08x", checksum_name(checksum), stored, computed);
  return cat(what, ": checksum mismatch in ", file, " at byte offset ", offset, " (", nbytes, " bytes; ", crc, ")");
}

std::vector<PackPart> dense_parts(const PackStore& pack) {
  const PackManifest& m = pack.manifest();
  std::vector<PackPart> parts;
  parts.reserve(m.dense.size());
  for (const auto& t : m.dense)
    parts.push_back({&pack.dense_map(), pack.dense_map().data() + t.offset,
                     {"dense tensor '" + t.name + "'", m.dense_file, t.offset, t.nbytes, t.crc32, 0, m.checksum}});
  return parts;
}

std::vector<PackPart> record_parts(const PackStore& pack) {
  const PackManifest& m = pack.manifest();
  std::vector<PackPart> parts;
  for (size_t li = 0; li < m.experts.size(); ++li) {
    const ExpertLayer& l = m.experts[li];
    for (size_t e = 0; e < l.records.size(); ++e) {
      const PackRecord& r = l.records[e];
      parts.push_back({&pack.layer_map(li), pack.layer_map(li).data() + r.offset,
                       {cat("layer ", l.layer, " expert ", e), l.file, r.offset, r.size, r.crc32, 0, m.checksum}});
    }
  }
  return parts;
}

std::vector<PackProblem> verify_pack(const PackStore& pack, const std::function<void(uint64_t)>& on_bytes) {
  std::vector<PackProblem> out;
  for (auto* list : {&dense_parts, &record_parts})
    for (PackPart& p : list(pack)) {
      const uint64_t n = p.where.nbytes;
      p.where.computed = checksum_of(p.where.checksum, p.data, n);
      p.map->drop_pages(p.data, n);
      if (p.where.computed != p.where.stored) out.push_back(std::move(p.where));
      if (on_bytes) on_bytes(n);
    }
  return out;
}

PackSummary summarize_pack(const PackStore& pack) {
  const PackManifest& m = pack.manifest();
  const ModelConfig cfg = pack.model_config();
  PackSummary s;
  std::map<std::string, uint64_t> q;
  for (const auto& t : m.dense) {
    s.dense_bytes += t.nbytes;
    if (t.name.rfind("model.embed_tokens.", 0) == 0) {
      s.embed_bytes += t.nbytes;
      if (!t.shape.empty() && t.shape[0] > 0) s.embed_row_bytes += t.nbytes / uint64_t(t.shape[0]);
    }
    if (is_weight(t.name) && t.shape.size() == 2) ++q[quant_name(t)];
  }
  for (const auto& l : m.experts) {
    ++s.moe_layers;
    for (const auto& r : l.records) {
      s.expert_bytes += r.size;
      s.record_min = s.n_records ? std::min(s.record_min, r.size) : r.size;
      s.record_max = std::max(s.record_max, r.size);
      ++s.n_records;
      for (const auto& t : l.layouts[r.layout])
        if (is_weight(t.name)) ++q[quant_name(t)];
    }
  }
  for (const auto& [k, v] : q) s.quant_counts.push_back({k, v});
  s.n_experts_active = cfg.reader().get_int("num_experts_per_tok", 0);
  const uint64_t mean_record = s.n_records ? s.expert_bytes / s.n_records : 0;
  bool has_head = false;
  for (const auto& t : m.dense) has_head = has_head || t.name.rfind("lm_head.", 0) == 0;
  // A tied embedding is read whole as the output head; otherwise one row per token.
  const uint64_t embed_touched = has_head ? s.embed_row_bytes : s.embed_bytes;
  s.bytes_per_token = s.dense_bytes - s.embed_bytes + embed_touched +
                      uint64_t(s.n_experts_active) * mean_record * uint64_t(s.moe_layers);
  return s;
}

}  // namespace moeflux
