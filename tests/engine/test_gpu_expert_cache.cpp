// The GPU expert cache (--gpu-expert-cache, cuda backend): the demo model with its experts
// streamed from the pack through a small host cache and a GPU cache of 1 slot, 10% and all of
// the experts gives the same logits, bit for bit, as the resident cuda path, over a prefill and
// decode steps; a budget that holds no expert is an error naming the option. Skipped without
// a usable GPU. With a host cache of every record the small steps read device tables of slots
// and mapped host records, with the same bits. Misses computed by the CPU instead agree within
// float rounding; a read error fails one pass and the next works.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "backend/registry.h"
#include "core/error.h"
#include "engine/engine_cases.h"
#include "engine/session.h"
#include "stream/streaming.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

std::unique_ptr<Model> demo_on_gpu(const std::string& gpu_cache, MoeMisses misses = MoeMisses::Copy,
                                   int cpu_moe_layers = 0, const std::string& host_cache = "25%") {
  BackendOptions bo;
  bo.name = "cuda";
  bo.cuda.expert_cache = gpu_cache;
  bo.cuda.moe_misses = misses;
  bo.cuda.cpu_moe_layers = cpu_moe_layers;
  if (gpu_cache.empty() && cpu_moe_layers == 0) return load_model(test::demo_dir(), MapMode::Map, make_backend(bo));
  StreamOptions o;
  o.budget = host_cache;
  return load_model(test::demo_dir(), o, make_backend(bo));
}

// Logits of a 24-token prefill, then 6 greedy decode steps (the second recorded as a CUDA graph
// where the step can be, the rest replayed).
std::vector<std::vector<float>> run(const Model& m) {
  Session s(m);
  const auto ids = test::base_ids(test::kDemo, m);
  std::vector<std::vector<float>> out{s.forward(ids, {.all_logits = true})};
  for (int i = 0; i < 6; ++i) {
    const std::span<const float> last(out.back().data() + out.back().size() - size_t(m.cfg.vocab_size),
                                      size_t(m.cfg.vocab_size));
    const int32_t t = argmax(last);
    out.push_back(s.forward(std::span<const int32_t>(&t, 1), {.all_logits = false}));
  }
  return out;
}

TEST(GpuExpertCache, BitIdenticalToResidentAtEveryBudget) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  const auto want = run(*demo_on_gpu(""));
  for (const std::string budget : {"1", "10%", "100%"}) {
    SCOPED_TRACE("--gpu-expert-cache " + budget);
    auto m = demo_on_gpu(budget);
    if (budget == "1") {  // one byte holds no record
      try {
        run(*m);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--gpu-expert-cache"), std::string::npos) << e.what();
      }
      continue;
    }
    const auto got = run(*m);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(got[i], want[i]), -1) << "step " << i;
    EXPECT_FALSE(m->backend->fact("gpu_expert_cache").empty());
  }
}

// A host cache that holds every record: small steps read the layers' device tables (GPU slots
// and mapped host records) with no host round trip, and are recorded as graphs; their routed
// experts move into slots after each step. The same bits as resident at 1 slot, 10% and all
// the experts, also with the device_tables switch off.
TEST(GpuExpertCache, DeviceTablesGiveTheResidentBits) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  const auto want = run(*demo_on_gpu(""));
  for (const std::string budget : {"120000", "10%", "100%"})
    for (const bool tables : {true, false}) {
      SCOPED_TRACE("--gpu-expert-cache " + budget + (tables ? "" : ", device_tables off"));
      auto m = demo_on_gpu(budget, MoeMisses::Copy, 0, "100%");
      m->backend->set_ab_switch("device_tables", tables);
      const auto got = run(*m);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(got[i], want[i]), -1) << "step " << i;
      EXPECT_EQ(m->backend->fact("device_tables").empty(), !tables) << m->backend->fact("device_tables");
      // A second pass starts from the slots the first one filled.
      const auto again = run(*m);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(again[i], want[i]), -1) << "again, step " << i;
    }
}

