// Every collective, for every dtype, on the rank count ctest launches (1..4) and the
// backend it selects, with buffers in host memory and in device memory (a CUDA build's GPU;
// the device cases skip in a build without one). Inputs are small integers, so every result
// is exact in every dtype (bfloat16 included) and independent of reduction order; expected
// values come from the closed-form math, not from another run.
#include <gtest/gtest.h>

#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

#include "comm/backend.hpp"
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

/// A test buffer: its contents on the host, and, for device cases, a device copy that the
/// collectives use. The host side is filled before an op (push) and checked after it (pull).
template <class T>
struct Array {
  std::vector<T> h;
  View1D<T> d;
  bool device = false;
  Array() = default;
  Array(std::vector<T> values, bool on_device) : h(std::move(values)), device(on_device) {
    if (device) {
      d = View1D<T>("test", h.size());
      push();
    }
  }
  T* data() { return device ? d.data() : h.data(); }
  std::size_t size() const { return h.size(); }
  /// n elements from `offset` on, in the memory the collective should use.
  comm::Buffer buf(std::size_t offset, std::size_t n) {
    return comm::Buffer(data() + offset, n, dtype_of<T>::value,
                        device ? memory_kind_of_space<DeviceMemorySpace>() : MemoryKind::Host);
  }
  comm::Buffer buf() { return buf(0, h.size()); }
  void push() {
    if (device) Kokkos::deep_copy(d, Kokkos::View<const T*, Kokkos::HostSpace>(h.data(), h.size()));
  }
  const std::vector<T>& pull() {
    if (device) Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace>(h.data(), h.size()), d);
    return h;
  }
};

template <class T>
std::vector<T> values_of(std::size_t n, double (*f)(int, std::size_t), int r, std::size_t offset = 0) {
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

/// One test case: an element type and where the buffers live.
template <class T, bool OnDevice>
struct Case {
  using type = T;
  static constexpr bool on_device = OnDevice;
};

template <class C>
class Collectives : public ::testing::Test {
 protected:
  using T = typename C::type;
  void SetUp() override {
    if (C::on_device && !test::device_build()) GTEST_SKIP() << "this build has no device memory";
  }
  /// Buffers of this case's kind.
  static Array<T> array(std::vector<T> values) { return Array<T>(std::move(values), C::on_device); }
  static Array<T> filled(std::size_t n, double (*f)(int, std::size_t), int r, std::size_t offset = 0) {
    return array(values_of<T>(n, f, r, offset));
  }
  static Array<T> reduce_input(ReduceOp op, std::size_t n, int r, std::size_t offset = 0) {
    return filled(n, op == ReduceOp::Prod ? factor : input, r, offset);
  }
  static Array<T> constant(std::size_t n, double v) { return array(std::vector<T>(n, make<T>(v))); }
};
using Cases =
    ::testing::Types<Case<float, false>, Case<double, false>, Case<std::int32_t, false>, Case<std::int64_t, false>,
                     Case<bfloat16, false>, Case<float16, false>, Case<float, true>, Case<double, true>,
                     Case<std::int32_t, true>, Case<std::int64_t, true>, Case<bfloat16, true>, Case<float16, true>>;
class CaseNames {
 public:
  template <class C>
  static std::string GetName(int) {
    return std::string(dtype_name(dtype_of<typename C::type>::value)) + (C::on_device ? "_device" : "_host");
  }
};
TYPED_TEST_SUITE(Collectives, Cases, CaseNames);

TYPED_TEST(Collectives, AllReduceEveryOpOutOfPlaceAndInPlace) {
  using T = typename TestFixture::T;
  auto& c = world();
  for (ReduceOp op : kOps) {
    for (std::size_t n : kCounts) {
      auto in = TestFixture::reduce_input(op, n, c.rank());
      auto out = TestFixture::constant(n, 0);
      if (op == ReduceOp::Avg && !is_floating(dtype_of<T>::value)) {
        EXPECT_THROW_WITH(c.all_reduce(in.buf(), out.buf(), op), ConfigError, "avg is defined for floating-point");
        continue;
      }
      c.all_reduce(in.buf(), out.buf(), op);
      static ReduceOp cur;
      static int size;
      cur = op;
      size = c.size();
      expect_near(
          out.pull(), 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); },
          std::string("all_reduce ") + comm::reduce_op_name(op));
      c.all_reduce(in.buf(), op);  // in place
      expect_near(
          in.pull(), 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); },
          std::string("in-place all_reduce ") + comm::reduce_op_name(op));
    }
  }
}

