// Routing profiles: how often each expert of each MoE layer was used, saved as JSON
// (`--save-profile`) and read back to pin the most used experts (`--pin-profile`).
//   {"format": "moeflux-routing-profile", "version": 1,
//    "layers": [{"prefix": "model.layers.0.mlp", "counts": [12, 0, 7, ...]}, ...]}
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/pack_manifest.h"

namespace moeflux {

struct RoutingProfile {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> layers;  // prefix, count per expert
};

// counts[i] belongs to layers[i] (the pack's expert layers).
std::string routing_profile_to_json(const std::vector<ExpertLayer>& layers,
                                    const std::vector<std::vector<uint64_t>>& counts);
void save_routing_profile(const std::string& path, const std::vector<ExpertLayer>& layers,
                          const std::vector<std::vector<uint64_t>>& counts);
// Error naming the file and field when malformed.
RoutingProfile parse_routing_profile(const std::string& text, const std::string& what);
RoutingProfile load_routing_profile(const std::string& path);

// (expert layer index, expert) pairs with a non-zero count, most used first. Error when the
// profile names a layer the pack lacks or has a different expert count.
std::vector<std::pair<int, int>> most_used_experts(const RoutingProfile& p, const PackManifest& m);

}  // namespace moeflux
