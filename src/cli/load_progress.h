// A load indicator for the terminal: after `after_s` seconds of loading it rewrites one
// stderr line with the time so far and the process's resident memory, until finish().
// Loads that end sooner print nothing.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace moeflux::cli {

class LoadProgress {
 public:
  // out == nullptr: no output (not a terminal). every_s: the update interval.
  LoadProgress(std::FILE* out, std::string what, double after_s = 1.0, double every_s = 0.25);
  ~LoadProgress() { stop(false); }  // a load that threw: the line is ended, not "loaded"
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

  // Stops the updates and, when the line was shown, ends it with the load time; returns the
  // seconds since construction.
  double finish() { return stop(true); }

 private:
  void loop();
  double stop(bool loaded);

  std::FILE* out_;
  std::string what_;
  double after_s_, every_s_, elapsed_s_ = -1;
  bool shown_ = false, done_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace moeflux::cli