TYPED_TEST(Collectives, ReduceToEveryRoot) {
  auto& c = world();
  for (int root = 0; root < c.size(); ++root) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod}) {
      for (std::size_t n : kCounts) {
        auto in = TestFixture::reduce_input(op, n, c.rank());
        auto out = TestFixture::constant(n, -1);
        c.reduce(in.buf(), out.buf(), op, root);
        static ReduceOp cur;
        static int size;
        cur = op;
        size = c.size();
        if (c.rank() == root) {
          expect_near(
              out.pull(), 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); }, "reduce");
        } else {
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(value(out.pull()[i]), -1.0) << "reduce wrote a non-root's output";
        }
        // In place at the root.
        c.reduce(in.buf(), in.buf(), op, root);
        if (c.rank() == root)
          expect_near(
              in.pull(), 0, n, [](std::size_t i) { return reduce_expected(cur, size, i); }, "in-place reduce");
      }
    }
  }
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  using T = typename TestFixture::T;
  auto& c = world();
  for (int root = 0; root < c.size(); ++root) {
    for (std::size_t n : kCounts) {
      auto buf = TestFixture::array(c.rank() == root ? values_of<T>(n, input, root) : std::vector<T>(n, make<T>(0)));
      c.broadcast(buf.buf(), root);
      static int cur_root;
      cur_root = root;
      expect_near(
          buf.pull(), 0, n, [](std::size_t i) { return input(cur_root, i); }, "broadcast");
    }
  }
}

TYPED_TEST(Collectives, AllGatherOutOfPlaceAndInPlace) {
  using T = typename TestFixture::T;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  const auto me = static_cast<std::size_t>(c.rank());
  for (std::size_t n : kCounts) {
    auto in = TestFixture::filled(n, input, c.rank());
    auto out = TestFixture::constant(n * p, 0);
    c.all_gather(in.buf(), out.buf());
    std::vector<T> start(n * p, make<T>(0));
    std::copy(in.h.begin(), in.h.end(), start.begin() + static_cast<std::ptrdiff_t>(n * me));
    auto inplace = TestFixture::array(start);
    c.all_gather(inplace.buf(n * me, n), inplace.buf());
    for (int r = 0; r < c.size(); ++r) {
      static int cur;
      cur = r;
      expect_near(
          out.pull(), n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); }, "all_gather");
      expect_near(
          inplace.pull(), n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); },
          "in-place all_gather");
    }
  }
}

TYPED_TEST(Collectives, ReduceScatterSumAndAvgOutOfPlaceAndInPlace) {
  using T = typename TestFixture::T;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  const auto me = static_cast<std::size_t>(c.rank());
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max};
  if (is_floating(dtype_of<T>::value)) ops.push_back(ReduceOp::Avg);
  for (ReduceOp op : ops) {
    for (std::size_t n : kCounts) {
      auto in = TestFixture::filled(n * p, input, c.rank());
      auto out = TestFixture::constant(n, 0);
      c.reduce_scatter(in.buf(), out.buf(), op);
      static ReduceOp cur;
      static int size;
      static std::size_t offset;
      cur = op;
      size = c.size();
      offset = n * me;
      expect_near(
          out.pull(), 0, n, [](std::size_t i) { return reduce_expected(cur, size, offset + i); }, "reduce_scatter");
      c.reduce_scatter(in.buf(), in.buf(n * me, n), op);  // in place
      expect_near(
          in.pull(), n * me, n, [](std::size_t i) { return reduce_expected(cur, size, offset + i); },
          "in-place reduce_scatter");
    }
  }
}

