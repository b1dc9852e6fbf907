// The forward pass: embeddings, decoder layers (mixer + ffn with pre-norms), final norm, head,
// for the rows of every sequence of a step at once.
#include "engine/engine.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/phase_timer.h"

namespace moeflux {

Engine::Engine(const Model& m) : m_(m) { MF_ASSERT(m.backend); }

std::unique_ptr<Sequence> Engine::new_sequence() const {
  auto s = std::make_unique<Sequence>();
  for (const auto& l : m_.layers) {
    s->states_.push_back(l.mixer->make_state(*m_.backend));
    bool fixed = false;
    for (const StateBuffer& b : s->states_.back()->buffers()) fixed = fixed || !b.grows;
    s->fixed_.push_back(fixed);
  }
  return s;
}

std::vector<std::vector<float>> Engine::step(std::span<const StepItem> items) {
  const ModelConfig& c = m_.cfg;
  if (items.empty()) fail("step: no sequences given");
  std::set<const Sequence*> seen;
  for (const StepItem& it : items) {
    const int64_t T = int64_t(it.ids.size()), pos0 = it.seq->pos();
    if (T == 0) fail("forward: no tokens given");
    if (!seen.insert(it.seq).second) fail("step: a sequence is given twice");
    for (size_t i = 0; i < it.ids.size(); ++i)
      if (it.ids[i] < 0 || it.ids[i] >= c.vocab_size)
        fail("token id ", it.ids[i], " at index ", i, " is outside the vocabulary [0, ", c.vocab_size, ")");
    if (pos0 + T > c.max_seq_len) fail("context of ", pos0 + T, " tokens exceeds max_position_embeddings ", c.max_seq_len);
    if (it.opt.top && (it.opt.all_logits || it.opt.top->n < 1))
      fail("step: top logits need n >= 1 and only the last position's logits, got n = ", it.opt.top->n);
  }
  for (const StepItem& it : items) {
    Sequence& s = *it.seq;
    if (!s.broken_) continue;
    const std::vector<int32_t> keep = s.tokens_;  // replay the tokens so far into a clean state
    for (auto& st : s.states_) st->clear();
    s.tokens_.clear();
    try {
      if (!keep.empty()) {
        const StepItem replay{&s, keep, ForwardOptions{false, nullptr}};
        run({&replay, 1});
      }
    } catch (...) {
      s.tokens_ = keep;
      throw;
    }
    s.broken_ = false;
  }
  try {
    return run(items);
  } catch (...) {
    for (const StepItem& it : items) it.seq->broken_ = true;
    throw;
  }
}

namespace {
// Rows of logits whose buffer Engine keeps between steps (decode steps of many sequences).
constexpr int64_t kKeptHeadRows = 64;
}  // namespace

std::vector<std::vector<float>> Engine::run(std::span<const StepItem> items) {
  const ModelConfig& c = m_.cfg;
  Backend& be = *m_.backend;
  const int64_t dim = c.dim, L = int64_t(m_.layers.size());
  // Each item's rows [at[i], at[i] + T_i) of the step's activations.
  std::vector<int64_t> at(items.size() + 1, 0);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < items.size(); ++i) {
    at[i + 1] = at[i] + int64_t(items[i].ids.size());
    ids.insert(ids.end(), items[i].ids.begin(), items[i].ids.end());
  }
  const int64_t R = at.back();
  std::vector<StepSeq> step_seqs(items.size());
  bool host_reads = false;
  for (size_t i = 0; i < items.size(); ++i) {
    step_seqs[i] = StepSeq{items[i].seq->states_, at[i], at[i + 1] - at[i], items[i].seq->pos()};
    host_reads = host_reads || items[i].opt.hidden;
  }
  be.begin_step(StepInfo{ids, step_seqs, host_reads});
  struct EndStep {  // end_step(false) when the step throws
    Backend& be;
    bool ok = false;
    ~EndStep() { be.end_step(ok); }
  } end_step{be};
  auto xb = be.alloc(size_t(R * dim)), hb = be.alloc(size_t(R * dim)), yb = be.alloc(size_t(R * dim));
  const Act x = xb->view(R, dim), h = hb->view(R, dim), y = yb->view(R, dim);
  be.embed(m_.embed, ids, x);
  // Hidden states: entry l of item i is its rows of x after layer l (0: the embeddings).
  auto keep_hidden = [&](int64_t l) {
    for (size_t i = 0; i < items.size(); ++i) {
      std::vector<float>* hid = items[i].opt.hidden;
      if (!hid) continue;
      const int64_t T = at[i + 1] - at[i];
      if (l == 0) hid->assign(size_t((L + 1) * T * dim), 0.0f);
      be.to_host(x.rows_at(at[i], T), hid->data() + l * T * dim);
    }
  };
  keep_hidden(0);
  const float eps = float(c.norm_eps);
  std::vector<SeqRows> seqs(items.size());
  // Each layer's FFN output y joins the residual x in the next norm (one pass instead of two),
  // or at once when the hidden states are kept.
  bool pending = false;
  for (int64_t l = 0; l < L; ++l) {
    const Layer& layer = m_.layers[size_t(l)];
    PhaseTimer pt("layer.norms");
    be.add_rms_norm(x, pending ? &y : nullptr, layer.attn_norm.data(), eps, h);
    pt.next("layer.mixer");
    for (size_t i = 0; i < items.size(); ++i)
      seqs[i] = SeqRows{at[i], at[i + 1] - at[i], items[i].seq->pos(), items[i].seq->states_[size_t(l)].get()};
    layer.mixer->forward(be, h, seqs, y);
    pt.next("layer.norms");
    be.add_rms_norm(x, &y, layer.ffn_norm.data(), eps, h);
    pt.next("layer.ffn");
    layer.ffn->forward(be, h, y);
    pt.next("layer.residual");
    pending = !host_reads;
    if (!pending) be.add(x, y);
    if (l + 1 < L) keep_hidden(l + 1);
  }
  be.add_rms_norm(x, pending ? &y : nullptr, m_.final_norm.data(), eps, x);
  keep_hidden(L);
  // Logits of the rows asked for, one head pass per run of adjacent rows (a decode step of many
  // sequences: one pass, each row of the head read once for all of them).
  const int64_t V = c.vocab_size;
  std::vector<std::vector<float>> out(items.size());
  std::vector<int64_t> first(items.size());
  for (size_t i = 0; i < items.size(); ++i) first[i] = items[i].opt.all_logits ? at[i] : at[i + 1] - 1;
  PhaseTimer pt("lm_head");
  std::vector<float>& rows = head_rows_;
  int pass = 0;
  for (size_t i0 = 0, i1; i0 < items.size(); i0 = i1) {
    for (i1 = i0 + 1; i1 < items.size() && first[i1] == at[i1];) ++i1;  // item i1's rows follow on
    const int64_t n = at[i1] - first[i0];
    int64_t top = 0;
    for (size_t i = i0; i < i1; ++i)
      if (items[i].opt.top) top = std::max(top, std::min(items[i].opt.top->n, V));
    if (top > 0) {  // the pass stays on the backend; items without a TopLogits read their rows
      std::vector<float> vals(size_t(n * top));
      std::vector<int32_t> tids(size_t(n * top));
      be.logits_top(m_.lm_head, x.rows_at(first[i0], n), top, pass, vals.data(), tids.data());
      for (size_t i = i0; i < i1; ++i) {
        const int64_t r = first[i] - first[i0];
        if (TopLogits* t = items[i].opt.top) {
          const size_t k = size_t(std::min(t->n, V));
          t->vals.assign(vals.begin() + r * top, vals.begin() + r * top + k);
          t->ids.assign(tids.begin() + r * top, tids.begin() + r * top + k);
          t->pass = pass, t->row = r;
          continue;
        }
        out[i].resize(size_t((at[i + 1] - first[i]) * V));
        for (int64_t j = 0; j < at[i + 1] - first[i]; ++j) be.kept_logits(pass, r + j, {}, out[i].data() + j * V);
      }
      ++pass;
      continue;
    }
    if (i1 == i0 + 1) {  // straight into the item's logits
      out[i0].resize(size_t(n * V));
      be.logits(m_.lm_head, x.rows_at(first[i0], n), out[i0].data());
      continue;
    }
    if (rows.size() < size_t(n * V)) rows.resize(size_t(n * V));
    be.logits(m_.lm_head, x.rows_at(first[i0], n), rows.data());
    for (size_t i = i0; i < i1; ++i)
      out[i].assign(rows.begin() + (first[i] - first[i0]) * V, rows.begin() + (at[i + 1] - first[i0]) * V);
  }
  if (rows.size() > size_t(kKeptHeadRows * V)) std::vector<float>().swap(rows);  // a large prefill's
  for (const StepItem& it : items) it.seq->tokens_.insert(it.seq->tokens_.end(), it.ids.begin(), it.ids.end());
  end_step.ok = true;
  return out;
}

void Engine::kept_logits(const TopLogits& t, std::span<const int32_t> ids, float* out) const {
  m_.backend->kept_logits(t.pass, t.row, ids, out);
}

int32_t argmax(std::span<const float> logits) {
  MF_ASSERT(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

}  // namespace moeflux
