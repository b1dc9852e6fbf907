// Always-on invariant failure: print file:line and abort.
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace moeflux {

void assert_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "moeflux: internal error: %s:%d: MF_ASSERT(%s) failed\n", file, line, expr);
  std::abort();
}

}  // namespace moeflux
