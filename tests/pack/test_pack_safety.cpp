// convert never destroys what it did not write: DST equal to SRC (also through a symlinked
// path), inside it or containing it is refused; --force replaces only a pack made of pack
// files; a plain file or a non-pack directory is never touched; leftover DST.tmp-XXXXXX
// directories are named, not removed; SIGINT / SIGTERM remove the temporary directory and
// exit 130 / 143.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "format/pack_store.h"
#include "pack/pack_test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;

// Every regular file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) m[fs::relative(e.path(), dir).string()] = test::read_file(e.path().string());
  return m;
}

class ConvertSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = tmp_.file("src");
    fs::copy(test::fixture_dir("qwen3_moe"), src_, fs::copy_options::recursive);
    before_ = snapshot(src_);
    ASSERT_GE(before_.size(), 5u);  // config.json, model.safetensors, goldens, q4/...
  }
  // Runs convert expecting failure (not a crash) and `needle` in its output.
  void expect_refused(const std::string& src, const std::string& dst, const std::string& needle) {
    std::string out;
    const std::string cmd = test::moeflux_exe() + " convert --quiet --force " + src + " " + dst;
    EXPECT_EQ(test::run_command(cmd, &out), 1) << cmd << "\n" << out;
    EXPECT_NE(out.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << out;
  }
  void expect_src_intact() { EXPECT_TRUE(snapshot(src_) == before_) << "the source checkpoint was changed"; }
  test::TempDir tmp_;
  std::string src_;
  std::map<std::string, std::string> before_;
};

TEST_F(ConvertSafety, DstEqualToSrcIsRefused) {
  expect_refused(src_, src_, "is the source checkpoint");
  expect_src_intact();
  expect_refused(src_, src_ + "/", "is the source checkpoint");
  expect_refused(src_, src_ + "/q4/..", "is the source checkpoint");
  // The same directory through a symlinked parent.
  fs::create_directory_symlink(tmp_.path(), tmp_.file("alias"));
  expect_refused(src_, tmp_.file("alias/src"), "is the source checkpoint");
  // DST a symlink to SRC.
  fs::create_directory_symlink(src_, tmp_.file("link"));
  expect_refused(src_, tmp_.file("link"), "symbolic link");
  expect_src_intact();
}

