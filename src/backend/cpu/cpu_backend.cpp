// CpuBackend: options applied once, then each op forwards to the CPU block or op.
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_backend.h"

#include <cstdlib>
#include <string>

#include "backend/cpu/blocks_cpu.h"
#include "backend/cpu/ceilings.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/group_lanes.h"
#include "backend/cpu/tuning_switch.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace moeflux {

namespace {

// Decode runs experts and combine fused (swiglu_experts_combined) on 8 threads or more. Paired
// A/Bs (a9dc2a6:docs/benchmarks.md): fused is ~1.5% faster on a 16-thread Intel VM and ~3.7%
// slower on a 2-thread VM, where region hand-offs are cheap and the fused down blocks' short
// runs stream worse; the cut at 8 lies between the two machines. MOEFLUX_FUSED_EXPERTS=0 / 1
// forces it; both give the same bits. The tuning switch MOEFLUX_FUSED_BY_THREADS=0 takes the
// other side of the cut (for paired A/Bs: moeflux bench --alternate).
TuningSwitch fused_by_threads_switch("MOEFLUX_FUSED_BY_THREADS");
bool fused_experts() {
  static const int forced = [] {
    const char* e = std::getenv("MOEFLUX_FUSED_EXPERTS");
    return e && *e ? (std::string(e) == "0" ? 0 : 1) : -1;
  }();
  return forced >= 0 ? forced == 1 : (cpu_threads() >= 8) == fused_by_threads_switch.on();
}

// Repack::Auto: where the CPU level in use reads the layout natively and gains by it: the
// integer matvecs of AVX-512 VNNI, and of AVX2 on AMD CPUs (measured, a9dc2a6:docs/benchmarks.md:
// decode +14-22% on a Zen 1 VM, -4% at an Intel CPU's AVX2 level, where natural rows' per-block
// reduction costs less); MOEFLUX_GROUP_LANES=0 / 1 (an A/B knob, read once) overrides.
bool repack_wanted(Repack r) {
  if (r != Repack::Auto) return r == Repack::On;
  static const char* env = std::getenv("MOEFLUX_GROUP_LANES");
  if (env && (env[0] == '0' || env[0] == '1')) return env[0] == '1';
  return cpu_isa() == CpuIsa::Avx512Vnni || (cpu_isa() == CpuIsa::Avx2 && cpu_is_amd());
}

}  // namespace

CpuBackend::CpuBackend(const CpuOptions& opt) : opt_(opt) {
  if (!opt.isa.empty()) {
    const auto isa = cpu_isa_from_name(opt.isa);
    if (!isa) fail("unknown CPU instruction set '", opt.isa, "' (scalar, avx2, avx512, avx512vnni)");
    set_cpu_isa(*isa);
  }
  if (opt.threads != 0) set_cpu_threads(opt.threads);
}

void CpuBackend::begin_step(const StepInfo& step) {
  bool prompt = false;
  for (const StepSeq& s : step.seqs) prompt = prompt || s.rows > 1;
  set_tile_digits(opt_.fast_prefill && prompt ? 2 : 3);
}

void CpuBackend::end_step(bool) { set_tile_digits(3); }

std::string CpuBackend::describe() const {
  return cat("cpu ", cpu_isa_name(cpu_isa()), ", ", cpu_threads(), " threads");
}

bool CpuBackend::supports(Op, const QWeight&) const { return true; }

std::vector<std::pair<std::string, std::string>> CpuBackend::facts() const {
  return {{"isa", std::string(cpu_isa_name(cpu_isa()))},
          {"threads", std::to_string(cpu_threads())},
          {"threads_running", std::to_string(cpu_thread_pool().running())},
          {"fast_prefill", opt_.fast_prefill && cpu_isa() == CpuIsa::Avx512Vnni ? "1" : "0"}};
}

std::vector<std::string> CpuBackend::ab_switches() const { return TuningSwitch::names(); }

namespace {
TuningSwitch& find_switch(const std::string& name) {
  if (TuningSwitch* s = TuningSwitch::find(name)) return *s;
  std::string all;
  for (const std::string& n : TuningSwitch::names()) all += (all.empty() ? "" : ", ") + n;
  fail("no A/B switch of the cpu backend named ", name, " (there are: ", all, ")");
}
}  // namespace

bool CpuBackend::ab_switch(const std::string& name) const { return find_switch(name).on(); }