// Decode steps through the device tables leave their routed ids (written to mapped host memory
// by the router kernel) for the admission after each step: a second pass over the same tokens
// finds in slots what the first read from host memory, with the resident bits both times.
TEST(GpuExpertCache, DecodeStepsAdmitTheExpertsTheyRouted) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  const auto decode = [](const Model& m) {  // a one-token prompt, then 8 greedy steps: all small
    Session s(m);
    int32_t t = test::base_ids(test::kDemo, m)[0];
    std::vector<std::vector<float>> out;
    for (int i = 0; i < 9; ++i) {
      out.push_back(s.forward(std::span<const int32_t>(&t, 1), {.all_logits = false}));
      t = argmax(out.back());
    }
    return out;
  };
  const auto host_reads = [](const Model& m) {
    const std::string f = m.backend->fact("device_tables");
    const size_t at = f.find("; ");
    return at == std::string::npos ? int64_t(-1) : std::atoll(f.c_str() + at + 2);
  };
  const auto want = decode(*demo_on_gpu(""));
  auto m = demo_on_gpu("100%", MoeMisses::Copy, 0, "100%");
  int64_t reads[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = decode(*m);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(test::first_difference(got[i], want[i]), -1) << "pass " << pass << ", step " << i;
    reads[pass] = host_reads(*m) - (pass ? reads[0] : 0);
  }
  EXPECT_GT(reads[0], 0) << m->backend->fact("device_tables");
  EXPECT_LT(2 * reads[1], reads[0]) << "host reads in the second pass: " << reads[1] << ", in the first: " << reads[0];
  EXPECT_GT(std::atoll(m->backend->fact("gpu_copied_bytes").c_str()), 0);
}

// --moe-misses auto with every expert fitting the GPU cache: once decode steps through the
// device tables have no misses, they take the tables without trying the split, with the
// resident bits.
TEST(GpuExpertCache, AutoWithoutMissesKeepsTheTables) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  const auto want = run(*demo_on_gpu(""));
  auto m = demo_on_gpu("100%", MoeMisses::Auto, 0, "100%");
  run(*m);  // the first pass fills the cache
  const auto got = run(*m);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(test::rel_l2(got[i], want[i]), 1e-3) << "step " << i;
  const std::string a = m->backend->fact("auto_choice");
  const size_t at = a.find(" steps without misses took the tables");
  ASSERT_NE(at, std::string::npos) << a;
  const size_t from = a.rfind("; ", at);
  EXPECT_GT(std::atoll(a.c_str() + from + 2), 0) << a;
}

// One slot: every expert of every step goes through it, one at a time.
TEST(GpuExpertCache, OneSlotForTheWholeModel) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  const auto want = run(*demo_on_gpu(""));
  // The demo's expert records are 110592 bytes: 120000 bytes hold one.
  auto m = demo_on_gpu("120000");
  const auto got = run(*m);
  EXPECT_NE(m->backend->fact("gpu_expert_cache").find("1 slots"), std::string::npos) << m->backend->fact("gpu_expert_cache");
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(got[i], want[i]), -1) << "step " << i;
}

