// Every collective, for every dtype, on the rank count ctest launches (1..4) and the
// backend it selects. Inputs are small integers, so every result is exact in every dtype
// (bfloat16 included) and independent of reduction order; expected values come from the
// closed-form math, not from another run.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using comm::ReduceOp;
using test::world;

template <class T>
T make(double v) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <class T>
double value(T v) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}
template <class T>
double tolerance() {
  if constexpr (std::is_same_v<T, bfloat16>)
    return 1.0 / 128;
  else if constexpr (std::is_same_v<T, float16>)
    return 1.0 / 1024;
  else if constexpr (std::is_same_v<T, float>)
    return 1e-6;
  else
    return 1e-12;
}

/// Rank r's input element i: small positive integers.
double input(int r, std::size_t i) {
  return static_cast<double>((static_cast<std::size_t>(r) + 1) * (i % 5 + 1) % 7 + 1);
}
/// For prod: 1 or 2, so products stay exact.
double factor(int r, std::size_t i) { return 1.0 + static_cast<double>((static_cast<std::size_t>(r) + i) % 2); }

double reduce_expected(ReduceOp op, int size, std::size_t i) {
  double acc = op == ReduceOp::Prod ? 1.0 : (op == ReduceOp::Min ? 1e300 : (op == ReduceOp::Max ? -1e300 : 0.0));
  for (int r = 0; r < size; ++r) {
    const double v = op == ReduceOp::Prod ? factor(r, i) : input(r, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Prod:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
    }
  }
  return op == ReduceOp::Avg ? acc / size : acc;
}

template <class T>
std::vector<T> filled(std::size_t n, double (*f)(int, std::size_t), int r, std::size_t offset = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = make<T>(f(r, i + offset));
  return v;
}

template <class T>
void expect_near(const std::vector<T>& got, std::size_t begin, std::size_t n, double (*expected)(std::size_t),
                 const std::string& what) {
  for (std::size_t i = 0; i < n; ++i) {
    const double e = expected(i);
    ASSERT_NEAR(value(got[begin + i]), e, tolerance<T>() * std::max(1.0, std::fabs(e))) << what << " at element " << i;
  }
}

const std::vector<std::size_t> kCounts = {0, 1, 7, 1031};
const std::vector<ReduceOp> kOps = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};

template <class T>
class Collectives : public ::testing::Test {};
using DTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, bfloat16, float16>;
TYPED_TEST_SUITE(Collectives, DTypes);

template <class T>
std::vector<T> reduce_input(ReduceOp op, std::size_t n, int r, std::size_t offset = 0) {
  return op == ReduceOp::Prod ? filled<T>(n, factor, r, offset) : filled<T>(n, input, r, offset);
}

TYPED_TEST(Collectives, AllReduceEveryOpOutOfPlaceAndInPlace) {
  using T = TypeParam;
  auto& c = world();
  for (ReduceOp op : kOps) {
    for (std::size_t n : kCounts) {
      auto in = reduce_input<T>(op, n, c.rank());
      std::vector<T> out(n);
      if (op == ReduceOp::Avg && !is_floating(dtype_of<T>::value)) {
        EXPECT_THROW_WITH(c.all_reduce({in.data(), n}, {out.data(), n}, op), ConfigError,
                          "avg is defined for floating-point");
        continue;
      }
      c.all_reduce({in.data(), n}, {out.data(), n}, op);
      static ReduceOp cur;
      static int size;
      cur = op;
      size = c.size();
      expect_near(
          out, 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); },
          std::string("all_reduce ") + comm::reduce_op_name(op));
      c.all_reduce({in.data(), n}, op);  // in place
      expect_near(
          in, 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); },
          std::string("in-place all_reduce ") + comm::reduce_op_name(op));
    }
  }
}

