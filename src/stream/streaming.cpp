// attach_expert_streaming, budget parsing, resident or mapped packs, the dense-weight mlock.
#include "stream/streaming.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/byte_budget.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "format/pack_manifest.h"
#include "format/pack_store.h"
#include "format/tensor_store.h"
#include "model/blocks/ffn.h"
#include "stream/routing_profile.h"

namespace moeflux {

namespace {
// Bytes of RAM, or 0 where sysconf cannot say.
uint64_t physical_ram() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

std::string gib(uint64_t b) {
  char s[32];
  if (b >= (1ull << 30)) std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(1ull << 30));
  else std::snprintf(s, sizeof s, "%.1f KiB", double(b) / 1024.0);
  return s;
}
}  // namespace

uint64_t parse_cache_budget(const std::string& spec, uint64_t total) {
  const uint64_t ram = physical_ram();
  return parse_byte_budget("--expert-cache", spec, total, std::min(total, ram ? ram / 2 : total));
}

namespace {
// MemAvailable of /proc/meminfo (free memory plus what the kernel can reclaim, the page cache
// included), or UINT64_MAX where it cannot be read.
uint64_t available_ram() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return UINT64_MAX;
}

bool wants_cache(const StreamOptions& opt) {
  return opt.need_cache || opt.cache.io == IoMode::Direct || opt.cache.engine == IoEngine::Uring ||
         !opt.pin_profile.empty();
}
}  // namespace

std::string check_cache_budget(const std::string& spec, uint64_t total, uint64_t max_record, uint64_t physical_ram,
                               uint64_t available_ram) {
  if (spec == "auto") return "";
  const uint64_t b = parse_cache_budget(spec, total);
  if (b < max_record)
    fail("--expert-cache ", spec, " (", b, " bytes) is below one expert record of this pack (", max_record, " bytes, ",
         gib(max_record), "): the cache could hold no expert; give at least ", (max_record + 1023) / 1024, "K");
  if (physical_ram && b > physical_ram)
    fail("--expert-cache ", spec, " (", gib(b), ") is more than this machine's memory (", gib(physical_ram), ")");
  if (b > available_ram)
    return cat("warning: --expert-cache ", spec, " (", gib(b), ") is more than the memory available now (",
               gib(available_ram), "): the cache may push other processes into swap");
  return "";
}

void check_pack_cache_budget(const std::string& dir, const StreamOptions& opt) {
  if (opt.budget == "auto" || !opt.enabled || !is_pack_dir(dir)) return;
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  const PackManifest man = parse_pack_manifest(read_text_file(path), path);
  uint64_t total = 0, max_record = 0;
  for (const auto& l : man.experts)
    for (const auto& r : l.records) total += r.size, max_record = std::max<uint64_t>(max_record, r.size);
  if (man.experts.empty()) return;
  const std::string warning = check_cache_budget(opt.budget, total, max_record, physical_ram(), available_ram());
  if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
}

MapMode pack_map_mode(const std::string& dir, const StreamOptions& opt) {
  if (!opt.resident || !opt.enabled || opt.budget != "auto" || wants_cache(opt) || !is_pack_dir(dir))
    return MapMode::Map;
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  const PackManifest man = parse_pack_manifest(read_text_file(path), path);
  uint64_t total = man.dense_size;
  for (const auto& l : man.experts) total += l.size;
  // The copy must also leave room: a pack that fits in half the RAM but not in what is
  // available now (other processes) stays mapped, where the kernel can page it.
  const bool fits = parse_cache_budget("auto", total) >= total && total <= available_ram() / 10 * 9;
  return fits ? MapMode::Resident : MapMode::Map;
}

void attach_expert_streaming(Model& m, const StreamOptions& opt) {
  auto* pack = dynamic_cast<PackStore*>(m.store.get());
  if (!pack || !opt.enabled) return;
  const PackManifest& man = pack->manifest();
  if (man.experts.empty()) return;
  std::map<std::string, int> by_prefix;
  uint64_t total = 0;
  for (size_t i = 0; i < man.experts.size(); ++i) {
    by_prefix[man.experts[i].prefix] = int(i);
    for (const auto& r : man.experts[i].records) total += r.size;
  }
  if (opt.budget == "auto" && !wants_cache(opt) && parse_cache_budget("auto", total) >= total) return;
  ExpertCacheOptions co = opt.cache;
  co.budget_bytes = parse_cache_budget(opt.budget, total);
  co.checksum = man.checksum;
  auto cache_ptr = std::make_shared<ExpertCache>(pack->dir(), man.experts, co);
  m.expert_source = cache_ptr;
  ExpertCache& cache = *cache_ptr;
  // The backend's rewrite of each record as it is read (on the reader's thread), by expert layer.
  std::vector<RecordTransform> by_layer(man.experts.size());
  bool rewrite = false;
  MoeFfn* prev = nullptr;
  for (auto& layer : m.layers) {
    auto* f = dynamic_cast<MoeFfn*>(layer.ffn.get());
    if (!f) continue;
    auto it = by_prefix.find(f->prefix);
    if (it == by_prefix.end()) fail(pack->dir(), ": the pack has no expert records for '", f->prefix, "'");
    const ExpertLayer& el = man.experts[size_t(it->second)];
    if (int64_t(el.records.size()) != f->n_experts)
      fail(pack->dir(), ": ", el.file, " holds ", el.records.size(), " experts, the model has ", f->n_experts);
    f->source = &cache;
    f->source_layer = it->second;
    RecordTransform t = m.backend->expert_record_transform(f->spec(), co.budget_bytes >= total);
    f->prepared_records = bool(t);
    rewrite = rewrite || f->prepared_records;
    by_layer[size_t(it->second)] = std::move(t);
    f->record_base.clear();
    const uint8_t* base = pack->layer_map(size_t(it->second)).data();
    for (const auto& r : el.records) f->record_base.push_back(base + r.offset);
    if (prev) prev->next = f;
    prev = f;
  }
  if (rewrite)
    cache.set_record_transform([by_layer](int l, int e, uint8_t* data) {
      if (by_layer[size_t(l)]) by_layer[size_t(l)](e, data);
    });
  if (!opt.pin_profile.empty()) {
    const RoutingProfile prof = load_routing_profile(opt.pin_profile);
    cache.pin_permanently(most_used_experts(prof, man), uint64_t(double(co.budget_bytes) * opt.pin_share));
  }
}

ExpertCache* expert_cache(const Model& m) { return dynamic_cast<ExpertCache*>(m.expert_source.get()); }

std::unique_ptr<Model> load_model(const std::string& dir, const StreamOptions& opt, std::shared_ptr<Backend> backend) {
  auto m = load_model(dir, pack_map_mode(dir, opt), std::move(backend), opt.cache.verify);
  attach_expert_streaming(*m, opt);
  if (opt.mlock_dense) {
    auto* pack = dynamic_cast<PackStore*>(m->store.get());
    if (!pack) {
      std::fprintf(stderr, "warning: --mlock applies to packs only; ignored\n");
    } else if (::mlock(pack->dense_map().data(), pack->dense_map().size()) != 0) {
      std::fprintf(stderr, "warning: --mlock of %zu bytes failed (%s); check ulimit -l\n",
                   pack->dense_map().size(), std::strerror(errno));
    }
  }
  return m;
}

}  // namespace moeflux
