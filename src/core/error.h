// Errors. Untrusted input (files, arguments, JSON) raises moeflux::Error with a message naming
// the file / field / offset; the command line catches it and exits non-zero. Programmer
// invariants use MF_ASSERT, which is always on and aborts with file:line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace moeflux {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<< (g++ 12 has no std::format).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(cat(args...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line);

}  // namespace moeflux

#define MF_ASSERT(cond) \
  ((cond) ? (void)0 : ::moeflux::assert_failed(#cond, __FILE__, __LINE__))
