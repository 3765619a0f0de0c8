// Asynchronous operations: several in flight, completion in any wait order, and progress
// made by the communicator itself while the caller computes.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include <tessera/tessera.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using comm::ReduceOp;
using test::world;

TEST(Async, SeveralAllReducesInFlightWaitedInReverseOrder) {
  auto& c = world();
  const int k = 8;
  const std::size_t n = 10000;
  std::vector<std::vector<double>> bufs(k, std::vector<double>(n));
  std::vector<comm::Work> work;
  for (int j = 0; j < k; ++j) {
    for (std::size_t i = 0; i < n; ++i)
      bufs[static_cast<std::size_t>(j)][i] = c.rank() + j + static_cast<double>(i % 3);
    work.push_back(c.all_reduce_async({bufs[static_cast<std::size_t>(j)].data(), n}));
  }
  for (int j = k - 1; j >= 0; --j) work[static_cast<std::size_t>(j)].wait();
  const double ranks = c.size() * (c.size() - 1) / 2.0;
  for (int j = 0; j < k; ++j)
    for (std::size_t i = 0; i < n; i += 997)
      ASSERT_EQ(bufs[static_cast<std::size_t>(j)][i], ranks + c.size() * (j + static_cast<double>(i % 3)))
          << "op " << j;
}

TEST(Async, DifferentOpsInFlightTogether) {
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  // Every element of the reduce-scatter's input differs (rank r sends r + i at i), so a block
  // that lands on the wrong rank, or in the wrong place, is seen.
  std::vector<float> a(64, static_cast<float>(c.rank() + 1)), b(64, c.rank() == 0 ? 7.0f : 0.0f), rs_in(64 * p),
      rs_out(64);
  for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(c.rank()) + static_cast<float>(i);
  std::vector<std::int64_t> g_in(3, c.rank()), g_out(3 * p);
  auto w1 = c.all_reduce_async({a.data(), a.size()}, ReduceOp::Max);
  auto w2 = c.broadcast_async({b.data(), b.size()}, 0);
  auto w3 = c.reduce_scatter_async({rs_in.data(), rs_in.size()}, {rs_out.data(), rs_out.size()});
  auto w4 = c.all_gather_async({g_in.data(), 3}, {g_out.data(), g_out.size()});
  auto w5 = c.barrier_async();
  w5.wait();
  w3.wait();
  w1.wait();
  w4.wait();
  w2.wait();
  EXPECT_EQ(a[0], static_cast<float>(c.size()));  // the Max over ranks 1 .. size
  EXPECT_EQ(b[63], 7.0f);
  const auto me = static_cast<std::size_t>(c.rank());
  for (std::size_t i = 0; i < 64; ++i)  // sum over r of r + (me * 64 + i)
    ASSERT_EQ(rs_out[i], static_cast<float>(p * (p - 1) / 2 + p * (me * 64 + i))) << "element " << i;
  for (std::size_t r = 0; r < p; ++r) EXPECT_EQ(g_out[r * 3 + 2], static_cast<std::int64_t>(r));
}

TEST(Async, BlockingCallAfterAsyncOnesRunsInOrder) {
  auto& c = world();
  std::vector<int> first(100, 1), second(100, 0);
  auto w = c.all_reduce_async({first.data(), first.size()});
  // A blocking op issued while one is in flight queues behind it rather than overtaking.
  second.assign(100, c.rank());
  c.all_reduce({second.data(), second.size()}, ReduceOp::Max);
  EXPECT_TRUE(w.test()) << "the earlier async op must be complete once a later blocking op returned";
  EXPECT_EQ(first[99], c.size());
  EXPECT_EQ(second[0], c.size() - 1);
}

TEST(Async, EmptyWorkIsComplete) {
  comm::Work w;
  EXPECT_TRUE(w.test());
  w.wait();
}

// The all_reduce must finish while the caller computes without calling into Tessera:
// Work::test() only reads a flag, so if no progress thread moved the data, the loop below
// would run to its cap and the assertion would fail.
TEST(Async, LargeAllReduceCompletesWhileTheCallerComputes) {
  auto& c = world();
  const std::size_t n = std::size_t(8) << 20;  // 32 MiB of float
  std::vector<float> grad(n, 1.0f);
  std::vector<float> x(1 << 16, 0.5f);
  c.barrier();
  auto work = c.all_reduce_async({grad.data(), n});
  double sink = 0;
  std::size_t chunks = 0;
  bool done_during_compute = false;
  const auto cap = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < cap) {
    for (float v : x) sink += static_cast<double>(v) * 1.0000001;  // a slice of "backward"
    ++chunks;
    if (work.test()) {
      done_during_compute = true;
      break;
    }
  }
  work.wait();
  EXPECT_TRUE(done_during_compute) << "no progress while the caller computed";
  EXPECT_GT(chunks, 0u);
  EXPECT_GT(sink, 0.0);
  EXPECT_EQ(grad[0], static_cast<float>(c.size()));
  EXPECT_EQ(grad[n - 1], static_cast<float>(c.size()));
}

TEST(Async, SendAndRecvPostedBothWaysDoNotDeadlock) {
  auto& c = world();
  if (c.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const std::size_t n = 1 << 20;  // large enough to need a matching receive
  const int peer = c.rank() ^ 1;
  if (peer >= c.size()) {
    c.barrier();
    return;
  }
  std::vector<double> out(n, c.rank()), in(n, -1);
  auto s = c.send_async({out.data(), n}, peer, 3);
  auto r = c.recv_async({in.data(), n}, peer, 3);
  auto coll = c.barrier_async();  // a collective in flight beside the transfers
  r.wait();
  s.wait();
  coll.wait();
  EXPECT_EQ(in[n - 1], peer);
}
// A valid exchange that needs transfers to complete out of posting order: rank 0 waits
// for its later send while its earlier receive is only matched after a barrier.
TEST(Async, TransfersCompleteInAnyOrder) {
  auto& c = world();
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  int in = -1, out = 7, a = 0, b = 5;
  if (c.rank() == 0) {
    auto r = c.recv_async({&in, 1}, 1, 0);
    auto s = c.send_async({&out, 1}, 1, 1);
    s.wait();
    c.barrier();
    r.wait();
    EXPECT_EQ(in, 5);
  } else if (c.rank() == 1) {
    c.recv({&a, 1}, 0, 1);
    c.barrier();
    c.send({&b, 1}, 0, 0);
    EXPECT_EQ(a, 7);
  } else {
    c.barrier();
  }
}
}  // namespace
