// Engine::step with many sequences: B sequences (B = 1..4) of different prompt lengths stepped
// together (prefill chunks of some and decode tokens of others in one step, items in varying
// order, some asking only for the last position's logits) get the logits each gets alone
// through its own Session (within 1e-5 relative L2 per sequence and 1e-4 per row; B = 1, and
// any B at the CPU's scalar level: the same bits), the same hidden states and the same greedy
// tokens, on every fixture architecture, the demo model and the demo model streaming its
// experts through a small cache, on the cpu, ref and cuda backends (cuda where a GPU is usable). Sequence::save / restore: a
// restored sequence (fresh, or rewound) continues exactly as the original; a snapshot of
// another shape is refused. Engine::step's errors leave every state unchanged. Items that keep
// their logits on the backend (TopLogits) get lists of their rows' largest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <span>

#include "backend/registry.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_cases.h"
#include "engine/session.h"
#include "stream/streaming.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using test::Case, test::load, test::base_ids, test::kDemo, test::kDemoStreamed, test::on, test::case_name,
    test::kFixtures, test::kVariants, test::kDemos, test::safe_name;

// Batched against alone: relative L2 over each sequence's logits (as the fixture suites measure),
// and max |a - b| / max |b| per row of logits. Batched rows sum differently only where a step's
// row count changes the CPU matmul's path (per-token matvecs up to 16 rows, the batched matmul
// above: backend/cpu/cpu_ops.h, kSmallBatch), which the hybrid q4 fixtures amplify to ~2e-5 per
// row; one Session alone shows the same between a 37-token prefill and token-by-token decode.
constexpr double kTol = 1e-5, kRowTol = 1e-4;
constexpr int kDecode = 8;  // greedy decode tokens per sequence



// max |a - b| / max(1e-6, max |b|) of each of the `rows` rows; the worst of them.
double worst_row_rel(const std::vector<float>& a, const std::vector<float>& b, int64_t rows) {
  if (a.size() != b.size() || rows <= 0 || b.size() % size_t(rows) != 0) return INFINITY;
  const size_t n = b.size() / size_t(rows);
  double worst = 0;
  for (size_t r = 0; r < size_t(rows); ++r) {
    double diff = 0, mag = 0;
    for (size_t i = r * n; i < (r + 1) * n; ++i) {
      diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
      mag = std::max(mag, std::fabs(double(b[i])));
    }
    if (std::isnan(diff)) return INFINITY;
    worst = std::max(worst, diff / std::max(1e-6, mag));
  }
  return worst;
}

std::span<const float> last_row(const std::vector<float>& logits, int64_t vocab) {
  return std::span<const float>(logits).subspan(logits.size() - size_t(vocab));
}

// One sequence of the batch: its prompt, fed in chunks of `chunk` tokens from step `start` on,
// then kDecode greedy tokens, one per step.
struct Plan {
  std::vector<int32_t> prompt;
  size_t chunk;
  int start;
  bool all_logits;  // of the prefill chunks (decode steps have one row either way)
  bool hidden;      // ask for the hidden states of the prefill chunks
};

// Prompt lengths 13, 5, 37, 9 (the third runs past the mixtral variant's 32-token window),
// different tokens each, chunks that split them unevenly, staggered starts.
std::vector<Plan> plans(const std::vector<int32_t>& ids) {
  auto prompt = [&](size_t len, size_t offset) {
    std::vector<int32_t> p;
    for (size_t i = 0; i < len; ++i) p.push_back(ids[(offset + 5 * i) % ids.size()]);
    return p;
  };
  return {{prompt(13, 0), 6, 0, true, true},
          {prompt(5, 3), 5, 1, false, false},
          {prompt(37, 7), 16, 0, true, false},
          {prompt(9, 11), 4, 2, false, true}};
}

// What a sequence computed: each action's logits (and hidden states), the greedy tokens it fed.
struct Record {
  std::vector<std::vector<float>> logits, hidden;
  std::vector<int64_t> rows;  // rows of each action's logits
  std::vector<int32_t> greedy;
};

