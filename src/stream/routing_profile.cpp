// Routing profile JSON: writing, validated reading, ranking.
#include "stream/routing_profile.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"

namespace moeflux {

namespace {
constexpr const char* kFormat = "moeflux-routing-profile";
}

std::string routing_profile_to_json(const std::vector<ExpertLayer>& layers,
                                    const std::vector<std::vector<uint64_t>>& counts) {
  MF_ASSERT(layers.size() == counts.size());
  nlohmann::json j = {{"format", kFormat}, {"version", 1}, {"layers", nlohmann::json::array()}};
  for (size_t i = 0; i < layers.size(); ++i)
    j["layers"].push_back({{"prefix", layers[i].prefix}, {"counts", counts[i]}});
  return j.dump(1) + "\n";
}

void save_routing_profile(const std::string& path, const std::vector<ExpertLayer>& layers,
                          const std::vector<std::vector<uint64_t>>& counts) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail(path, ": cannot write the routing profile");
    f << routing_profile_to_json(layers, counts);
    if (!f.flush()) fail(path, ": cannot write the routing profile");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, ": cannot write the routing profile");
}

RoutingProfile parse_routing_profile(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(what, ": invalid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() || j["format"] != kFormat)
    fail(what, ": not a routing profile (\"format\" must be \"", kFormat, "\")");
  if (!j.contains("version") || j["version"] != 1) fail(what, ": unsupported routing profile version");
  if (!j.contains("layers") || !j["layers"].is_array()) fail(what, ": \"layers\" must be an array");
  RoutingProfile p;
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const auto& l = j["layers"][i];
    const std::string where = what + ": layers[" + std::to_string(i) + "]";
    if (!l.is_object() || !l.contains("prefix") || !l["prefix"].is_string())
      fail(where, ": needs a string \"prefix\"");
    if (!l.contains("counts") || !l["counts"].is_array()) fail(where, ": needs an array \"counts\"");
    std::vector<uint64_t> c;
    for (const auto& v : l["counts"]) {
      if (!v.is_number_unsigned()) fail(where, ": counts must be non-negative integers");
      c.push_back(v.get<uint64_t>());
    }
    p.layers.emplace_back(l["prefix"].get<std::string>(), std::move(c));
  }
  return p;
}

RoutingProfile load_routing_profile(const std::string& path) {
  return parse_routing_profile(read_text_file(path), path);
}

std::vector<std::pair<int, int>> most_used_experts(const RoutingProfile& p, const PackManifest& m) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < m.experts.size(); ++i) index[m.experts[i].prefix] = int(i);
  std::vector<std::tuple<uint64_t, int, int>> all;
  for (const auto& [prefix, counts] : p.layers) {
    auto it = index.find(prefix);
    if (it == index.end()) fail("routing profile: the pack has no MoE layer '", prefix, "'");
    const size_t n = m.experts[size_t(it->second)].records.size();
    if (counts.size() != n)
      fail("routing profile: layer '", prefix, "' has ", counts.size(), " counts, the pack ", n, " experts");
    for (size_t e = 0; e < n; ++e)
      if (counts[e] > 0) all.emplace_back(counts[e], it->second, int(e));
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  std::vector<std::pair<int, int>> out;
  for (const auto& [c, l, e] : all) out.emplace_back(l, e);
  return out;
}

}  // namespace moeflux
