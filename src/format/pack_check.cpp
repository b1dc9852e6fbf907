// Load-time checksum checks over a pack's bytes (see pack_check.h).
#include "format/pack_check.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "format/pack_verify.h"

namespace moeflux {

namespace {

// Checks every part on up to 8 threads; raises the mismatch of the lowest index, if any.
void check_parts(const PackStore& pack, std::vector<PackPart> parts, const char* what) {
  const PackChecksum kind = pack.manifest().checksum;
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t bad = parts.size();
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parts.size();) {
      PackPart& p = parts[i];
      const uint32_t got = checksum_of(kind, p.data, p.where.nbytes);
      if (got == p.where.stored) continue;
      std::lock_guard lock(mu);
      p.where.computed = got;
      bad = std::min(bad, i);
    }
  };
  const size_t n_threads =
      std::min<size_t>({parts.size(), 8, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer threads: those running take the rest
    }
  }
  work();
  for (auto& t : threads) t.join();
  if (bad < parts.size())
    fail(pack.dir(), ": ", what, " damaged: ", parts[bad].where.message(),
         "; `moeflux verify` lists every damaged part");
}

}  // namespace

void check_dense_tensors(const PackStore& pack) { check_parts(pack, dense_parts(pack), "dense weights"); }

void check_expert_records(const PackStore& pack) { check_parts(pack, record_parts(pack), "expert record"); }

}  // namespace moeflux