// The chunk of action a of plan p (a prefill chunk), or empty for a decode action.
std::span<const int32_t> prefill_chunk(const Plan& p, size_t a) {
  const size_t at = a * p.chunk;
  if (at >= p.prompt.size()) return {};
  return std::span<const int32_t>(p.prompt).subspan(at, std::min(p.chunk, p.prompt.size() - at));
}
size_t n_prefill(const Plan& p) { return (p.prompt.size() + p.chunk - 1) / p.chunk; }

// The plan alone through its own Session.
Record run_alone(const Model& m, const Plan& p) {
  Session s(m);
  Record r;
  const int64_t V = m.cfg.vocab_size;
  for (size_t a = 0; a < n_prefill(p); ++a) {
    const auto chunk = prefill_chunk(p, a);
    std::vector<float> hid;
    r.logits.push_back(s.forward(chunk, {.all_logits = p.all_logits, .hidden = p.hidden ? &hid : nullptr}));
    r.hidden.push_back(std::move(hid));
    r.rows.push_back(p.all_logits ? int64_t(chunk.size()) : 1);
  }
  for (int k = 0; k < kDecode; ++k) {
    const int32_t tok = argmax(last_row(r.logits.back(), V));
    r.greedy.push_back(tok);
    r.logits.push_back(s.forward(std::span<const int32_t>(&tok, 1)));
    r.hidden.emplace_back();
    r.rows.push_back(1);
  }
  return r;
}

// The plans stepped together through one Engine: each step takes the next action of every
// sequence that has started and not finished, in ascending order on even steps and descending
// on odd ones. Returns the steps it took.
int run_batched(const Model& m, const std::vector<Plan>& ps, std::vector<Record>& out) {
  Engine engine(m);
  const int64_t V = m.cfg.vocab_size;
  const size_t B = ps.size();
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t b = 0; b < B; ++b) seqs.push_back(engine.new_sequence());
  out.assign(B, Record{});
  std::vector<size_t> next(B, 0);
  std::vector<int64_t> fed(B, 0);  // tokens given to each sequence
  int step = 0;
  for (;; ++step) {
    std::vector<size_t> order;
    for (size_t b = 0; b < B; ++b)
      if (step >= ps[b].start && next[b] < n_prefill(ps[b]) + kDecode) order.push_back(b);
    if (order.empty()) break;
    if (step % 2) std::reverse(order.begin(), order.end());
    std::vector<StepItem> items;
    std::vector<int32_t> tokens(B);
    std::vector<std::vector<float>> hidden(B);
    for (size_t b : order) {
      const Plan& p = ps[b];
      StepItem it;
      it.seq = seqs[b].get();
      const size_t a = next[b];
      if (a < n_prefill(p)) {
        it.ids = prefill_chunk(p, a);
        it.opt = {.all_logits = p.all_logits, .hidden = p.hidden ? &hidden[b] : nullptr};
        out[b].rows.push_back(p.all_logits ? int64_t(it.ids.size()) : 1);
      } else {
        tokens[b] = argmax(last_row(out[b].logits.back(), V));
        out[b].greedy.push_back(tokens[b]);
        it.ids = std::span<const int32_t>(&tokens[b], 1);
        out[b].rows.push_back(1);
      }
      fed[b] += int64_t(it.ids.size());
      items.push_back(it);
    }
    auto logits = engine.step(items);
    EXPECT_EQ(logits.size(), items.size());
    for (size_t i = 0; i < order.size() && i < logits.size(); ++i) {
      const size_t b = order[i];
      out[b].logits.push_back(std::move(logits[i]));
      out[b].hidden.push_back(std::move(hidden[b]));
      ++next[b];
      EXPECT_EQ(seqs[b]->pos(), fed[b]) << "sequence " << b;
    }
  }
  for (size_t b = 0; b < B; ++b)
    EXPECT_EQ(seqs[b]->pos(), int64_t(ps[b].prompt.size()) + kDecode) << "sequence " << b;
  return step;
}


