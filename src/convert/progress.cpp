// Progress bar / progress lines (see progress.h).
#include "convert/progress.h"

#include <unistd.h>

#include <cstdio>

namespace moeflux {

Progress::Progress(std::string label, uint64_t total, bool quiet)
    : label_(std::move(label)), total_(total), tty_(::isatty(2) != 0), quiet_(quiet) {
  start_ = last_ = std::chrono::steady_clock::now();
}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::add(uint64_t bytes) {
  done_ += bytes;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  const int decile = total_ ? int(done_ * 10 / total_) : 10;
  // Short jobs print only the final line.
  if (seconds() < 1.0) return;
  if ((tty_ && since >= 0.2) || (!tty_ && (decile != last_decile_ || since >= 10.0))) {
    last_ = now;
    last_decile_ = decile;
    draw(false);
  }
}

void Progress::finish() { draw(true); }

void Progress::draw(bool final) {
  if (quiet_) return;
  const double s = seconds(), rate = s > 0 ? double(done_) / s : 0;
  const double frac = total_ ? double(done_) / double(total_) : 1.0;
  const double eta = rate > 0 ? double(total_ - std::min(done_, total_)) / rate : 0;
  char line[256];
  if (tty_ && !final) {
    char bar[31];
    const int fill = int(frac * 30);
    for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    std::snprintf(line, sizeof line, "\r%s [%s] %.2f / %.2f GB  %.0f MB/s  ETA %d:%02d ", label_.c_str(), bar,
                  double(done_) / 1e9, double(total_) / 1e9, rate / 1e6, int(eta) / 60, int(eta) % 60);
    std::fputs(line, stderr);
  } else {
    std::snprintf(line, sizeof line, "%s%s %3.0f%%  %.2f / %.2f GB  %.0f MB/s  %s %.1f s\n", tty_ ? "\r" : "",
                  label_.c_str(), frac * 100, double(done_) / 1e9, double(total_) / 1e9, rate / 1e6,
                  final ? "done in" : "elapsed", s);
    std::fputs(line, stderr);
  }
  std::fflush(stderr);
}

}  // namespace moeflux
