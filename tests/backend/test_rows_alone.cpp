// A row of x gets the same bits from the cuda backend's matmul alone and in a step of several
// (the small-step kernels sum a row the same way whatever else the step holds), for the
// formats that run on tensor cores in small steps (affine 4-bit, groups of 64 and 128) and for
// one that does not (groups of 32). Engine batches rely on it: a routing near-tie must not tip
// one way alone and the other in a batch. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend_op_cases.h"
#include "backend/registry.h"

namespace moeflux {
namespace {

TEST(CudaRowsAlone, EachRowOfAStepMatchesItsStepOfOne) {
  if (std::string why; !backend_usable("cuda", &why)) GTEST_SKIP() << why;
  BackendOptions o;
  o.name = "cuda";
  const auto b = make_backend(o);
  for (const int group : {32, 64, 128})
    for (const int64_t T : {2, 5, 8, 12}) {
      test::OpRun r(*b, Op::Matmul);
      const int64_t rows = 300, cols = 3 * 256;
      const QWeight w = r.weight(test::affine(4, group), rows, cols, 7);
      const std::vector<float> x = test::randn(size_t(T * cols), 11);
      const QWeight* wp[1] = {&w};
      const Act ys[1] = {r.act(T, rows)};
      r.b.matmul(wp, r.act(T, cols, x), ys);
      const std::vector<float> all = r.host(ys[0]);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        const Act y1[1] = {r.act(1, rows)};
        r.b.matmul(wp, r.act(1, cols, xt), y1);
        const std::vector<float> one = r.host(y1[0]);
        EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * rows, size_t(rows) * sizeof(float)))
            << "q4g" << group << ", row " << t << " of " << T;
      }
    }
}

}  // namespace
}  // namespace moeflux