TYPED_TEST(Collectives, ReduceToEveryRoot) {
  using T = TypeParam;
  auto& c = world();
  for (int root = 0; root < c.size(); ++root) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod}) {
      for (std::size_t n : kCounts) {
        auto in = reduce_input<T>(op, n, c.rank());
        std::vector<T> out(n, make<T>(-1));
        c.reduce({in.data(), n}, {out.data(), n}, op, root);
        static ReduceOp cur;
        static int size;
        cur = op;
        size = c.size();
        if (c.rank() == root) {
          expect_near(
              out, 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); }, "reduce");
        } else {
          for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(value(out[i]), -1.0) << "reduce wrote a non-root's output";
        }
        // In place at the root.
        c.reduce({in.data(), n}, {in.data(), n}, op, root);
        if (c.rank() == root)
          expect_near(
              in, 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); }, "in-place reduce");
      }
    }
  }
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  using T = TypeParam;
  auto& c = world();
  for (int root = 0; root < c.size(); ++root) {
    for (std::size_t n : kCounts) {
      auto buf = c.rank() == root ? filled<T>(n, input, root) : std::vector<T>(n, make<T>(0));
      c.broadcast({buf.data(), n}, root);
      static int cur_root;
      cur_root = root;
      expect_near(
          buf, 0, n, [](std::size_t i) { return input(cur_root, i); }, "broadcast");
    }
  }
}

TYPED_TEST(Collectives, AllGatherOutOfPlaceAndInPlace) {
  using T = TypeParam;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  for (std::size_t n : kCounts) {
    auto in = filled<T>(n, input, c.rank());
    std::vector<T> out(n * p);
    c.all_gather({in.data(), n}, {out.data(), n * p});
    std::vector<T> inplace(n * p, make<T>(0));
    std::copy(in.begin(), in.end(),
              inplace.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(c.rank())));
    c.all_gather({inplace.data() + n * static_cast<std::size_t>(c.rank()), n}, {inplace.data(), n * p});
    for (int r = 0; r < c.size(); ++r) {
      static int cur;
      cur = r;
      expect_near(
          out, n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); }, "all_gather");
      expect_near(
          inplace, n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); },
          "in-place all_gather");
    }
  }
}

TYPED_TEST(Collectives, ReduceScatterSumAndAvgOutOfPlaceAndInPlace) {
  using T = TypeParam;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  const auto me = static_cast<std::size_t>(c.rank());
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max};
  if (is_floating(dtype_of<T>::value)) ops.push_back(ReduceOp::Avg);
  for (ReduceOp op : ops) {
    for (std::size_t n : kCounts) {
      auto in = filled<T>(n * p, input, c.rank());
      std::vector<T> out(n);
      c.reduce_scatter({in.data(), n * p}, {out.data(), n}, op);
      static ReduceOp cur;
      static int size;
      static std::size_t offset;
      cur = op;
      size = c.size();
      offset = n * me;
      expect_near(
          out, 0, n, [](std::size_t i) { return reduce_expected(cur, size, offset + i); }, "reduce_scatter");
      c.reduce_scatter({in.data(), n * p}, {in.data() + n * me, n}, op);  // in place
      expect_near(
          in, n * me, n, [](std::size_t i) { return reduce_expected(cur, size, offset + i); },
          "in-place reduce_scatter");
    }
  }
}