class EngineBatch : public ::testing::TestWithParam<Case> {};

TEST_P(EngineBatch, EachSequenceGetsWhatItGetsAlone) {
  SKIP_UNUSABLE_BACKEND();
  const std::string& name = GetParam().model;
  auto m = load(name, GetParam().backend);
  const std::vector<Plan> all = plans(base_ids(name, *m));
  std::vector<Record> alone;
  for (const Plan& p : all) alone.push_back(run_alone(*m, p));
  const int64_t dim = m->cfg.dim;
  for (size_t B = 1; B <= all.size(); ++B) {
    SCOPED_TRACE("B = " + std::to_string(B));
    const std::vector<Plan> ps(all.begin(), all.begin() + long(B));
    std::vector<Record> got;
    const int steps = run_batched(*m, ps, got);
    EXPECT_GE(steps, kDecode + 2);
    double worst_l2 = 0, worst_row = 0;
    for (size_t b = 0; b < B; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      const Record& want = alone[b];
      ASSERT_EQ(got[b].logits.size(), want.logits.size());
      EXPECT_EQ(got[b].rows, want.rows);
      EXPECT_EQ(got[b].greedy, want.greedy);
      std::vector<float> all_got, all_want, hid_got, hid_want;  // the sequence's whole run
      for (size_t a = 0; a < want.logits.size(); ++a) {
        SCOPED_TRACE("action " + std::to_string(a));
        ASSERT_EQ(got[b].logits[a].size(), size_t(want.rows[a] * m->cfg.vocab_size));
        ASSERT_EQ(got[b].hidden[a].size(), want.hidden[a].size());
        // One sequence stepped alone is what a Session does: the same bits.
        if (B == 1) {
          EXPECT_EQ(test::first_difference(got[b].logits[a], want.logits[a]), -1);
          EXPECT_EQ(test::first_difference(got[b].hidden[a], want.hidden[a]), -1);
        }
        const double row = worst_row_rel(got[b].logits[a], want.logits[a], want.rows[a]);
        EXPECT_LE(row, kRowTol);
        worst_row = std::max(worst_row, row);
        all_got.insert(all_got.end(), got[b].logits[a].begin(), got[b].logits[a].end());
        all_want.insert(all_want.end(), want.logits[a].begin(), want.logits[a].end());
        if (!want.hidden[a].empty()) {
          EXPECT_LE(worst_row_rel(got[b].hidden[a], want.hidden[a], int64_t(want.hidden[a].size()) / dim), kRowTol)
              << "hidden states";
          hid_got.insert(hid_got.end(), got[b].hidden[a].begin(), got[b].hidden[a].end());
          hid_want.insert(hid_want.end(), want.hidden[a].begin(), want.hidden[a].end());
        }
      }
      const double l2 = test::rel_l2(all_got, all_want);
      EXPECT_LE(l2, kTol);
      worst_l2 = std::max(worst_l2, l2);
      if (!hid_want.empty()) {
        EXPECT_LE(test::rel_l2(hid_got, hid_want), kTol) << "hidden states";
      }
    }
    std::printf("[ %s, %s ] B=%zu: %d steps; batched vs alone logits: rel L2 %.3g, worst row %.3g\n", name.c_str(),
                GetParam().backend.c_str(), B, steps, worst_l2, worst_row);
  }
}

