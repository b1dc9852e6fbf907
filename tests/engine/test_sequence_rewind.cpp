// Sequence::rewind and checkpoints, on every fixture architecture, the demo model and the cpu,
// ref and cuda backends: a sequence cut back to a shorter prefix (a cache that grows: KV,
// latent) or returned to a checkpoint (a recurrent state) continues as a fresh sequence fed
// the same tokens does; a recurrent sequence without a checkpoint goes back to empty; the
// checkpoints are bounded, travel with save / restore, and are dropped by a rewind past them.
// reusable_prefix: how much of a prompt such a state serves.
#include <gtest/gtest.h>

#include <span>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_cases.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using test::Case;

class SequenceRewind : public ::testing::TestWithParam<Case> {};
class RecurrentCheckpoints : public ::testing::TestWithParam<Case> {};

// Relative L2 of each step's logits, as the fixture suites measure; a cut sequence recomputes
// nothing, but the fresh one it is compared with may feed the kept tokens in other chunks.
constexpr double kTol = 1e-5;

TEST_P(SequenceRewind, ContinuesAsAFreshSequenceFedTheKeptTokens) {
  SKIP_UNUSABLE_BACKEND();
  auto m = test::load(GetParam().model, GetParam().backend);
  const auto ids = test::base_ids(GetParam().model, *m);
  ASSERT_GE(ids.size(), 20u);
  Engine engine(*m);
  auto step1 = [&](Sequence& s, size_t from, size_t to) {
    const StepItem it{&s, std::span<const int32_t>(ids).subspan(from, to - from), {}};
    return engine.step({&it, 1})[0];
  };
  const bool recurrent = m->cfg.arch == "qwen3_next" || m->cfg.arch == "qwen3_5_moe_text";
  auto s = engine.new_sequence();
  EXPECT_EQ(s->recurrent(), recurrent);
  step1(*s, 0, 10);
  s->checkpoint();
  step1(*s, 10, 13);
  step1(*s, 13, 14);
  EXPECT_EQ(s->checkpoint_positions(), recurrent ? std::vector<int64_t>{10} : std::vector<int64_t>{});
  EXPECT_EQ(s->rewind(100), 14);  // past the end: nothing changes
  EXPECT_EQ(s->pos(), 14);
  const int64_t kept = s->rewind(12);
  EXPECT_EQ(kept, recurrent ? 10 : 12);
  EXPECT_EQ(s->pos(), kept);
  EXPECT_EQ(s->tokens(), std::vector<int32_t>(ids.begin(), ids.begin() + kept));
  auto fresh = engine.new_sequence();
  step1(*fresh, 0, 10);
  if (kept > 10) step1(*fresh, 10, size_t(kept));
  // The same continuation for both: a chunk of three tokens, then two single ones.
  for (const auto& [from, to] : {std::pair{size_t(kept), size_t(kept) + 3}, {size_t(kept) + 3, size_t(kept) + 4},
                                 {size_t(kept) + 4, size_t(kept) + 5}}) {
    const auto got = step1(*s, from, to), want = step1(*fresh, from, to);
    EXPECT_LE(test::rel_l2(got, want), kTol) << "tokens " << from << ".." << to;
  }
  EXPECT_EQ(s->tokens(), fresh->tokens());
  // The checkpoint at 10 stays usable after more steps; a rewind below it drops it.
  EXPECT_EQ(s->rewind(11), recurrent ? 10 : 11);
  EXPECT_EQ(s->rewind(4), recurrent ? 0 : 4);
  EXPECT_TRUE(s->checkpoint_positions().empty());
}

