// Progress of a long byte-counted job on stderr: a redrawn bar with bytes, MB/s and ETA on a
// terminal; plain lines (every 10% or 10 s) otherwise, so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace moeflux {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool quiet = false);
  void add(uint64_t bytes);
  void finish();  // final line with totals and the mean rate
  double seconds() const;

 private:
  void draw(bool final);
  std::string label_;
  uint64_t total_, done_ = 0;
  bool tty_, quiet_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace moeflux
