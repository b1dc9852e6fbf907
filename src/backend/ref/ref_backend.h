// The ref backend: every op of the Backend as plain single-threaded loops over the reference
// ops (backend/ref/ref.h, linear_attn.h), token by token. It is the spec the other backends
// are tested against (tests/backend/test_backend_ops.cpp) and runs a model end to end, slowly.
// It reads weights in every format and layout as they are (dequant_row_ref) and prepares none.
#pragma once
#include "backend/backend.h"

namespace moeflux {

class RefBackend final : public Backend {
 public:
  const char* name() const override { return "ref"; }
  Device device() const override { return Device::Host; }
  std::string describe() const override { return "ref (scalar reference ops, 1 thread)"; }
  bool supports(Op op, const QWeight& w) const override { return true; }

  void embed(const QWeight& table, std::span<const int32_t> ids, Act out) override;
  void add_rms_norm(Act x, const Act* y, const float* w, float eps, Act h) override;
  void add(Act x, Act y) override;
  void rope(const RopeTable& t, int64_t head_dim, int64_t pos0, Act x) override;
  void matmul(std::span<const QWeight* const> ws, Act x, std::span<const Act> ys) override;
  // The mixers run sequence by sequence, token by token.
  void gqa_attention(const GqaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void mla_attention(const MlaSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void gated_delta_net(const GdnSpec& a, Act x, std::span<const SeqRows> seqs, Act out) override;
  void swiglu(const SwiGlu& s, Act x, Act out) override;
  void moe(const MoeSpec& m, Act x, Act out) override;
  void logits(const QWeight& head, Act x, float* logits) override;
};

}  // namespace moeflux