TYPED_TEST(Collectives, ScatterAndGatherAtEveryRoot) {
  using T = typename TestFixture::T;
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  const auto me = static_cast<std::size_t>(c.rank());
  for (int root = 0; root < c.size(); ++root) {
    for (std::size_t n : kCounts) {
      // scatter: the root's block r is input(root, r*n + i)
      auto table = TestFixture::array(c.rank() == root ? values_of<T>(n * p, input, root) : std::vector<T>());
      auto mine = TestFixture::constant(n, 0);
      c.scatter(table.buf(), mine.buf(), root);
      static int cur_root;
      static std::size_t offset;
      cur_root = root;
      offset = n * me;
      expect_near(
          mine.pull(), 0, n, [](std::size_t i) { return input(cur_root, offset + i); }, "scatter");
      if (c.rank() == root) {  // in place at the root: its own block stays
        c.scatter(table.buf(), table.buf(n * me, n), root);
        expect_near(
            table.pull(), n * me, n, [](std::size_t i) { return input(cur_root, offset + i); }, "in-place scatter");
      } else {
        c.scatter(comm::Buffer{}, mine.buf(), root);
      }

      // gather: rank r sends input(r, i); the root gets them in rank order
      auto in = TestFixture::filled(n, input, c.rank());
      auto all = TestFixture::constant(c.rank() == root ? n * p : 0, 0);
      c.gather(in.buf(), all.buf(), root);
      if (c.rank() == root) {
        for (int r = 0; r < c.size(); ++r) {
          static int cur;
          cur = r;
          expect_near(
              all.pull(), n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); }, "gather");
        }
        std::vector<T> start(n * p, make<T>(0));
        std::copy(in.h.begin(), in.h.end(), start.begin() + static_cast<std::ptrdiff_t>(n * me));
        auto inplace = TestFixture::array(start);
        c.gather(inplace.buf(n * me, n), inplace.buf(), root);
        for (int r = 0; r < c.size(); ++r) {
          static int cur;
          cur = r;
          expect_near(
              inplace.pull(), n * static_cast<std::size_t>(r), n, [](std::size_t i) { return input(cur, i); },
              "in-place gather");
        }
      } else {
        c.gather(in.buf(), {static_cast<T*>(nullptr), 0}, root);
      }
    }
  }
}

TYPED_TEST(Collectives, AllToAllExchangesBlocks) {
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  for (std::size_t n : kCounts) {
    // block j of rank r holds input(r, j*n + i); rank r's block j of the output comes from rank j's block r
    auto in = TestFixture::filled(n * p, input, c.rank());
    auto out = TestFixture::constant(n * p, 0);
    c.all_to_all(in.buf(), out.buf());
    for (int j = 0; j < c.size(); ++j) {
      static int src;
      static std::size_t offset;
      src = j;
      offset = n * static_cast<std::size_t>(c.rank());
      expect_near(
          out.pull(), n * static_cast<std::size_t>(j), n, [](std::size_t i) { return input(src, offset + i); },
          "all_to_all");
    }
  }
}

