// Destination checks of convert (see dst_guard.h).
#include "convert/dst_guard.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "convert/side_files.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "format/pack_manifest.h"

namespace moeflux {

namespace fs = std::filesystem;

namespace {

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

bool file_id(const fs::path& p, FileId* id) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return false;
  *id = FileId{st.st_dev, st.st_ino};
  return true;
}

// The nearest existing ancestor of `p` (itself if it exists), canonical.
fs::path existing_canonical(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  while (!a.empty() && !fs::exists(a, ec) && a != a.root_path()) a = a.parent_path();
  return fs::canonical(a, ec);
}

// Whether the directory with id `outer` is `p` or one of its ancestors. Walking up by
// device/inode also catches bind mounts and symlinked aliases that canonical paths miss.
bool lies_within(const fs::path& p, const FileId& outer) {
  for (fs::path a = existing_canonical(p); !a.empty(); a = a.parent_path()) {
    FileId id;
    if (file_id(a, &id) && id == outer) return true;
    if (a == a.root_path()) break;
  }
  return false;
}

bool path_within(const fs::path& inner, const fs::path& outer) {
  return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
}

}  // namespace

void check_replaceable_pack(const std::string& dst) {
  const fs::path mpath = fs::path(dst) / "manifest.json";
  std::error_code ec;
  if (!fs::is_regular_file(mpath, ec))
    fail(dst, ": exists and is not a moeflux pack (no manifest.json); convert replaces only a pack, even with "
         "--force: choose another DST or remove it yourself");
  PackManifest m;
  try {
    m = parse_pack_manifest(read_text_file(mpath.string()), mpath.string());
  } catch (const Error& e) {
    fail(dst, ": exists and is not a moeflux pack (", e.what(), "); convert replaces only a pack, even with "
         "--force: choose another DST or remove it yourself");
  }
  std::set<std::string> ours{"manifest.json", m.dense_file};
  for (const auto& n : pack_side_files()) ours.insert(n);
  std::set<std::string> expert_files;
  for (const auto& l : m.experts) expert_files.insert(fs::path(l.file).lexically_normal().string());
  for (const auto& e : fs::directory_iterator(dst)) {
    const std::string name = e.path().filename().string();
    if (name == "experts" && e.is_directory() && !e.is_symlink()) {
      for (const auto& x : fs::directory_iterator(e.path()))
        if (!expert_files.count("experts/" + x.path().filename().string()))
          fail(dst, ": holds '", x.path().string(), "', which is not part of the pack; convert will not delete it "
               "(move it away or choose another DST)");
      continue;
    }
    if (!ours.count(name) || e.is_directory())
      fail(dst, ": holds '", e.path().string(), "', which is not part of the pack; convert will not delete it "
           "(move it away or choose another DST)");
  }
}

DstState check_destination(const std::string& src_dir, const std::string& dst, bool force) {
  std::error_code ec;
  const fs::path d(dst);
  if (fs::is_symlink(d, ec)) fail(dst, ": is a symbolic link; name the directory itself");
  const bool exists = fs::exists(d, ec);
  if (!src_dir.empty()) {
    const fs::path s = fs::canonical(src_dir, ec);
    FileId sid, did;
    if (ec || !file_id(s, &sid)) fail(src_dir, ": cannot resolve the source directory");
    const fs::path dc = fs::weakly_canonical(fs::absolute(d), ec);
    if (ec || dc.empty()) fail(dst, ": cannot resolve the path: ", ec.message());
    const bool have_did = exists && file_id(d, &did);
    if (dc == s || (have_did && did == sid))
      fail(dst, ": is the source checkpoint ", src_dir, "; convert writes a new directory and never "
           "overwrites its source");
    if (path_within(dc, s) || lies_within(d, sid))
      fail(dst, ": lies inside the source checkpoint ", src_dir, "; choose a DST outside it");
    if (path_within(s, dc) || (have_did && lies_within(s, did)))
      fail(dst, ": contains the source checkpoint ", src_dir, "; choose a DST outside it");
  }
  if (!exists) return DstState::Absent;
  if (!fs::is_directory(d, ec)) fail(dst, ": exists and is not a directory; convert will not overwrite it");
  if (fs::is_empty(d, ec)) return DstState::EmptyDir;
  check_replaceable_pack(dst);
  if (!force) fail(dst, ": already exists (use --force to replace it)");
  return DstState::Pack;
}

std::vector<std::string> stale_temp_dirs(const std::string& dst) {
  std::vector<std::string> out;
  const fs::path d = fs::absolute(fs::path(dst));
  std::error_code ec;
  for (fs::directory_iterator it(d.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const char* kind : {".tmp-", ".old-"}) {  // the new pack, the replaced one (replace_pack)
      const std::string prefix = d.filename().string() + kind;
      if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0 &&
          it->is_directory(ec) && !it->is_symlink(ec))
        out.push_back((fs::path(dst).parent_path() / name).string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace moeflux
