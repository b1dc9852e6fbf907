// The documentation stays in step with the tree: every repository path the README and docs/
// name exists, and every tuning switch the engine registers is documented in
// docs/cpu-backend.md.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "util/test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;

const std::string kRoot = MOEFLUX_SOURCE_DIR;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The Markdown files a reader follows from the README.
std::vector<std::string> doc_files() {
  std::vector<std::string> files = {"README.md", "models/README.md", "tests/data/README.md"};
  for (const auto& e : fs::directory_iterator(kRoot + "/docs"))
    if (e.path().extension() == ".md") files.push_back("docs/" + e.path().filename().string());
  return files;
}

bool path_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/'; }

// Repository paths in `text`: words starting with a top-level directory of the tree and not
// part of a longer path ("build/src/..."). Placeholders (NAME, globs) and paths of an older
// commit (`git show COMMIT:path`, on lines naming a commit) are left out.
std::vector<std::string> repo_paths(const std::string& text) {
  static const char* kTop[] = {"src/", "tests/", "bench/", "dev/", "docs/", "scripts/", "tools/", "models/", "fuzz/"};
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("git show") != std::string::npos || line.find("git ls-tree") != std::string::npos) continue;
    for (size_t i = 0; i < line.size(); ++i) {
      if (i > 0 && (path_char(line[i - 1]) || line[i - 1] == ':')) continue;
      for (const char* top : kTop) {
        if (line.compare(i, std::strlen(top), top) != 0) continue;
        size_t j = i;
        while (j < line.size() && path_char(line[j])) ++j;
        std::string p = line.substr(i, j - i);
        while (!p.empty() && (p.back() == '.' || p.back() == ',')) p.pop_back();
        const bool placeholder = p.find("NAME") != std::string::npos || (j < line.size() && (line[j] == '*' || line[j] == '{'));
        if (!placeholder) out.push_back(p);
        i = j;
        break;
      }
    }
  }
  return out;
}

TEST(Docs, RepoPathsFinderSeesPathsAndSkipsTheRest) {
  const auto got = repo_paths("see src/backend/cpu/cpu_ops.h, then docs/x.md. build/src/moeflux src/ops/NAME/ "
                              "src/backend/cpu/kernels_*.cpp\n`git show abc:docs/old.md` docs/old2.md");
  EXPECT_EQ(got, (std::vector<std::string>{"src/backend/cpu/cpu_ops.h", "docs/x.md"}));
}

TEST(Docs, EveryNamedPathExists) {
  size_t checked = 0;
  for (const std::string& doc : doc_files()) {
    for (const std::string& p : repo_paths(read_file(kRoot + "/" + doc))) {
      EXPECT_TRUE(fs::exists(kRoot + "/" + p)) << doc << " names " << p << ", which is not in the tree";
      ++checked;
    }
  }
  EXPECT_GT(checked, size_t(50));  // the docs do name paths: the finder must have seen them
}

TEST(Docs, EveryTuningSwitchIsDocumented) {
  // An unknown --alternate name is refused with the list of the switches the engine registers.
  std::string out;
  ASSERT_NE(test::run_command(test::moeflux_exe() + " bench -m " + kRoot + "/models/demo-qwen3-moe-q4 --alternate NONE 2>&1",
                              &out),
            0);
  const size_t at = out.find("(there are: ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string doc = read_file(kRoot + "/docs/cpu-backend.md");
  std::istringstream names(out.substr(at + 12, out.find(')', at) - at - 12));
  std::string name;
  int n = 0;
  while (std::getline(names, name, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos) << name << " is not in docs/cpu-backend.md";
    ++n;
  }
  EXPECT_GE(n, 5) << out;
}

}  // namespace
}  // namespace moeflux
