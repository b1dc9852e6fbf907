// `moeflux inspect PACK` (architecture, dimensions, quantisation, sizes, bytes read per token)
// and `moeflux verify PACK` (completeness: every tensor and expert record the architecture
// reads, with the shapes config.json implies; then every checksum; exit 1 naming the first bad
// place).
#include <cstdio>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "convert/progress.h"
#include "convert/side_files.h"
#include "core/error.h"
#include "format/pack_verify.h"
#include "model/check_weights.h"

namespace moeflux::cli {

namespace {
std::string human(uint64_t b) {
  char s[32];
  if (b >= (1ull << 30)) std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(s, sizeof s, "%.2f MiB", double(b) / double(1ull << 20));
  else std::snprintf(s, sizeof s, "%.1f KiB", double(b) / 1024.0);
  return s;
}
}  // namespace

Runner register_inspect(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("inspect", "Describe a pack: architecture, quantisation, sizes");
  sub->add_option("pack", *dir, "Pack directory")->required();
  return [dir]() {
    check_pack_path(*dir);
    auto pack = PackStore::open(*dir);
    const PackManifest& m = pack->manifest();
    const ModelConfig c = pack->model_config();
    const PackSummary s = summarize_pack(*pack);
    std::printf("pack:          %s (format %s v%d, source layout %s)\n", dir->c_str(), kPackFormatName, m.version,
                m.source_layout.c_str());
    std::printf("architecture:  %s\n", c.arch.c_str());
    std::printf("dimensions:    dim %lld, layers %lld, heads %lld (kv %lld, head_dim %lld), vocab %lld\n",
                (long long)c.dim, (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads,
                (long long)c.head_dim, (long long)c.vocab_size);
    const size_t n_exp = m.experts.empty() ? 0 : m.experts.front().records.size();
    std::printf("experts:       %zu per MoE layer, %lld active, %lld MoE layers\n", n_exp,
                (long long)s.n_experts_active, (long long)s.moe_layers);
    std::printf("quantisation:");
    for (const auto& [k, v] : s.quant_counts) std::printf(" %s x %llu;", k.c_str(), (unsigned long long)v);
    std::printf("\n");
    std::printf("dense:         %s in %zu tensors (%s)\n", human(s.dense_bytes).c_str(), m.dense.size(),
                m.dense_file.c_str());
    std::printf("experts:       %s in %llu records\n", human(s.expert_bytes).c_str(),
                (unsigned long long)s.n_records);
    if (s.n_records)
      std::printf("expert record: %llu bytes (%s)%s\n", (unsigned long long)s.record_max, human(s.record_max).c_str(),
                  s.record_min != s.record_max ? cat(", smallest ", s.record_min, " bytes").c_str() : "");
    std::printf("read/token:    %s (dense touched %s + %lld x record x %lld MoE layers)\n",
                human(s.bytes_per_token).c_str(),
                human(s.bytes_per_token - uint64_t(s.n_experts_active) * (s.n_records ? s.expert_bytes / s.n_records : 0) *
                                              uint64_t(s.moe_layers)).c_str(),
                (long long)s.n_experts_active, (long long)s.moe_layers);
    return 0;
  };
}

Runner register_verify(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("verify", "Check a pack is complete and recompute every checksum");
  sub->add_option("pack", *dir, "Pack directory")->required();
  sub->add_flag("--quiet", *quiet, "No progress output");
  return [dir, quiet]() {
    check_pack_path(*dir);
    auto pack = PackStore::open(*dir);
    std::string incomplete;
    try {
      check_model_weights(*pack, pack->model_config());
    } catch (const Error& e) {
      incomplete = e.what();
    }
    const PackSummary s = summarize_pack(*pack);
    Progress progress("verify", s.dense_bytes + s.expert_bytes, *quiet);
    const auto problems = verify_pack(*pack, [&](uint64_t n) { progress.add(n); });
    progress.finish();
    if (!incomplete.empty()) {
      std::fprintf(stderr, "moeflux: error: %s: incomplete pack: %s\n", dir->c_str(), incomplete.c_str());
      if (problems.empty()) std::fprintf(stderr, "(checksums of what it holds match)\n");
    }
    if (!has_tokenizer(*dir))
      std::fprintf(stderr, "note: %s has no tokenizer.json: run it with --tokenizer DIR\n", dir->c_str());
    if (problems.empty() && incomplete.empty()) {
      std::printf("%s: OK (%zu dense tensors, %llu expert records)\n", dir->c_str(), pack->manifest().dense.size(),
                  (unsigned long long)s.n_records);
      return 0;
    }
    if (problems.empty()) return 1;
    std::fprintf(stderr, "moeflux: error: %s: first bad: %s\n", dir->c_str(), problems.front().message().c_str());
    for (size_t i = 1; i < problems.size() && i < 10; ++i)
      std::fprintf(stderr, "  also: %s\n", problems[i].message().c_str());
    std::fprintf(stderr, "%zu checksum mismatches\n", problems.size());
    return 1;
  };
}

}  // namespace moeflux::cli
