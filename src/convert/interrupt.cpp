// Signal flag for interruptible writers (see interrupt.h).
#include "convert/interrupt.h"

#include <csignal>
#include <cstring>

namespace moeflux {

namespace {
volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) { g_signal = sig; }
}  // namespace

Interrupted::Interrupted(int sig)
    : Error(cat("interrupted by ", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal")), sig_(sig) {}

InterruptGuard::InterruptGuard() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

void throw_if_interrupted() {
  if (const int sig = g_signal) throw Interrupted(sig);
}

}  // namespace moeflux