TYPED_TEST(Collectives, ScatterAndGatherAtEveryRoot) {
  using T = TypeParam;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  const auto me = static_cast<std::size_t>(c.rank());
  for (int root = 0; root < c.size(); ++root) {
    for (std::size_t n : kCounts) {
      // scatter: the root's block r is input(root, r*n + i)
      auto table = c.rank() == root ? filled<T>(n * p, input, root) : std::vector<T>();
      std::vector<T> mine(n);
      c.scatter({table.data(), table.size()}, {mine.data(), n}, root);
      static int cur_root;
      static std::size_t offset;
      cur_root = root;
      offset = n * me;
      expect_near(
          mine, 0, n, [](std::size_t i) { return input(cur_root, offset + i); }, "scatter");
      if (c.rank() == root) {  // in place at the root: its own block stays
        c.scatter({table.data(), table.size()}, {table.data() + n * me, n}, root);
        expect_near(
            table, n * me, n, [](std::size_t i) { return input(cur_root, offset + i); }, "in-place scatter");
      } else {
        c.scatter(comm::Buffer{}, {mine.data(), n}, root);
      }

      // gather: rank r sends input(r, i); the root gets them in rank order
      auto in = filled<T>(n, input, c.rank());
      std::vector<T> all(c.rank() == root ? n * p : 0);
      c.gather({in.data(), n}, {all.data(), all.size()}, root);
      if (c.rank() == root) {
        for (int r = 0; r < c.size(); ++r) {
          static int cur;
          cur = r;
          expect_near(
              all, n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); }, "gather");
        }
        std::vector<T> inplace(n * p, make<T>(0));
        std::copy(in.begin(), in.end(), inplace.begin() + static_cast<std::ptrdiff_t>(n * me));
        c.gather({inplace.data() + n * me, n}, {inplace.data(), n * p}, root);
        for (int r = 0; r < c.size(); ++r) {
          static int cur;
          cur = r;
          expect_near(
              inplace, n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); },
              "in-place gather");
        }
      } else {
        c.gather({in.data(), n}, {static_cast<T*>(nullptr), 0}, root);
      }
    }
  }
}

TYPED_TEST(Collectives, AllToAllExchangesBlocks) {
  using T = TypeParam;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  for (std::size_t n : kCounts) {
    // block j of rank r holds input(r, j*n + i); rank r's block j of the output comes from rank j's block r
    auto in = filled<T>(n * p, input, c.rank());
    std::vector<T> out(n * p);
    c.all_to_all({in.data(), n * p}, {out.data(), n * p});
    for (int j = 0; j < c.size(); ++j) {
      static int src;
      static std::size_t offset;
      src = j;
      offset = n * static_cast<std::size_t>(c.rank());
      expect_near(
          out, n * static_cast<std::size_t>(j), n, [](std::size_t i) { return input(src, offset + i); }, "all_to_all");
    }
  }
}

TYPED_TEST(Collectives, SendRecvAroundARing) {
  using T = TypeParam;
  auto& c = world();
  if (c.size() < 2) GTEST_SKIP() << "point-to-point needs at least 2 ranks";
  const int right = (c.rank() + 1) % c.size(), left = (c.rank() + c.size() - 1) % c.size();
  for (std::size_t n : kCounts) {
    auto out = filled<T>(n, input, c.rank());
    std::vector<T> in(n);
    auto sent = c.send_async({out.data(), n}, right, 5);
    c.recv({in.data(), n}, left, 5);
    sent.wait();
    static int cur;
    cur = left;
    expect_near(
        in, 0, n, [](std::size_t i) { return input(cur, i); }, "recv");
  }
}

TEST(Collectives, BarrierHoldsEveryRankUntilAllArrive) {
  auto& c = world();
  if (c.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  c.barrier();
  const auto start = std::chrono::steady_clock::now();
  if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  c.barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Functional, not a speed check: no rank can leave before rank 0 has slept.
  EXPECT_GE(waited, 0.35);
}

TEST(Collectives, WorksOnKokkosViews) {
  auto& c = world();
  View1D<double> in("in", 5), out("out", 5 * static_cast<std::size_t>(c.size()));
  Kokkos::deep_copy(in, static_cast<double>(c.rank() + 1));
  c.all_gather(in, out);
  auto h = Kokkos::create_mirror_view(out);
  Kokkos::deep_copy(h, out);
  for (int r = 0; r < c.size(); ++r)
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(h(static_cast<std::size_t>(r) * 5 + i), r + 1.0);
}
}  // namespace