// Items that keep their logits on the backend (TopLogits) beside items that take them whole, in
// prefill steps (a head pass each) and decode steps (one pass for all): each list is the largest
// of its kept row in logit_order_key's order, the kept row is the one a plain step gives the
// sequence, and the greedy tokens of the lists are those of the whole rows.
TEST_P(EngineBatch, TopLogitsAreTheLargestOfTheirKeptRows) {
  SKIP_UNUSABLE_BACKEND();
  const std::string& name = GetParam().model;
  auto m = load(name, GetParam().backend);
  const int64_t V = m->cfg.vocab_size;
  const std::vector<Plan> ps = plans(base_ids(name, *m));
  Engine listed(*m), plain(*m);
  const std::vector<int64_t> n{6, 0, 1};  // 0: the whole row
  std::vector<std::unique_ptr<Sequence>> a, b;
  for (size_t i = 0; i < n.size(); ++i) a.push_back(listed.new_sequence()), b.push_back(plain.new_sequence());
  std::vector<TopLogits> top(n.size());
  std::vector<std::vector<int32_t>> feed(n.size());
  for (size_t i = 0; i < n.size(); ++i) feed[i] = ps[i].prompt;
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<StepItem> ia, ib;
    for (size_t i = 0; i < n.size(); ++i) {
      top[i].n = n[i];
      ia.push_back(StepItem{a[i].get(), feed[i], {.all_logits = false, .top = n[i] ? &top[i] : nullptr}});
      ib.push_back(StepItem{b[i].get(), feed[i], {.all_logits = false}});
    }
    const auto got = listed.step(ia);
    const auto want = plain.step(ib);
    for (size_t i = 0; i < n.size(); ++i) {
      SCOPED_TRACE("sequence " + std::to_string(i));
      ASSERT_EQ(want[i].size(), size_t(V));
      int32_t tok = argmax(want[i]);
      if (n[i] == 0) {
        ASSERT_EQ(got[i].size(), size_t(V));
        EXPECT_LE(worst_row_rel(got[i], want[i], 1), kRowTol);
      } else {
        EXPECT_TRUE(got[i].empty());
        ASSERT_EQ(top[i].ids.size(), size_t(n[i]));
        std::vector<float> row(static_cast<size_t>(V)), vals(static_cast<size_t>(n[i]));
        std::vector<int32_t> ids(static_cast<size_t>(n[i]));
        listed.kept_logits(top[i], {}, row.data());
        EXPECT_LE(worst_row_rel(row, want[i], 1), kRowTol);
        top_logits_host(row.data(), V, n[i], vals.data(), ids.data());
        EXPECT_EQ(top[i].ids, ids);
        EXPECT_EQ(test::first_difference(top[i].vals, vals), -1);
        std::vector<float> picked(2);
        const std::vector<int32_t> pick{ids.back(), int32_t(V - 1)};
        listed.kept_logits(top[i], pick, picked.data());
        EXPECT_EQ(test::first_difference(picked, {row[size_t(pick[0])], row[size_t(pick[1])]}), -1);
        EXPECT_EQ(top[i].ids[0], tok) << "greedy";
      }
      feed[i].assign(1, tok);
    }
  }
}

// At the scalar level each kernel computes every row on its own whatever the step's other rows,
// so the four sequences stepped together get the bits they get alone: the differences above
// come from the faster levels' paths for few and many rows, not from the batching.
class EngineBatchScalar : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineBatchScalar, SameBitsAsAlone) {
  ScopedCpuIsa scalar(CpuIsa::Scalar);
  auto m = load(GetParam());
  const std::vector<Plan> all = plans(base_ids(GetParam(), *m));
  std::vector<Record> got;
  run_batched(*m, all, got);
  for (size_t b = 0; b < all.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const Record want = run_alone(*m, all[b]);
    EXPECT_EQ(got[b].greedy, want.greedy);
    ASSERT_EQ(got[b].logits.size(), want.logits.size());
    for (size_t a = 0; a < want.logits.size(); ++a) {
      EXPECT_EQ(test::first_difference(got[b].logits[a], want.logits[a]), -1) << "action " << a;
      EXPECT_EQ(test::first_difference(got[b].hidden[a], want.hidden[a]), -1) << "action " << a;
    }
  }
}

