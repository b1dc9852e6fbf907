// The registry of tuning switches: filled during static initialisation, read afterwards.
#include "backend/cpu/tuning_switch.h"

#include <algorithm>
#include <cstdlib>

namespace moeflux {

namespace {
std::vector<TuningSwitch*>& registry() {
  static std::vector<TuningSwitch*> all;  // constructed on first use, whatever the order of initialisation
  return all;
}
}  // namespace

bool env_on_off(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  const std::string v = e ? e : "";
  return v == "0" ? false : v == "1" ? true : fallback;
}

TuningSwitch::TuningSwitch(const char* env_name, bool default_on) : name_(env_name) {
  on_.store(env_on_off(env_name, default_on), std::memory_order_relaxed);
  registry().push_back(this);
}

TuningSwitch* TuningSwitch::find(const std::string& name) {
  for (TuningSwitch* s : registry())
    if (name == s->name_) return s;
  return nullptr;
}

std::vector<std::string> TuningSwitch::names() {
  std::vector<std::string> out;
  for (const TuningSwitch* s : registry()) out.emplace_back(s->name_);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace moeflux