// Misses computed by the CPU (--moe-misses cpu / auto, --cpu-moe-layers) agree with the
// resident path to float rounding: within 1e-3 relative L2 at every step. Auto's 6 decode steps
// take the device tables and the copy / CPU split in turn (its choice is still being learnt),
// both within the same bound: 3 steps the tables; the split at least once, the others of its 3
// taking the tables where the tables' step before had no misses.
TEST(GpuExpertCache, CpuComputedMissesAgreeWithResident) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  const auto want = run(*demo_on_gpu(""));
  struct Case {
    std::string budget;
    MoeMisses misses;
    int cpu_layers;
    bool cpu_used;  // the CPU must have computed some experts
    std::string host = "25%";
  };
  const Case cases[] = {{"120000", MoeMisses::Cpu, 0, true},  {"10%", MoeMisses::Cpu, 0, true},
                        {"100%", MoeMisses::Cpu, 0, true},    {"120000", MoeMisses::Auto, 0, false},
                        {"10%", MoeMisses::Auto, 0, false},   {"", MoeMisses::Copy, 1000, true},
                        {"10%", MoeMisses::Copy, 1, true},    {"10%", MoeMisses::Auto, 0, false, "100%"},
                        {"120000", MoeMisses::Auto, 0, false, "100%"}};
  for (const Case& c : cases) {
    SCOPED_TRACE("budget '" + c.budget + "' misses " + std::to_string(int(c.misses)) + " cpu layers " +
                 std::to_string(c.cpu_layers) + " host cache " + c.host);
    auto m = demo_on_gpu(c.budget, c.misses, c.cpu_layers, c.host);
    const auto got = run(*m);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(test::rel_l2(got[i], want[i]), 1e-3) << "step " << i;
    if (c.cpu_used) {
      EXPECT_FALSE(m->backend->fact("cpu_experts").empty());
    }
    if (!c.budget.empty()) {
      EXPECT_FALSE(m->backend->fact("gpu_expert_cache").empty());
    }
    if (c.misses == MoeMisses::Auto) {
      const std::string a = m->backend->fact("auto_choice");
      EXPECT_NE(a.find("device tables"), std::string::npos) << a;
      std::smatch g;
      ASSERT_TRUE(std::regex_search(a, g, std::regex("^steps of at most 16 rows: device tables (\\d+) steps, copy / CPU "
                                                     "split (\\d+) steps.*?; (\\d+) steps without misses took")))
          << a;
      EXPECT_EQ(g[1], "3") << a;
      EXPECT_GE(std::stoi(g[2]), 1) << a;
      EXPECT_EQ(std::stoi(g[2]) + std::stoi(g[3]), 3) << "decode steps in blocks of three, in turn: " << a;
      EXPECT_EQ(m->backend->fact("device_tables").empty(), c.host != "100%") << m->backend->fact("device_tables");
    }
  }
}

// A read error while experts stream through the GPU cache fails that pass with the layer and
// expert named; the next pass on the same session works and agrees with the resident path.
TEST(GpuExpertCache, AReadErrorFailsThatPassAndTheNextOneWorks) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  auto resident = demo_on_gpu("");
  const auto ids = test::base_ids(test::kDemo, *resident);
  const std::vector<int32_t> first(ids.begin(), ids.begin() + ptrdiff_t(ids.size() / 2)),
      second(ids.begin() + ptrdiff_t(ids.size() / 2), ids.end());
  std::vector<float> want;
  {
    Session s(*resident);
    s.forward(first);
    want = s.forward(second);
  }
  for (const MoeMisses misses : {MoeMisses::Copy, MoeMisses::Cpu}) {
    SCOPED_TRACE(int(misses));
    BackendOptions bo;
    bo.name = "cuda";
    bo.cuda.expert_cache = "120000";  // one slot: nearly every expert comes from the host
    bo.cuda.moe_misses = misses;
    StreamOptions o;
    o.budget = "1";  // and the host reads each from the file every time
    auto m = load_model(test::demo_dir(), o, make_backend(bo));
    Session s(*m);
    s.forward(first);
    expert_cache(*m)->set_fault_hook([](int, int) { throw std::runtime_error("injected EIO"); });
    try {
      s.forward(second);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("injected EIO"), std::string::npos) << what;
      EXPECT_NE(what.find(" expert "), std::string::npos) << what;
    }
    EXPECT_EQ(s.pos(), int64_t(first.size()));
    expert_cache(*m)->set_fault_hook(nullptr);
    std::vector<float> got;
    ASSERT_NO_THROW(got = s.forward(second));
    if (misses == MoeMisses::Copy) {
      EXPECT_EQ(test::first_difference(got, want), -1);
    } else {
      EXPECT_LT(test::rel_l2(got, want), 1e-3);
    }
  }
}

}  // namespace
}  // namespace moeflux