void CpuBackend::set_ab_switch(const std::string& name, bool on) { find_switch(name).set(on); }

Backend::Ceilings CpuBackend::measure_ceilings() {
  // One buffer for every measurement: see bench::ReadBuffer.
  if (!read_buffer_) read_buffer_ = std::make_shared<bench::ReadBuffer>(size_t(512) << 20);
  const int threads = cpu_threads();
  return {bench::read_bandwidth_gbs(*static_cast<const bench::ReadBuffer*>(read_buffer_.get()), threads),
          bench::fma_peak_gflops(threads)};
}

bool CpuBackend::rewrites_weights() const { return repack_wanted(opt_.repack); }

bool CpuBackend::prepare_weight(QWeight& w, int64_t n_stack, bool rewrite) const {
  if (!rewrites_weights() || !group_lanes_eligible(w)) return false;
  if (rewrite) {
    QWeight all = w;
    all.rows = w.rows * n_stack;
    to_group_lanes_in_place(all);
  }
  w.group_lanes = true;
  return true;
}

RecordTransform CpuBackend::expert_record_transform(const MoeSpec& moe, bool all_cached) const {
  // Each record is rewritten as it is read, on the reader's thread. Auto does so only when the
  // budget holds every record, so that each is rewritten once: the rewrite (~0.2 ms for a
  // 2.65 MB Qwen3-30B expert on one thread, and on the demand read's path) outweighs what the
  // layout saves a record that is evicted and read again (8 layers: a 10% cache decoded 24%
  // slower rewriting, a warm 100% one 4% faster; a9dc2a6:docs/benchmarks.md).
  if (!repack_wanted(opt_.repack) || !(opt_.repack == Repack::On || all_cached)) return nullptr;
  return [&moe](int expert, uint8_t* record) { cpu::expert_to_lanes(moe, expert, record); };
}

void CpuBackend::embed(const QWeight& table, std::span<const int32_t> ids, Act out) {
  for (size_t t = 0; t < ids.size(); ++t) dequant_row_ref(table, ids[t], out.row(int64_t(t)));
}

void CpuBackend::add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) {
  const int64_t dim = x.cols;
  for_tokens(x.rows, dim * 12, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (y) add_scaled(1.0f, y->row(t), x.row(t), dim);
      rmsnorm(x.row(t), w, dim, eps, h.row(t));
    }
  });
}

void CpuBackend::add(Act x, Act y) { add_scaled(1.0f, y.data, x.data, int64_t(x.size())); }

void CpuBackend::rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) {
  for_tokens(x.rows, x.cols * 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(static_cast<size_t>(t.rot_dim));
    for (int64_t r = r0; r < r1; ++r) {
      rope_angles(t, pos0 + r, cs.data());
      for (int64_t h = 0; h < x.cols / head_dim; ++h) rope_apply(x.row(r) + h * head_dim, t, cs.data());
    }
  });
}

void CpuBackend::matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) {
  std::vector<float*> out;
  for (const Act& y : ys) out.push_back(y.data);
  matmul_multi(int(ws.size()), ws.data(), x.data, x.rows, out.data());
}

void CpuBackend::gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  if (seqs.size() == 1)
    return cpu::gqa_attention(a, x.data, x.rows, seqs[0].pos0, static_cast<KvCache&>(*seqs[0].state), out.data);
  cpu::gqa_attention_seqs(a, x.data, seqs, out.data);
}

// MLA and GatedDeltaNet run sequence by sequence (their projections are not yet shared).
void CpuBackend::mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  for (const SeqRows& s : seqs)
    cpu::mla_attention(a, x.row(s.row0), s.rows, s.pos0, static_cast<LatentCache&>(*s.state), out.row(s.row0));
}

void CpuBackend::gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) {
  for (const SeqRows& s : seqs)
    cpu::gated_delta_net(a, x.row(s.row0), s.rows, static_cast<GdnState&>(*s.state), out.row(s.row0));
}

void CpuBackend::swiglu(const SwiGlu& s, Act x, Act out) { cpu::swiglu(s, x.data, x.rows, out.data); }

void CpuBackend::moe(const MoeSpec& m, Act x, Act out) {
  cpu::moe(m, x.data, x.rows, out.data, cpu::MoePolicy{fused_experts()});
}

void CpuBackend::logits(const QWeight& head, Act x, float* logits) { moeflux::matmul(head, x.data, x.rows, logits); }

}  // namespace moeflux
