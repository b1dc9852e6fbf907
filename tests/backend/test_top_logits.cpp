// Head passes kept on the backend (Backend::logits_top, kept_logits): the order of a top list
// (larger first, equal logits by the lower id, +0 equal to -0, NaN last) against a plain
// sort; on every usable backend, each row's top n equals top_logits_host over the same
// backend's logits() bit for bit (heads of repeated and zero rows for ties, an x with an
// infinity for NaN and infinite logits, vocabularies over several of the GPU's chunks),
// kept_logits reads the pass's rows and tokens, an earlier pass stays while a later one runs,
// and reads of what was not kept are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/backend_op_cases.h"
#include "backend/registry.h"
#include "core/error.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

// The top-list order written out: larger first, then the lower id; NaN after every number.
bool before(float a, int32_t ia, float b, int32_t ib) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(b) && (!std::isnan(a) || ia < ib);
  return a > b || (a == b && ia < ib);
}

TEST(TopLogitsHost, OrderIsLargerFirstThenLowerIdNanLast) {
  const std::vector<float> row{0.0f, -0.0f, 2.5f, NAN, -INFINITY, 2.5f, INFINITY, -1.0f, NAN, 0.0f, -0.0f, 1e-30f};
  const int64_t V = int64_t(row.size());
  std::vector<int32_t> want(row.size());
  std::iota(want.begin(), want.end(), 0);
  std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return before(row[size_t(a)], a, row[size_t(b)], b); });
  for (int64_t n = 1; n <= V; ++n) {
    std::vector<float> vals(static_cast<size_t>(n));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    top_logits_host(row.data(), V, n, vals.data(), ids.data());
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), want.begin())) << "n = " << n;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::memcmp(&vals[size_t(i)], &row[size_t(ids[size_t(i)])], 4), 0);
  }
  EXPECT_EQ(want.front(), 6);  // +inf
  EXPECT_EQ(want[1], 2);       // 2.5 at 2 before 2.5 at 5
  EXPECT_EQ(want.back(), 8);   // the NaNs last, by id
}

std::vector<std::string> usable_backends() {
  std::vector<std::string> v;
  for (const std::string& name : backend_names())
    if (name != "auto" && backend_usable(name)) v.push_back(name);
  return v;
}

// A bf16 head of V rows over `cols` whose rows repeat every 7 from row 40 on and are zero from
// every 13th: ties among equal rows, and at 0.
QWeight tie_head(test::OpRun& r, int64_t V, int64_t cols) {
  return r.weight(test::dense(DType::BF16), V, cols, 77, [&](test::OwnedWeight& w) {
    const size_t row = size_t(cols) * 2;
    uint8_t* d = w.data.data();
    for (int64_t i = 40; i < V; ++i)
      if (i % 13 == 0) std::memset(d + size_t(i) * row, 0, row);
      else std::memcpy(d + size_t(i) * row, d + size_t(i % 7) * row, row);
  });
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(TopLogits, EqualsTheHostOrderOfTheBackendsOwnLogits) {
  for (const std::string& name : usable_backends()) {
    BackendOptions o;
    o.name = name;
    auto b = make_backend(o);
    for (int64_t V : {int64_t(101), int64_t(9000)})
      for (int64_t T : {int64_t(1), int64_t(3)}) {
        test::OpRun r(*b, Op::Logits);
        const int64_t cols = 64;
        const QWeight head = tie_head(r, V, cols);
        std::vector<float> x = test::randn(size_t(T * cols), 5);
        if (T == 3) x[size_t(2 * cols + 3)] = INFINITY;  // row 2: +-inf and NaN (inf * 0) logits
        const Act xa = r.act(T, cols, x);
        std::vector<float> all(static_cast<size_t>(T * V));
        b->logits(head, xa, all.data());
        for (int64_t n : {int64_t(1), int64_t(5), int64_t(40), int64_t(100), int64_t(600), V}) {
          if (n > V) continue;
          const std::string at = name + " V " + std::to_string(V) + " T " + std::to_string(T) + " n " + std::to_string(n);
          std::vector<float> vals(static_cast<size_t>(T * n)), want_vals(static_cast<size_t>(T * n));
          std::vector<int32_t> ids(static_cast<size_t>(T * n)), want_ids(static_cast<size_t>(T * n));
          b->logits_top(head, xa, n, 0, vals.data(), ids.data());
          for (int64_t t = 0; t < T; ++t)
            top_logits_host(all.data() + t * V, V, n, want_vals.data() + t * n, want_ids.data() + t * n);
          EXPECT_EQ(ids, want_ids) << at;
          EXPECT_TRUE(same_bits(vals, want_vals)) << at;
          for (int64_t t = 0; t < T; ++t) {  // the kept rows, whole and by token
            std::vector<float> row(static_cast<size_t>(V)), want(all.begin() + t * V, all.begin() + (t + 1) * V);
            b->kept_logits(0, t, {}, row.data());
            EXPECT_TRUE(same_bits(row, want)) << at << " row " << t;
            const std::vector<int32_t> pick{int32_t(V - 1), 0, 13, int32_t(V / 2), 13};
            std::vector<float> got(pick.size()), exp;
            b->kept_logits(0, t, pick, got.data());
            for (int32_t id : pick) exp.push_back(want[size_t(id)]);
            EXPECT_TRUE(same_bits(got, exp)) << at << " row " << t;
          }
        }
      }
  }
}

TEST(TopLogits, PassesStayUntilReplacedAndReadsOfWhatIsNotKeptFail) {
  for (const std::string& name : usable_backends()) {
    BackendOptions o;
    o.name = name;
    auto b = make_backend(o);
    test::OpRun r(*b, Op::Logits);
    const int64_t V = 5000, cols = 32;
    const QWeight head = tie_head(r, V, cols);
    const Act x0 = r.act(1, cols, test::randn(size_t(cols), 1)), x1 = r.act(2, cols, test::randn(size_t(2 * cols), 2));
    std::vector<float> l0(static_cast<size_t>(V)), l1(static_cast<size_t>(2 * V));
    b->logits(head, x0, l0.data());
    b->logits(head, x1, l1.data());
    std::vector<float> vals(16);
    std::vector<int32_t> ids(16);
    b->logits_top(head, x0, 8, 0, vals.data(), ids.data());
    b->logits_top(head, x1, 8, 1, vals.data(), ids.data());
    std::vector<float> row(static_cast<size_t>(V));
    b->kept_logits(0, 0, {}, row.data());
    EXPECT_TRUE(same_bits(row, l0)) << name;
    b->kept_logits(1, 1, {}, row.data());
    EXPECT_TRUE(same_bits(row, std::vector<float>(l1.begin() + V, l1.end()))) << name;
    float one = 0;
    const int32_t bad = int32_t(V);
    EXPECT_THROW(b->kept_logits(2, 0, {}, row.data()), Error) << name;
    EXPECT_THROW(b->kept_logits(0, 1, {}, row.data()), Error) << name;
    EXPECT_THROW(b->kept_logits(-1, 0, {}, row.data()), Error) << name;
    EXPECT_THROW(b->kept_logits(1, 0, {&bad, 1}, &one), Error) << name;
  }
}

}  // namespace
}  // namespace moeflux
