// The op cases of the backend table: op x shapes x weight formats and bit widths, ragged
// sizes, T = 1 and T > 1, stateful mixers over several calls of one sequence or of several at
// once, non-finite inputs. A case builds its weights and inputs from fixed seeds for one
// backend (every weight prepared by it), runs the op and returns its outputs on the host;
// tests/backend/test_backend_ops.cpp compares every registered backend against `ref` on each.
// No gtest here, so that op benchmarks can run the same table.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "util/random_weights.h"

namespace moeflux::test {

// A weight format: Dense (dtype), Affine (bits, group, sdtype) or Fp8Block (block_rows x
// block_cols, sdtype).
struct WSpec {
  WFormat format = WFormat::Dense;
  DType dtype = DType::BF16;
  int bits = 0, group = 0;
  DType sdtype = DType::BF16;
  int block_rows = 0, block_cols = 0;
  std::string name() const;  // "bf16", "q4g64", "q4g64f16", "fp8b128x128"
};
WSpec dense(DType t);
WSpec affine(int bits, int group, DType sdtype = DType::BF16);
WSpec fp8(int block_rows, int block_cols, DType sdtype = DType::BF16);

// Thrown by OpRun when the backend does not run the case's op on a weight's format.
struct Unsupported {
  std::string what;
};

// One case's weights and activations on one backend; owns them until the case is done.
class OpRun {
 public:
  OpRun(Backend& b, Op op) : b(b), op(op) {}
  Backend& b;
  const Op op;
  // A random weight of format f from `seed`, in file order (the bytes a pack holds).
  // Unsupported where b does not run op on it.
  OwnedWeight& raw(const WSpec& f, int64_t rows, int64_t cols, uint32_t seed);
  // The same weight prepared by b (Backend::prepare_weight on the run's own copy); edit, when
  // given, changes the raw weight's bytes first.
  QWeight weight(const WSpec& f, int64_t rows, int64_t cols, uint32_t seed,
                 const std::function<void(OwnedWeight&)>& edit = {});
  // (rows, cols) on b's device holding x (rows * cols floats), or NaN-filled without x.
  Act act(int64_t rows, int64_t cols, const std::vector<float>& x = {});
  std::vector<float> host(Act a) const;
  // Something the case keeps alive until it is done (an ExpertSource, a spec).
  template <typename T>
  T& keep(std::unique_ptr<T> p) {
    T& r = *p;
    kept_.emplace_back(std::shared_ptr<void>(std::move(p)));
    return r;
  }

 private:
  std::deque<OwnedWeight> weights_;
  std::vector<std::unique_ptr<ActBuffer>> acts_;
  std::vector<std::shared_ptr<void>> kept_;
};

struct OpCase {
  std::string name;  // unique; letters, digits and '_'
  Op op;
  double tol;  // relative L2 of the outputs against ref's
  std::function<std::vector<float>(OpRun&)> run;
};

// Tokens of the cases' prefill chunks: past the batch size up to which the CPU runs a matvec
// per token (kSmallBatch), so that its batched kernels run too.
constexpr int64_t kPrefillT = 20;

// Every case, in table order.
std::vector<OpCase> backend_op_cases();

// The mixer and FFN cases (GQA, MLA, GatedDeltaNet, SwiGLU, MoE): backend_op_block_cases.cpp.
void add_block_cases(std::vector<OpCase>& cases);

}  // namespace moeflux::test
