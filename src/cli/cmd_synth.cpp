// `moeflux synth`: a random-weight model at a real model's dimensions, written streaming as a
// Hugging Face checkpoint (sharded safetensors + index) or directly as a pack.
#include <cstdio>

#include "cli/commands.h"
#include "convert/synth.h"
#include "core/error.h"

namespace moeflux::cli {

namespace {
struct SynthArgs {
  SynthOptions o;
  std::string format = "hf", bits, expert_bits, out;
  int group = 64;
  double shard_gb = 2.0;
  bool force = false, quiet = false;
};
}  // namespace

Runner register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* sub = app.add_subcommand("synth", "Write a random-weight model at a real model's dimensions");
  std::string presets;
  for (const auto& p : synth_presets()) presets += (presets.empty() ? "" : "|") + p;
  sub->add_option("--preset", a->o.preset, presets)->required();
  sub->add_option("--layers", a->o.layers, "Override num_hidden_layers")->check(CLI::Range(1, 1000));
  sub->add_option("--experts", a->o.experts, "Override the routed experts per layer")->check(CLI::Range(1, 4096));
  sub->add_option("--vocab", a->o.vocab, "Override vocab_size")->check(CLI::Range(1, 1 << 22));
  sub->add_option("--seed", a->o.seed, "Random seed")->default_val(0);
  sub->add_option("--routing-skew", a->o.routing_skew,
                  "Expert popularity: 0 nearly uniform (random weights), A > 0 Zipf-like, the expert of rank r "
                  "chosen ~ (r + 1)^-A (per layer; measure with --save-profile)")
      ->check(CLI::Range(0.0, 8.0))
      ->default_val(0.0);
  sub->add_option("--format", a->format, "hf (bf16 safetensors) or pack")->check(CLI::IsMember({"hf", "pack"}));
  sub->add_option("--bits", a->bits, "Pack only: as `convert --bits` (default 4)");
  sub->add_option("--expert-bits", a->expert_bits, "Pack only: as `convert --expert-bits`");
  sub->add_option("--group-size", a->group, "Pack only: affine group size")->default_val(64);
  sub->add_option("--shard-gb", a->shard_gb, "hf only: GB per safetensors shard")->default_val(2.0);
  sub->add_option("--out", a->out, "Output directory")->required();
  sub->add_flag("--force", a->force, "Pack only: replace --out if it exists");
  sub->add_flag("--quiet", a->quiet, "No progress output");
  return [a]() {
    if (a->format == "hf") {
      if (!a->bits.empty() || !a->expert_bits.empty()) fail("synth: --bits applies to --format pack only");
      a->o.shard_bytes = uint64_t(std::max(a->shard_gb, 0.001) * 1e9);
      const uint64_t n = write_synth_hf(a->o, a->out, a->quiet);
      std::printf("synth %s -> %s: %.3f GB of bf16 safetensors\n", a->o.preset.c_str(), a->out.c_str(), double(n) / 1e9);
      return 0;
    }
    ConvertOptions c;
    c.bits.group_size = a->group;
    if (!a->bits.empty()) c.bits = parse_target(a->bits, a->group, "--bits");
    if (!a->expert_bits.empty()) c.expert_bits = parse_target(a->expert_bits, a->group, "--expert-bits"), c.expert_bits_set = true;
    c.force = a->force;
    c.quiet = a->quiet;
    auto src = synth_source(a->o);
    const ConvertStats s = convert_to_pack(*src, a->out, c);
    std::printf("synth %s -> %s (pack): dense %.3f GB, experts %.3f GB (%zu records) in %.1f s\n", a->o.preset.c_str(),
                a->out.c_str(), double(s.dense_bytes) / 1e9, double(s.expert_bytes) / 1e9, s.n_records, s.seconds);
    return 0;
  };
}

}  // namespace moeflux::cli