TYPED_TEST(Collectives, SendRecvAroundARing) {
  auto& c = world();
  if (c.size() < 2) GTEST_SKIP() << "point-to-point needs at least 2 ranks";
  const int right = (c.rank() + 1) % c.size(), left = (c.rank() + c.size() - 1) % c.size();
  for (std::size_t n : kCounts) {
    auto out = TestFixture::filled(n, input, c.rank());
    auto in = TestFixture::constant(n, 0);
    auto sent = c.send_async(out.buf(), right, 5);
    c.recv(in.buf(), left, 5);
    sent.wait();
    static int cur;
    cur = left;
    expect_near(
        in.pull(), 0, n, [](std::size_t i) { return input(cur, i); }, "recv");
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

// Nothing has to move on one rank, so no buffer may be staged into the other kind of memory.
// In a build without CUDA, staging a buffer that claims to be device memory would throw
// NotCompiledError, so these ops succeed only if the communicator runs them alone.
TEST(Collectives, OneRankStagesNothing) {
  auto& c = world();
  if (c.size() != 1) GTEST_SKIP() << "a property of one-rank communicators";
  std::vector<float> host(16, 3.0f);
  View1D<float> view("v", 16);
  Kokkos::deep_copy(view, 3.0f);
  comm::Buffer device =
      test::device_build() ? comm::Buffer(view) : comm::Buffer(host.data(), 16, DType::Float32, MemoryKind::Device);
  c.all_reduce(device, ReduceOp::Avg);
  c.all_reduce(device, ReduceOp::Sum);
  c.broadcast(device, 0);
  c.all_gather(device, device);
  c.reduce_scatter(device, device, ReduceOp::Max);
  c.barrier();
  const auto h = test::host_copy(view);
  for (std::size_t i = 0; i < 16; ++i) ASSERT_EQ(test::device_build() ? h(i) : host[i], 3.0f);
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

// MPI's counts are ints: a broadcast, reduce or all-reduce longer than one MPI call takes runs
// as several, every element in place (the limit lowered to 1000 here; 2^31 - 1 otherwise, as
// for a DDP bucket holding one parameter of 46341 x 46341). An op that cannot be cut so says
// what to do.
TEST(Collectives, MpiOpsLongerThanOneCallTakesRunInPieces) {
  if (world().backend() != comm::Backend::Mpi || world().size() == 1)
    GTEST_SKIP() << "the MPI backend's limit, with a peer";
  auto split = world().split(0, world().rank(), "pieces");  // the error at the end fails it
  auto& c = *split;
  struct Limit {
    std::size_t saved = comm::detail::mpi_max_count;
    Limit() { comm::detail::mpi_max_count = 1000; }
    ~Limit() { comm::detail::mpi_max_count = saved; }
  } limit;
  const std::size_t n = 2500;  // two whole pieces and half of one
  const double p = c.size(), me = c.rank();
  std::vector<double> x(n), y(n, -1.0);
  for (std::size_t i = 0; i < n; ++i) x[i] = me + static_cast<double>(i);
  c.all_reduce({x.data(), n}, {y.data(), n}, ReduceOp::Sum);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], p * static_cast<double>(i) + p * (p - 1) / 2) << "element " << i;
  c.all_reduce({x.data(), n}, ReduceOp::Max);  // in place
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], (p - 1) + static_cast<double>(i)) << "element " << i;
  std::vector<double> b(n, me);
  if (c.rank() == 0)
    for (std::size_t i = 0; i < n; ++i) b[i] = 7.0 + static_cast<double>(i);
  c.broadcast({b.data(), n}, 0);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], 7.0 + static_cast<double>(i)) << "element " << i;
  const int root = c.size() - 1;
  std::vector<double> r(n, -1.0), one(n, 1.0);
  c.reduce({one.data(), n}, {r.data(), n}, ReduceOp::Sum, root);
  if (c.rank() == root) {
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], p) << "element " << i;
  }
  std::vector<double> all(n * static_cast<std::size_t>(c.size()));
  EXPECT_THROW_WITH(c.all_gather({x.data(), n}, {all.data(), all.size()}), ConfigError,
                    "2500 elements per rank exceed the MPI backend's limit of 1000 in one call (MPI's counts are "
                    "ints); split the buffer, or use the gloo or nccl backend");
  // A reduce-scatter whose blocks fit one call, but whose whole input does not: Open MPI
  // counts that in an int too.
  const std::size_t block = 600;
  std::vector<double> whole(block * static_cast<std::size_t>(c.size()), 1.0), mine(block);
  EXPECT_THROW_WITH(c.reduce_scatter({whole.data(), whole.size()}, {mine.data(), block}), ConfigError,
                    "its whole input, 600 elements per rank x " + std::to_string(c.size()) +
                        " ranks, exceeds the MPI backend's limit of 1000");
}

/// How many threads of this process run under the scheduling policy `policy` (the 41st field
/// of /proc/self/task/<tid>/stat, counted after the command name, which may hold spaces).
int threads_under(int policy) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));  // field 3 (state) onwards
    std::string field;
    for (int k = 3; k <= 41 && fields >> field; ++k) {
      if (k == 41 && std::stoi(field) == policy) ++n;
    }
  }
  return n;
}

// Gloo's event loop runs under SCHED_BATCH, so that where it shares a core with the thread
// that posts an op it never preempts that thread inside the pair's lock (gloo_backend.cpp
// says why); TESSERA_GLOO_LOOP_SCHED=normal leaves it as it was.
TEST(Gloo, EventLoopThreadRunsUnderSchedBatchUnlessAskedNotTo) {
  if (test::backend_under_test() != comm::Backend::Gloo) GTEST_SKIP() << "the gloo backend's thread";
  auto& c = world();
  std::vector<float> x(4, 1.0f);
  c.all_reduce(comm::Buffer(x.data(), x.size()), ReduceOp::Sum);  // the device exists by now
  EXPECT_EQ(x[0], static_cast<float>(c.size()));
  const char* env = std::getenv("TESSERA_GLOO_LOOP_SCHED");
  const bool normal = env != nullptr && std::string(env) == "normal";
  EXPECT_EQ(threads_under(SCHED_BATCH), normal ? 0 : 1)
      << "Gloo's TCP device has one event-loop thread, and it alone should run under SCHED_BATCH";
}
}  // namespace