// A sequence saved after a prefill and two decode steps, restored into a fresh sequence,
// continues with the original's logits (the same bits); the original rewound to the snapshot
// does so again. Snapshots of another shape are refused, and leave the sequence as it was.
TEST_P(EngineBatch, SaveAndRestore) {
  SKIP_UNUSABLE_BACKEND();
  auto m = load(GetParam().model, GetParam().backend);
  const auto ids = base_ids(GetParam().model, *m);
  Engine engine(*m);
  auto step1 = [&](Sequence& s, std::span<const int32_t> t) {
    const StepItem it{&s, t, {}};
    return engine.step({&it, 1})[0];
  };
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 10), more(ids.begin() + 10, ids.begin() + 13);
  auto s = engine.new_sequence();
  step1(*s, prompt);
  step1(*s, std::span<const int32_t>(&ids[13], 1));
  step1(*s, std::span<const int32_t>(&ids[14], 1));
  const Sequence::Snapshot snap = s->save();
  EXPECT_EQ(snap.tokens, s->tokens());
  EXPECT_EQ(snap.layers.size(), m->layers.size());
  // The continuation: a chunk of three tokens, then two single tokens.
  auto go_on = [&](Sequence& q) {
    std::vector<std::vector<float>> l;
    l.push_back(step1(q, more));
    l.push_back(step1(q, std::span<const int32_t>(&ids[15], 1)));
    l.push_back(step1(q, std::span<const int32_t>(&ids[16], 1)));
    return l;
  };
  const auto c = engine.new_sequence();
  c->restore(snap);
  EXPECT_EQ(c->tokens(), s->tokens());
  EXPECT_EQ(c->pos(), s->pos());
  EXPECT_EQ(c->state_bytes(), s->state_bytes());
  const auto want = go_on(*s);
  const auto got = go_on(*c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(got[i], want[i]), -1) << "step " << i;
  // Rewind the original (its growing buffers shrink back to the snapshot's length).
  s->restore(snap);
  EXPECT_EQ(s->pos(), int64_t(snap.tokens.size()));
  const auto again = go_on(*s);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(again[i], want[i]), -1) << "step " << i;

  // Bad snapshots: a layer missing, a layer with another kind of state. The sequence stays as it was.
  auto r = engine.new_sequence();
  r->restore(snap);
  Sequence::Snapshot fewer = snap;
  fewer.layers.pop_back();
  EXPECT_THROW(r->restore(fewer), Error);
  Sequence::Snapshot other = snap;
  other.layers[0].emplace_back();
  EXPECT_THROW(r->restore(other), Error);
  // A state of fixed size (GatedDeltaNet's: those a fresh sequence already holds) of another size.
  const Sequence::Snapshot fresh = engine.new_sequence()->save();
  for (size_t l = 0; l < snap.layers.size(); ++l)
    for (size_t i = 0; i < snap.layers[l].size(); ++i) {
      if (fresh.layers[l][i].empty()) continue;
      Sequence::Snapshot resized = snap;
      resized.layers[l][i].push_back(0.0f);
      EXPECT_THROW(r->restore(resized), Error) << "layer " << l << " buffer " << i;
    }
  EXPECT_EQ(r->tokens(), snap.tokens);
  const auto after = go_on(*r);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(test::first_difference(after[i], want[i]), -1) << "step " << i;
}

