// Turning expert streaming on for a model loaded from a pack: an ExpertCache over the pack's
// expert files, attached to every MoE block (with the next MoE block as prefetch target).
// Also the budget syntax of --expert-cache and the optional mlock of the dense weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "stream/expert_cache.h"

namespace moeflux {

struct StreamOptions {
  bool enabled = true;             // false: experts are read through the memory map (--io mmap)
  std::string budget = "auto";     // --expert-cache: bytes ("8G", "512M", "1234"), "30%" of all
                                   // expert bytes, or "auto": when all experts fit in half the
                                   // RAM and nothing below asks for the cache, no cache (the
                                   // pack's own bytes: resident, or the memory map);
                                   // otherwise a cache of min(all experts, half the RAM)
  ExpertCacheOptions cache;        // budget_bytes is set from `budget`
  std::string pin_profile;         // routing profile (JSON) whose most used experts are pinned
  double pin_share = 0.5;          // share of the budget the pinned experts may take
  bool mlock_dense = false;        // --mlock: lock the dense weights in RAM
  bool need_cache = false;         // e.g. --save-profile: use the cache even where auto would not
  bool resident = true;            // where auto needs no cache and the whole pack fits in half
                                   // the RAM, copy it into memory (MapMode::Resident) instead of
                                   // mapping it; false: --mmap
};

// Parses a budget: "auto", N, N[KMGT] (powers of 1024; "iB"/"B" suffixes allowed) or P%
// of `total` (the pack's expert bytes). Error naming the text when malformed.
uint64_t parse_cache_budget(const std::string& spec, uint64_t total);

// Checks a budget against the pack it is for and the machine: Error when it is below the
// largest expert record (max_record bytes: the cache could hold no expert) or above the
// physical RAM; a warning (the returned text, else empty) when above the memory available
// now. "auto" passes. total: the pack's expert bytes (for P%).
std::string check_cache_budget(const std::string& spec, uint64_t total, uint64_t max_record, uint64_t physical_ram,
                               uint64_t available_ram);
// check_cache_budget for the pack at `dir` on this machine, the warning printed to stderr.
// Nothing for checkpoints, "auto" or --io mmap (!opt.enabled).
void check_pack_cache_budget(const std::string& dir, const StreamOptions& opt);

// Attaches streaming to a model whose store is a pack (does nothing for checkpoints, or when
// !opt.enabled). Sets m.expert_source to an ExpertCache whose records go through the model's
// backend's record transform. Error when the pack's expert layers do not match the model's
// MoE blocks.
void attach_expert_streaming(Model& m, const StreamOptions& opt);

// The model's expert cache, or null when its experts are not streamed.
ExpertCache* expert_cache(const Model& m);

// How load_model(dir, opt) opens a pack: Resident when opt allows it, `auto` needs no expert
// cache and dense.bin plus every expert file fit in half the RAM and in 90% of MemAvailable;
// else Map.
MapMode pack_map_mode(const std::string& dir, const StreamOptions& opt);

// load_model for `backend` (pack_map_mode; a resident copy's expert records checked when
// opt.cache.verify) + attach_expert_streaming + --mlock.
std::unique_ptr<Model> load_model(const std::string& dir, const StreamOptions& opt,
                                  std::shared_ptr<Backend> backend = nullptr);

}  // namespace moeflux
