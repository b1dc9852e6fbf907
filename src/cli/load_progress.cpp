// LoadProgress: a thread that wakes every every_s seconds once after_s have passed.
#include "cli/load_progress.h"

#include <unistd.h>

#include <fstream>

namespace moeflux::cli {

namespace {
double resident_gib() {
  std::ifstream f("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / double(1ull << 30);
}
}  // namespace

LoadProgress::LoadProgress(std::FILE* out, std::string what, double after_s, double every_s)
    : out_(out), what_(std::move(what)), after_s_(after_s), every_s_(every_s), start_(std::chrono::steady_clock::now()) {
  if (out_) thread_ = std::thread([this] { loop(); });
}

void LoadProgress::loop() {
  using namespace std::chrono;
  std::unique_lock lock(mu_);
  auto next = start_ + duration_cast<steady_clock::duration>(duration<double>(after_s_));
  while (!cv_.wait_until(lock, next, [this] { return done_; })) {
    const double s = duration<double>(steady_clock::now() - start_).count();
    std::fprintf(out_, "\r\x1b[Kloading %s: %.1f s, %.2f GiB in memory", what_.c_str(), s, resident_gib());
    std::fflush(out_);
    shown_ = true;
    next += duration_cast<steady_clock::duration>(duration<double>(every_s_));
  }
}

double LoadProgress::stop(bool loaded) {
  {
    std::lock_guard lock(mu_);
    if (done_) return elapsed_s_;
    done_ = true;
    elapsed_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (shown_) {
    if (loaded) std::fprintf(out_, "\r\x1b[Kloaded %s in %.1f s\n", what_.c_str(), elapsed_s_);
    else std::fprintf(out_, "\n");
    std::fflush(out_);
  }
  return elapsed_s_;
}

}  // namespace moeflux::cli