TEST_F(ConvertSafety, DstInsideOrAroundSrcIsRefused) {
  expect_refused(src_, src_ + "/q4", "lies inside the source checkpoint");
  expect_refused(src_, src_ + "/new_pack", "lies inside the source checkpoint");
  expect_refused(src_ + "/q4", src_, "contains the source checkpoint");
  expect_refused(src_ + "/q4", tmp_.path(), "contains the source checkpoint");
  expect_src_intact();
  EXPECT_FALSE(fs::exists(src_ + "/new_pack"));
  for (const auto& e : fs::directory_iterator(src_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(ConvertSafety, ForceReplacesOnlyPacks) {
  // A non-empty directory that is not a pack.
  const std::string other = tmp_.file("other");
  fs::create_directory(other);
  test::write_file(other + "/notes.txt", "mine");
  expect_refused(src_, other, "is not a moeflux pack");
  EXPECT_EQ(test::read_file(other + "/notes.txt"), "mine");
  // A manifest.json that does not parse as a pack.
  test::write_file(other + "/manifest.json", "{\"name\": \"my web app\"}");
  expect_refused(src_, other, "is not a moeflux pack");
  EXPECT_EQ(test::read_file(other + "/notes.txt"), "mine");
  // A plain file.
  const std::string file = tmp_.file("file.txt");
  test::write_file(file, "keep");
  expect_refused(src_, file, "is not a directory");
  EXPECT_EQ(test::read_file(file), "keep");
  // A pack holding a file that is not part of it.
  const std::string pack = tmp_.file("pack");
  test::convert_fixture("mixtral/q4", pack);
  test::write_file(pack + "/README.txt", "notes");
  expect_refused(src_, pack, "README.txt', which is not part of the pack");
  EXPECT_EQ(test::read_file(pack + "/README.txt"), "notes");
  EXPECT_EQ(PackStore::open(pack)->manifest().architecture, "mixtral");
  // A real pack is replaced; an empty directory is filled.
  fs::remove(pack + "/README.txt");
  test::convert_fixture("qwen3_moe", pack, "--force");
  EXPECT_EQ(PackStore::open(pack)->manifest().architecture, "qwen3_moe");
  fs::create_directory(tmp_.file("empty"));
  test::convert_fixture("qwen3_moe", tmp_.file("empty"));
  EXPECT_TRUE(fs::exists(tmp_.file("empty/manifest.json")));
  for (const auto& e : fs::directory_iterator(tmp_.path())) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n.find(".tmp-") == std::string::npos && n.find(".old-") == std::string::npos) << n;
  }
}

TEST_F(ConvertSafety, LeftoverTempDirIsNamedNotRemoved) {
  const std::string dst = tmp_.file("out");
  const std::string stale = dst + ".tmp-a1B2c3";
  fs::create_directories(stale + "/experts");
  test::write_file(stale + "/dense.bin", "partial");
  std::string out;
  const std::string cmd = test::moeflux_exe() + " convert --quiet " + src_ + " " + dst;
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("warning: " + stale + ": temporary directory of an interrupted convert"), std::string::npos)
      << out;
  EXPECT_NE(out.find("rm -r '" + stale + "'"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(stale + "/dense.bin"));
  EXPECT_TRUE(fs::exists(dst + "/manifest.json"));
}

// Starts `moeflux convert src dst` as a child; returns its pid.
pid_t spawn_convert(const std::string& src, const std::string& dst) {
  const std::string exe = test::moeflux_exe();
  pid_t pid = fork();
  if (pid == 0) {
    execl(exe.c_str(), exe.c_str(), "convert", "--quiet", src.c_str(), dst.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

std::vector<std::string> temp_dirs_of(const std::string& dst) {
  std::vector<std::string> v;
  const fs::path d(dst);
  for (const auto& e : fs::directory_iterator(d.parent_path()))
    if (e.path().filename().string().rfind(d.filename().string() + ".tmp-", 0) == 0) v.push_back(e.path());
  return v;
}

TEST(ConvertSignals, InterruptRemovesTempDir) {
  test::TempDir tmp(test::scratch_dir());
  const std::string hf = tmp.file("hf");
  std::string out;
  // ~0.4 GB of bf16: several seconds of conversion on a loaded machine.
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " synth --preset qwen3-30b-a3b --layers 2 --experts 16 "
                                                    "--vocab 512 --quiet --out " + hf, &out), 0) << out;
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string dst = tmp.file(sig == SIGINT ? "p_int" : "p_term");
    const pid_t pid = spawn_convert(hf, dst);
    ASSERT_GT(pid, 0);
    // Signal once the conversion is writing (its temporary directory holds dense.bin).
    const auto t0 = std::chrono::steady_clock::now();
    bool writing = false;
    while (!writing && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      for (const auto& d : temp_dirs_of(dst)) writing = writing || fs::exists(d + "/dense.bin");
      if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(writing) << "no temporary directory appeared";
    ASSERT_EQ(kill(pid, sig), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    EXPECT_TRUE(temp_dirs_of(dst).empty()) << temp_dirs_of(dst).front();
    EXPECT_FALSE(fs::exists(dst));
  }
  // SIGKILL cannot be caught: the next convert to the same DST names the leftover.
  const std::string dst = tmp.file("p_kill");
  const pid_t pid = spawn_convert(hf, dst);
  ASSERT_GT(pid, 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> left;
  while (left.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    for (const auto& d : temp_dirs_of(dst))
      if (fs::exists(d + "/dense.bin")) left.push_back(d);
    if (left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(left.size(), 1u);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(fs::exists(left[0]));
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " convert --quiet " + hf + " " + dst, &out), 0) << out;
  EXPECT_NE(out.find("warning: " + left[0] + ": temporary directory of an interrupted convert"), std::string::npos)
      << out;
  EXPECT_TRUE(fs::exists(left[0]));  // named, not removed
  EXPECT_TRUE(fs::exists(dst + "/manifest.json"));
}

}  // namespace
}  // namespace moeflux
