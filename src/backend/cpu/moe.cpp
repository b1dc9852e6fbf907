// The CPU's SwiGLU MLP and mixture of experts; tokens of a batch are grouped by expert.
#include "backend/cpu/blocks_cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <span>

#include "core/phase_timer.h"
#include "backend/cpu/batch_buffers.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/group_lanes.h"
#include "backend/ref/ref.h"

namespace moeflux::cpu {

void swiglu(const SwiGlu& s, const float* x, int64_t T, float* out) {
  if (T == 1) return swiglu_expert(s.gate, s.up, s.down, x, out);  // gate + up in one parallel region
  const QWeight *g = &s.gate, *u = &s.up, *d = &s.down;
  swiglu_experts_batch(1, &g, &u, &d, &x, &T, &out);
}

namespace {

// Expert s at a copy of its record (rebased); lanes: the copy's eligible weights are in the
// group-lane layout (MoeSpec::prepared_records).
SwiGlu rebased_cpu(const SwiGlu& s, const uint8_t* from, const uint8_t* to, bool lanes) {
  SwiGlu r = rebased(s, from, to);
  for (QWeight* w : {&r.gate, &r.up, &r.down}) w->group_lanes = lanes && group_lanes_eligible(*w);
  return r;
}

// The calling thread's batch buffers (backend/cpu/batch_buffers.h): the experts' outputs and
// their gathered inputs. Zero-filled vectors per layer were serial time on the calling thread
// (pp128 on 16 threads, 16 layers: 212-246 -> 295-340 t/s; a9dc2a6:docs/benchmarks.md).
thread_local std::vector<float> t_expert_out, t_expert_in;

// Distinct ids of a routing, ascending.
std::vector<int32_t> distinct(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// The router of `r` as a function of one token's logits.
RouteFn router_fn(const RouterSpec& r) {
  switch (r.kind) {
    case RouteKind::SoftmaxTopK:
      return [&r](const float* logits, int32_t* ids, float* w) { route_softmax_topk(logits, r.n_experts, r.k, r.renorm, ids, w); };
    case RouteKind::TopKSoftmax:
      return [&r](const float* logits, int32_t* ids, float* w) { route_topk_softmax_ref(logits, r.n_experts, r.k, ids, w); };
    case RouteKind::SigmoidGrouped:
      return [&r](const float* logits, int32_t* ids, float* w) {
        route_sigmoid_grouped_ref(logits, r.bias.empty() ? nullptr : r.bias.data(), r.grouped, ids, w);
      };
  }
  return nullptr;
}

void prefetch_next(const MoeSpec& m, const float* x, int64_t T);
void add_shared(const MoeSpec& m, const float* x, int64_t T, float* out);

}  // namespace

void expert_to_lanes(const MoeSpec& m, int expert, uint8_t* slot) {
  const SwiGlu s = rebased_cpu(m.experts[size_t(expert)], m.record_base[size_t(expert)], slot, false);
  for (const QWeight* w : {&s.gate, &s.up, &s.down})
    if (group_lanes_eligible(*w)) to_group_lanes_in_place(*w, /*on_pool=*/false);
}

void route_tokens(const MoeSpec& m, const float* x, int64_t T, int32_t* ids, float* weights) {
  PhaseTimer pt("route.router");  // inside the caller's phase
  std::vector<float> logits(static_cast<size_t>(T * m.n_experts));
  matmul(m.router, x, T, logits.data());
  const RouteFn route = router_fn(m.route);
  pt.next("route.topk");
  for (int64_t t = 0; t < T; ++t)
    route(logits.data() + t * m.n_experts, ids + t * m.n_experts_active, weights + t * m.n_experts_active);
}

namespace {

void prefetch_next(const MoeSpec& m, const float* x, int64_t T) {
  if (!m.next || !m.next->source) return;
  const size_t n = size_t(T * m.next->n_experts_active);
  std::vector<int32_t> ids(n);
  std::vector<float> w(n);
  route_tokens(*m.next, x, T, ids.data(), w.data());
  ids = distinct(std::move(ids));
  m.next->source->prefetch(m.next->source_layer, ids);
}
}  // namespace

void moe(const MoeSpec& m, const float* x, int64_t T, float* out, const MoePolicy& policy) {
  const int64_t K = m.n_experts_active;
  std::vector<float> w(static_cast<size_t>(T * K));
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  PhaseTimer pt("moe.route");
  const bool fused = !m.source && T == 1 && K <= kMaxFusedExperts && policy.fused_experts;
  if (fused && merged_route()) {
    // Router, routing and experts in one parallel region; back here with the routing made when
    // the experts cannot run fused.
    pt.next("moe.route+experts");
    thread_local std::vector<const QWeight*> g, u, d;
    g.resize(size_t(m.n_experts)), u.resize(size_t(m.n_experts)), d.resize(size_t(m.n_experts));
    for (int64_t e = 0; e < m.n_experts; ++e)
      g[size_t(e)] = &m.experts[size_t(e)].gate, u[size_t(e)] = &m.experts[size_t(e)].up, d[size_t(e)] = &m.experts[size_t(e)].down;
    if (route_experts_combined(m.router, x, router_fn(m.route), int(K), g.data(), u.data(), d.data(), ids.data(), w.data(), out)) {
      pt.next("moe.combine+shared");
      return add_shared(m, x, T, out);
    }
  } else {
    route_tokens(m, x, T, ids.data(), w.data());
  }
  if (fused) {
    // One token, every expert in memory: experts and combine in one parallel region, the
    // experts in ascending id (the order the sum is defined by), without the batch's grouping.
    std::array<int32_t, kMaxFusedExperts> order;
    std::iota(order.begin(), order.begin() + K, 0);
    std::sort(order.begin(), order.begin() + K, [&](int32_t a, int32_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
    std::array<const QWeight*, kMaxFusedExperts> g, u, d;
    std::array<float, kMaxFusedExperts> wt;
    bool distinct_ids = true;
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = ids[size_t(order[size_t(j)])];
      distinct_ids = distinct_ids && (j == 0 || e != ids[size_t(order[size_t(j - 1)])]);
      const SwiGlu& sw = m.experts[size_t(e)];
      g[size_t(j)] = &sw.gate, u[size_t(j)] = &sw.up, d[size_t(j)] = &sw.down, wt[size_t(j)] = w[size_t(order[size_t(j)])];
    }
    if (distinct_ids) {  // a router's top-k is; the general path below merges repeats
      pt.next("moe.experts");
      swiglu_experts_combined(int(K), g.data(), u.data(), d.data(), x, wt.data(), out);
      pt.next("moe.combine+shared");
      return add_shared(m, x, T, out);
    }
  }
  // Group the batch by expert so that each routed expert's weights are read once per batch.
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(m.n_experts));
  for (int64_t i = 0; i < T * K; ++i) by_expert[size_t(ids[size_t(i)])].emplace_back(i / K, w[size_t(i)]);
  const std::vector<int32_t> used = distinct(ids);
  // Each used expert's output rows go to their own slice of ys, summed in id order at the end.
  std::vector<size_t> at(static_cast<size_t>(m.n_experts), 0);
  size_t total = 0;
  for (int32_t e : used) at[size_t(e)] = total, total += by_expert[size_t(e)].size() * size_t(m.dim);
  pt.next("moe.experts");
  // A batch's outputs in the kept buffer; one token's (K * dim floats) in a vector of its own
  // (decode measured no faster with the kept buffer).
  std::vector<float> ys_token(T == 1 ? total : 0);
  float* ys = T == 1 ? ys_token.data() : grown(t_expert_out, total);
  // Runs experts through one batched op (two parallel regions): one token's, or several
  // tokens' with each expert's tokens gathered.
  auto run = [&](std::span<const int32_t> es, std::span<const SwiGlu> ws) {
    if (es.empty()) return;
    std::vector<const QWeight*> g, u, d;
    std::vector<float*> outs;
    for (size_t j = 0; j < es.size(); ++j)
      g.push_back(&ws[j].gate), u.push_back(&ws[j].up), d.push_back(&ws[j].down), outs.push_back(ys + at[size_t(es[j])]);
    if (T == 1) return swiglu_experts(int(es.size()), g.data(), u.data(), d.data(), x, outs.data());
    // Several tokens: each expert's tokens gathered (experts over the threads).
    std::vector<int64_t> xat(es.size() + 1, 0), tn(es.size());
    for (size_t j = 0; j < es.size(); ++j)
      tn[j] = int64_t(by_expert[size_t(es[j])].size()), xat[j + 1] = xat[j] + tn[j] * m.dim;
    float* xe = grown(t_expert_in, size_t(xat.back()));
    std::vector<const float*> xs;
    for (size_t j = 0; j < es.size(); ++j) xs.push_back(xe + xat[j]);
    for_tokens(int64_t(es.size()), 8 * (xat.back() + 1) / int64_t(es.size()), [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const auto& toks = by_expert[size_t(es[size_t(j)])];
        for (int64_t i = 0; i < tn[size_t(j)]; ++i)
          std::copy_n(x + toks[size_t(i)].first * m.dim, m.dim, xe + xat[size_t(j)] + i * m.dim);
      }
    });
    swiglu_experts_batch(int(es.size()), g.data(), u.data(), d.data(), xs.data(), tn.data(), outs.data());
  };
  if (!m.source) {
    std::vector<SwiGlu> ws;
    for (int32_t e : used) ws.push_back(m.experts[size_t(e)]);
    run(used, ws);
  } else {
    // Windows of experts the cache budget holds; all reads of a window are issued at once,
    // the next layer's prefetch right after the first window's demand reads. What is in
    // memory runs first, then the rest once it has arrived.
    const size_t win = m.source->window(m.source_layer);
    for (size_t i0 = 0; i0 < used.size(); i0 += win) {
      const std::span<const int32_t> part(used.data() + i0, std::min(win, used.size() - i0));
      auto refs = m.source->acquire(m.source_layer, part);
      if (i0 == 0 && m.source->wants_prefetch()) prefetch_next(m, x, T);
      std::vector<bool> done(part.size(), false);
      // The hits run together (one batched op), then the rest: together for one token, each
      // as soon as it arrives for several (a prefill's expert is worth starting early).
      auto run_ready = [&](bool all) {
        std::vector<int32_t> es;
        std::vector<SwiGlu> ws;
        std::vector<size_t> js;
        for (size_t j = 0; j < part.size(); ++j) {
          if (done[j] || (!all && !refs[j].ready())) continue;
          const int32_t e = part[j];
          es.push_back(e), js.push_back(j);
          ws.push_back(rebased_cpu(m.experts[size_t(e)], m.record_base[size_t(e)], refs[j].wait(), m.prepared_records));
          if (all && T > 1) {  // run this arrival now and unpin it
            run(es, ws);
            done[j] = true, refs[j].release();
            es.clear(), ws.clear(), js.clear();
          }
        }
        run(es, ws);
        for (size_t j : js) done[j] = true, refs[j].release();
      };
      run_ready(false);
      run_ready(true);
    }
  }
  pt.next("moe.combine+shared");
  // out[t] = sum of its experts' weighted outputs, added in ascending expert id (the order the
  // result is defined by), token by token over the threads.
  struct Slot {
    size_t off;  // of the expert's output row in ys
    float wt;
  };
  std::vector<Slot> slot(static_cast<size_t>(T * K));
  {
    std::vector<size_t> fill(static_cast<size_t>(T), 0);
    for (int32_t e : used)
      for (size_t j = 0; j < by_expert[size_t(e)].size(); ++j) {
        const auto [t, wt] = by_expert[size_t(e)][j];
        slot[size_t(t * K) + fill[size_t(t)]++] = {at[size_t(e)] + j * size_t(m.dim), wt};
      }
  }
  for_tokens(T, m.dim * 4 * (K + 1), [&](int64_t t0, int64_t t1) {
    std::vector<const float*> yk(static_cast<size_t>(K));
    std::vector<float> wk(static_cast<size_t>(K));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        const Slot& sl = slot[size_t(t * K + k)];
        yk[size_t(k)] = ys + sl.off, wk[size_t(k)] = sl.wt;
      }
      combine_weighted(int(K), yk.data(), wk.data(), out + t * m.dim, 0, m.dim);
    }
  });
  release_if_large(t_expert_out), release_if_large(t_expert_in);
  add_shared(m, x, T, out);
}

namespace {
void add_shared(const MoeSpec& m, const float* x, int64_t T, float* out) {
  if (m.shared.empty()) return;
  std::vector<float> scale(static_cast<size_t>(T), 1.0f);
  if (m.has_shared_gate) {
    matmul(m.shared_gate, x, T, scale.data());
    for (auto& g : scale) g = 1.0f / (1.0f + std::exp(-g));
  }
  std::vector<float> ye(static_cast<size_t>(T * m.dim));
  for (const auto& s : m.shared) {
    swiglu(s, x, T, ye.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < m.dim; ++i) out[t * m.dim + i] += scale[size_t(t)] * ye[size_t(t * m.dim + i)];
  }
}

}  // namespace

}  // namespace moeflux::cpu
