// SIGINT / SIGTERM during a long write: while an InterruptGuard lives, the signal only sets a
// flag (async-signal-safe); the writer polls it between tensors and unwinds with Interrupted,
// so the usual error path removes the temporary directory. The command exits 128 + signal.
#pragma once
#include "core/error.h"

namespace moeflux {

class Interrupted : public Error {
 public:
  explicit Interrupted(int sig);
  int signal() const { return sig_; }

 private:
  int sig_;
};

class InterruptGuard {
 public:
  InterruptGuard();   // installs the handlers (a signal pending from before is kept)
  ~InterruptGuard();  // restores the previous ones
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// Throws Interrupted when SIGINT or SIGTERM arrived under a guard.
void throw_if_interrupted();

}  // namespace moeflux