// Refused steps (no items, no tokens, a sequence twice, ids outside the vocabulary, a context
// past max_position_embeddings) change no sequence: both continue as ones that never saw them.
TEST_P(EngineBatch, StepErrorsLeaveStatesUnchanged) {
  SKIP_UNUSABLE_BACKEND();
  auto m = load(GetParam().model, GetParam().backend);
  const auto ids = base_ids(GetParam().model, *m);
  Engine engine(*m);
  auto a = engine.new_sequence(), b = engine.new_sequence();    // see the refused steps
  auto a2 = engine.new_sequence(), b2 = engine.new_sequence();  // do not
  const std::span<const int32_t> pa(ids.data(), 6), pb(ids.data() + 6, 4);
  for (auto [x, y] : {std::pair{a.get(), b.get()}, {a2.get(), b2.get()}}) {
    const StepItem items[] = {{x, pa, {}}, {y, pb, {}}};
    engine.step(items);
  }
  const int32_t V = int32_t(m->cfg.vocab_size);
  const std::vector<int32_t> good{ids[10], ids[11]}, bad_high{ids[10], V}, bad_low{-1}, none;
  const std::vector<int32_t> too_long(size_t(m->cfg.max_seq_len), ids[0]);
  EXPECT_THROW(engine.step({}), Error);
  auto refused = [&](std::initializer_list<StepItem> items) {
    EXPECT_THROW(engine.step(std::vector<StepItem>(items)), Error);
  };
  refused({{a.get(), good, {}}, {a.get(), good, {}}});
  refused({{a.get(), good, {}}, {b.get(), good, {}}, {a.get(), good, {}}});
  refused({{a.get(), good, {}}, {b.get(), bad_high, {}}});
  refused({{b.get(), bad_low, {}}, {a.get(), good, {}}});
  refused({{a.get(), good, {}}, {b.get(), none, {}}});
  refused({{a.get(), too_long, {}}, {b.get(), good, {}}});
  try {
    const StepItem it{a.get(), bad_high, {}};
    engine.step({&it, 1});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a->pos(), 6);
  EXPECT_EQ(b->pos(), 4);
  EXPECT_EQ(a->tokens(), a2->tokens());
  EXPECT_EQ(b->tokens(), b2->tokens());
  std::vector<std::vector<float>> got, want;
  for (auto [x, y, out] : {std::tuple{a.get(), b.get(), &got}, {a2.get(), b2.get(), &want}}) {
    const StepItem items[] = {{x, good, {}}, {y, std::span<const int32_t>(good).first(1), {}}};
    *out = engine.step(items);
  }
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(test::first_difference(got[i], want[i]), -1) << "item " << i;
}

std::string model_name(const ::testing::TestParamInfo<std::string>& info) { return safe_name(info.param); }

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineBatch, ::testing::ValuesIn(on("cpu", kFixtures)), case_name);
INSTANTIATE_TEST_SUITE_P(Variants, EngineBatch, ::testing::ValuesIn(on("cpu", kVariants)), case_name);
INSTANTIATE_TEST_SUITE_P(Demo, EngineBatch, ::testing::ValuesIn(on("cpu", kDemos)), case_name);
// The reference backend: its mixers take several sequences' rows of a step as well.
INSTANTIATE_TEST_SUITE_P(RefFixtures, EngineBatch, ::testing::ValuesIn(on("ref", kFixtures)), case_name);
INSTANTIATE_TEST_SUITE_P(RefVariants, EngineBatch, ::testing::ValuesIn(on("ref", kVariants)), case_name);
INSTANTIATE_TEST_SUITE_P(RefDemo, EngineBatch, ::testing::ValuesIn(on("ref", kDemos)), case_name);
// cuda: decode steps replayed as CUDA graphs after their first two runs.
INSTANTIATE_TEST_SUITE_P(CudaFixtures, EngineBatch, ::testing::ValuesIn(on("cuda", kFixtures)), case_name);
INSTANTIATE_TEST_SUITE_P(CudaVariants, EngineBatch, ::testing::ValuesIn(on("cuda", kVariants)), case_name);
INSTANTIATE_TEST_SUITE_P(CudaDemo, EngineBatch, ::testing::ValuesIn(on("cuda", kDemos)), case_name);
INSTANTIATE_TEST_SUITE_P(Fixtures, EngineBatchScalar, ::testing::ValuesIn(kFixtures), model_name);
INSTANTIATE_TEST_SUITE_P(Variants, EngineBatchScalar, ::testing::ValuesIn(kVariants), model_name);
INSTANTIATE_TEST_SUITE_P(Demo, EngineBatchScalar, ::testing::ValuesIn(kDemos), model_name);

}  // namespace
}  // namespace moeflux
