// The backend op table: every case of backend_op_cases.h on every registered backend (and
// every A/B switch of a backend other than cpu flipped; $MOEFLUX_TEST_FLIPS: only those named)
// against `ref`, within the case's relative L2 (over the entries finite in both) and non-finite
// exactly where ref's are. The CPU backend also runs at every instruction set this machine has,
// with 4-bit weights in file order (1 thread) and rewritten into the group-lane layout (3
// threads). A backend that does not support an op on a format skips that case.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "backend/backend_op_cases.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/registry.h"
#include "core/error.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

BackendOptions named(const std::string& name) {
  BackendOptions o;
  o.name = name;
  return o;
}

struct Variant {
  std::string label;
  BackendOptions opt;
  std::string flip;  // an A/B switch of the backend set to the other arm ("": none)
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> all = [] {
    std::vector<Variant> vs;
    for (const std::string& name : backend_names()) {
      if (name == "ref" || name == "auto") continue;  // auto is one of the others
      if (std::string why; !backend_usable(name, &why)) {
        static bool told = false;
        if (!told) std::printf("backend %s not tested here: %s\n", name.c_str(), why.c_str());
        told = true;
        continue;
      }
      vs.push_back({name, named(name), ""});
      if (name != "cpu") {  // each A/B switch's other arm (the CPU's are process-wide: cpu_features.h)
        const char* only = std::getenv("MOEFLUX_TEST_FLIPS");  // a space-separated list: these alone
        for (const std::string& sw : make_backend(named(name))->ab_switches())
          if (!only || (" " + std::string(only) + " ").find(" " + sw + " ") != std::string::npos)
            vs.push_back({name + " " + sw + " flipped", named(name), sw});
        continue;
      }
      for (CpuIsa isa : test::cpu_isas_available())
        for (Repack repack : {Repack::Off, Repack::On}) {
          BackendOptions o = named(name);
          o.cpu.isa = std::string(cpu_isa_name(isa));
          o.cpu.repack = repack;
          o.cpu.threads = repack == Repack::On ? 3 : 1;
          vs.push_back({"cpu " + o.cpu.isa + (repack == Repack::On ? " lanes" : " file order") + " threads " +
                            std::to_string(o.cpu.threads),
                        o, ""});
        }
    }
    return vs;
  }();
  return all;
}

struct Diff {
  double rel_l2 = 0;             // over the entries finite in both
  int64_t finite_mismatch = 0;  // entries finite in one only
};

Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(got[i]) != std::isfinite(want[i])) ++d.finite_mismatch;
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) continue;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  d.rel_l2 = num == 0 ? 0 : std::sqrt(num / den);
  return d;
}

const std::vector<test::OpCase>& cases() {
  static const std::vector<test::OpCase> c = test::backend_op_cases();
  return c;
}

// The CPU backend's options set the process's instruction set and thread count (those left
// unset keep theirs): each case starts and ends with the same.
class KeepCpuState {
 public:
  KeepCpuState() : isa_(cpu_isa()), threads_(cpu_threads()) {}
  ~KeepCpuState() { set_cpu_isa(isa_), set_cpu_threads(threads_); }

 private:
  CpuIsa isa_;
  int threads_;
};

class BackendOps : public ::testing::TestWithParam<size_t> {};

TEST_P(BackendOps, MatchesRef) {
  const test::OpCase& c = cases()[GetParam()];
  const KeepCpuState keep;
  auto ref = make_backend(named("ref"));
  test::OpRun rr(*ref, c.op);
  const std::vector<float> want = c.run(rr);
  ASSERT_FALSE(want.empty());
  double worst = 0;
  int ran = 0;
  for (const Variant& v : variants()) {
    auto b = make_backend(v.opt);
    if (!v.flip.empty()) b->set_ab_switch(v.flip, !b->ab_switch(v.flip));
    test::OpRun r(*b, c.op);
    std::vector<float> got;
    try {
      got = c.run(r);
    } catch (const test::Unsupported& u) {
      std::printf("%s: skipped on %s (%s)\n", c.name.c_str(), v.label.c_str(), u.what.c_str());
      continue;
    }
    ASSERT_EQ(got.size(), want.size()) << v.label;
    const Diff d = compare(got, want);
    EXPECT_LE(d.rel_l2, c.tol) << v.label;
    EXPECT_EQ(d.finite_mismatch, 0) << v.label;
    worst = std::max(worst, d.rel_l2), ++ran;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  RecordProperty("worst_rel_l2", buf);
  RecordProperty("backends", ran);
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOps, ::testing::Range(size_t(0), cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; });

// Every op of the Backend has cases, and each case's name is its own.
TEST(BackendOpsTable, CoversEveryOp) {
  std::set<Op> ops;
  std::set<std::string> names;
  for (const auto& c : cases()) ops.insert(c.op), names.insert(c.name);
  for (int i = 0; i <= int(Op::Logits); ++i) EXPECT_TRUE(ops.count(Op(i))) << op_name(Op(i));
  EXPECT_EQ(names.size(), cases().size());
}

TEST(BackendOpsTable, RefIsRegistered) {
  const auto names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "ref"), names.end());
  auto ref = make_backend(named("ref"));
  EXPECT_STREQ(ref->name(), "ref");
  EXPECT_EQ(ref->device(), Device::Host);
  EXPECT_FALSE(ref->rewrites_weights());
  EXPECT_THROW(make_backend(named("nonesuch")), Error);
}

// cuda where it can run, else an error naming why; auto picks it when it can run.
TEST(BackendOpsTable, CudaOrAReason) {
  std::string why;
  if (backend_usable("cuda", &why)) {
    EXPECT_STREQ(make_backend(named("cuda"))->name(), "cuda");
    EXPECT_STREQ(make_backend(named("auto"))->name(), "cuda");
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(make_backend(named("cuda")), Error);
    EXPECT_STREQ(make_backend(named("auto"))->name(), "cpu");
  }
}

}  // namespace
}  // namespace moeflux
