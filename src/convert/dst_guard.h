// Where convert may write: it never deletes or overwrites anything but a pack. DST may not be
// SRC, lie inside it or contain it (canonical paths and device/inode, symlinks resolved), nor
// be a symlink; an existing DST is replaced only with --force and only when it is a pack
// (manifest.json that parses) holding nothing but pack and side files; an empty directory is
// taken as it is. Leftover DST.tmp-XXXXXX / DST.old-XXXXXX directories of an interrupted run
// are reported, never removed (a convert may still be running).
#pragma once
#include <string>
#include <vector>

namespace moeflux {

// What an existing DST is, decided before anything is written.
enum class DstState { Absent, EmptyDir, Pack };

// Error naming DST and the reason when convert must not write there. `src_dir` is empty for
// sources without a directory (synth).
DstState check_destination(const std::string& src_dir, const std::string& dst, bool force);

// Error unless `dst` is (still) a replaceable pack: a directory whose manifest.json parses
// and whose entries are all pack files.
void check_replaceable_pack(const std::string& dst);

// Directories `{dst}.tmp-XXXXXX` beside DST (temporary directories of interrupted runs).
std::vector<std::string> stale_temp_dirs(const std::string& dst);

}  // namespace moeflux
