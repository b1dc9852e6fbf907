// Tuning switches: on / off choices between two code paths that give the same results, kept
// so that the faster can be measured again on another machine. Each takes its default unless
// its environment variable is "0" (off) or "1" (on) at start-up. `moeflux bench --alternate NAME` flips one between
// the runs of one process, so that both paths are measured in pairs on a noisy machine.
#pragma once
#include <atomic>
#include <string>
#include <vector>

namespace moeflux {

// A start-up choice from the environment: "0" off, "1" on, anything else (or unset) `fallback`.
bool env_on_off(const char* name, bool fallback);

class TuningSwitch {
 public:
  // Registers the switch under env_name (a string literal) and reads the environment. For
  // objects of static storage duration only.
  explicit TuningSwitch(const char* env_name, bool default_on = true);
  TuningSwitch(const TuningSwitch&) = delete;
  TuningSwitch& operator=(const TuningSwitch&) = delete;

  bool on() const { return on_.load(std::memory_order_relaxed); }
  // Not while ops run: an op may read a switch more than once.
  void set(bool on) { on_.store(on, std::memory_order_relaxed); }
  const char* name() const { return name_; }

  // The switch named `name`, or null.
  static TuningSwitch* find(const std::string& name);
  // Every switch's name, sorted.
  static std::vector<std::string> names();

 private:
  const char* name_;
  std::atomic<bool> on_;
};

}  // namespace moeflux
