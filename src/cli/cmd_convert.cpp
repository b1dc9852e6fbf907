// `moeflux convert SRC DST`: a Hugging Face or MLX checkpoint -> an expert-streaming pack.
#include <cstdio>

#include "cli/commands.h"
#include "convert/convert.h"
#include "convert/interrupt.h"
#include "core/error.h"

namespace moeflux::cli {

namespace {
struct ConvertArgs {
  std::string src, dst, bits, expert_bits;
  int group = 64;
  bool force = false, quiet = false;
};
}  // namespace

Runner register_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  auto* sub = app.add_subcommand("convert", "Convert a Hugging Face or MLX checkpoint into a pack");
  sub->add_option("src", a->src, "Checkpoint directory (config.json + safetensors)")->required();
  sub->add_option("dst", a->dst, "Pack directory to create")->required();
  sub->add_option("--bits", a->bits,
                  "Linears: 2, 3, 4, 5, 6, 8 (affine), 16 (bf16) or fp8. Default: quantised sources keep "
                  "their format, float sources become 4-bit");
  sub->add_option("--expert-bits", a->expert_bits, "Routed experts (default: as --bits)");
  sub->add_option("--group-size", a->group, "Affine group size: 32, 64 or 128")->default_val(64);
  sub->add_flag("--force", a->force, "Replace DST if it is a pack (never anything else)");
  sub->add_flag("--quiet", a->quiet, "No progress output");
  return [a]() {
    ConvertOptions o;
    o.bits.group_size = a->group;
    if (!a->bits.empty()) o.bits = parse_target(a->bits, a->group, "--bits");
    else parse_target("4", a->group, "--group-size");  // validates the group size
    if (!a->expert_bits.empty()) {
      o.expert_bits = parse_target(a->expert_bits, a->group, "--expert-bits");
      o.expert_bits_set = true;
    }
    o.force = a->force;
    o.quiet = a->quiet;
    auto src = open_checkpoint_source(a->src);
    ConvertStats s;
    try {
      s = convert_to_pack(*src, a->dst, o);
    } catch (const Interrupted& e) {
      std::fprintf(stderr, "moeflux: convert %s: temporary files removed, %s not written\n", e.what(),
                   a->dst.c_str());
      return 128 + e.signal();
    }
    std::printf("converted %s -> %s: %.3f GB source in %.1f s (%.0f MB/s); dense %.3f GB (%zu tensors), "
                "experts %.3f GB (%zu records)\n",
                a->src.c_str(), a->dst.c_str(), double(s.source_bytes) / 1e9, s.seconds,
                s.seconds > 0 ? double(s.source_bytes) / s.seconds / 1e6 : 0.0, double(s.dense_bytes) / 1e9,
                s.n_dense, double(s.expert_bytes) / 1e9, s.n_records);
    return 0;
  };
}

}  // namespace moeflux::cli
