// How many CPUs this process may use: facts about the machine, for thread pools.
#pragma once

namespace moeflux {

// Number of physical cores this process may run on (SMT siblings counted once), read at the
// first call; at most available_cpus().
int physical_core_count();

// CPUs this process may run on at once, read at the first call: those in its affinity mask,
// fewer where a cgroup v2 quota (/sys/fs/cgroup/cpu.max) allows less CPU time (rounded up).
int available_cpus();

}  // namespace moeflux