TEST_P(RecurrentCheckpoints, AreBoundedAndTravelWithSnapshots) {
  SKIP_UNUSABLE_BACKEND();
  auto m = test::load(GetParam().model, GetParam().backend);
  const auto ids = test::base_ids(GetParam().model, *m);
  Engine engine(*m);
  auto s = engine.new_sequence();
  ASSERT_TRUE(s->recurrent());
  auto g = engine.new_sequence();
  const StepItem first{g.get(), std::span<const int32_t>(ids).first(6), {}};
  engine.step({&first, 1});
  EXPECT_EQ(g->rewind(3), 0) << "no checkpoint: back to empty";
  EXPECT_EQ(g->pos(), 0);

  const size_t before = s->state_bytes();
  for (size_t i = 0; i < Sequence::kMaxCheckpoints + 2; ++i) {
    const StepItem it{s.get(), std::span<const int32_t>(ids).subspan(i, 1), {}};
    engine.step({&it, 1});
    s->checkpoint();
    s->checkpoint();  // twice at one position: one checkpoint
  }
  std::vector<int64_t> want;
  for (size_t p = 3; p <= Sequence::kMaxCheckpoints + 2; ++p) want.push_back(int64_t(p));
  EXPECT_EQ(s->checkpoint_positions(), want);
  EXPECT_GT(s->state_bytes(), before);
  const Sequence::Snapshot snap = s->save();
  auto r = engine.new_sequence();
  r->restore(snap);
  EXPECT_EQ(r->checkpoint_positions(), want);
  EXPECT_EQ(r->rewind(4), 4);
  // Checkpoints that do not match the model, or lie beyond the snapshot's tokens, are refused.
  Sequence::Snapshot bad = snap;
  bad.checkpoints.back().pos = int64_t(bad.tokens.size()) + 1;
  EXPECT_THROW(r->restore(bad), Error);
  bad = snap;
  bad.checkpoints[0].layers.pop_back();
  EXPECT_THROW(r->restore(bad), Error);
  EXPECT_EQ(r->pos(), 4) << "a refused restore leaves the sequence as it was";
}

INSTANTIATE_TEST_SUITE_P(Cpu, SequenceRewind, ::testing::ValuesIn(test::on("cpu", test::kFixtures)), test::case_name);
INSTANTIATE_TEST_SUITE_P(CpuDemo, SequenceRewind, ::testing::ValuesIn(test::on("cpu", test::kDemos)), test::case_name);
INSTANTIATE_TEST_SUITE_P(Ref, SequenceRewind, ::testing::ValuesIn(test::on("ref", test::kFixtures)), test::case_name);
INSTANTIATE_TEST_SUITE_P(Cuda, SequenceRewind, ::testing::ValuesIn(test::on("cuda", test::kFixtures)), test::case_name);
const std::vector<std::string> kRecurrent{"qwen3_next/q4", "qwen3_5_moe_text", "qwen3_5_moe_text/q4"};
INSTANTIATE_TEST_SUITE_P(Cpu, RecurrentCheckpoints, ::testing::ValuesIn(test::on("cpu", kRecurrent)), test::case_name);
INSTANTIATE_TEST_SUITE_P(Ref, RecurrentCheckpoints, ::testing::ValuesIn(test::on("ref", kRecurrent)), test::case_name);
INSTANTIATE_TEST_SUITE_P(Cuda, RecurrentCheckpoints, ::testing::ValuesIn(test::on("cuda", kRecurrent)), test::case_name);

TEST(ReusablePrefix, CommonPrefixCheckpointsAndTheLastPromptToken) {
  const std::vector<int32_t> held{1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> marks{2, 4};
  // A cache that grows: the common prefix, one prompt token always left to feed.
  EXPECT_EQ(reusable_prefix(held, {}, false, std::vector<int32_t>{1, 2, 3, 9, 9}), 3);
  EXPECT_EQ(reusable_prefix(held, {}, false, held), 5);
  EXPECT_EQ(reusable_prefix(held, {}, false, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}), 6);
  EXPECT_EQ(reusable_prefix(held, {}, false, std::vector<int32_t>{7, 1}), 0);
  EXPECT_EQ(reusable_prefix(held, {}, false, std::vector<int32_t>{}), 0);
  EXPECT_EQ(reusable_prefix(held, {}, false, held, held.size()), 6);
  // Recurrent: all of held, or the latest checkpoint inside the common prefix.
  EXPECT_EQ(reusable_prefix(held, marks, true, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}), 6);
  EXPECT_EQ(reusable_prefix(held, marks, true, std::vector<int32_t>{1, 2, 3, 9, 9}), 2);
  EXPECT_EQ(reusable_prefix(held, marks, true, std::vector<int32_t>{1, 2, 3, 4, 5, 9}), 4);
  EXPECT_EQ(reusable_prefix(held, marks, true, held), 4);
  EXPECT_EQ(reusable_prefix(held, {}, true, std::vector<int32_t>{1, 2, 3, 9}), 0);
}

}  // namespace
}  // namespace moeflux
