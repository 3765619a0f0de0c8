// Sub-communicators from split and the dp x tp x pp DeviceMesh; which ranks of a node share
// a key (a GPU).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

#include "core/node_share.hpp"
#include "test_support.hpp"

namespace {
using namespace tessera;
using test::world;

/// World ranks of every member of c, in c's rank order, gathered through c itself.
std::vector<std::int32_t> members(comm::Communicator& c) {
  std::int32_t me = world().rank();
  std::vector<std::int32_t> all(static_cast<std::size_t>(c.size()));
  c.all_gather({&me, 1}, {all.data(), all.size()});
  return all;
}

TEST(Split, ByParityWithReversedKeys) {
  auto& w = world();
  auto sub = w.split(w.rank() % 2, -w.rank(), "parity");
  ASSERT_NE(sub, nullptr);
  std::vector<std::int32_t> expect;
  for (int r = w.size() - 1; r >= 0; --r)
    if (r % 2 == w.rank() % 2) expect.push_back(r);
  EXPECT_EQ(members(*sub), expect);
  EXPECT_EQ(sub->name(), "parity");
  EXPECT_EQ(sub->backend(), w.backend());
  for (int r = 0; r < sub->size(); ++r) EXPECT_EQ(sub->world_rank(r), expect[static_cast<std::size_t>(r)]);
  // A collective on one group does not involve the other.
  double v = w.rank();
  sub->all_reduce({&v, 1});
  double sum = 0;
  for (auto r : expect) sum += r;
  EXPECT_EQ(v, sum);
}

// A peer's watchdog reads an empty name as a rank creating a communicator, so a communicator
// created with an empty name takes one that messages can show.
TEST(Create, AnEmptyNameReadsUnnamed) {
  comm::CommOptions options;
  options.name = "";
  auto c = comm::Communicator::create(world().backend(), options);
  EXPECT_EQ(c->name(), "(unnamed)");
  double v = 1;
  c->all_reduce({&v, 1});
  EXPECT_EQ(v, world().size());
}

TEST(Split, NegativeColorLeavesTheRankOut) {
  auto& w = world();
  auto sub = w.split(w.rank() == 0 ? -1 : 0, w.rank());
  if (w.rank() == 0) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), w.size() - 1);
    EXPECT_EQ(sub->rank(), w.rank() - 1);
  }
}

TEST(Split, NestedSplitsAndSimultaneousUse) {
  auto& w = world();
  auto half = w.split(w.rank() < (w.size() + 1) / 2 ? 0 : 1, w.rank());
  auto single = half->split(half->rank(), 0);
  EXPECT_EQ(single->size(), 1);
  std::vector<int> v(4, 3);
  single->all_reduce({v.data(), 4});
  EXPECT_EQ(v[0], 3);
  auto a = half->all_reduce_async({v.data(), 4});
  int x = 1;
  w.all_reduce({&x, 1});
  a.wait();
  EXPECT_EQ(x, w.size());
  EXPECT_EQ(v[3], 3 * half->size());
}

// Ranks that issue named splits in other orders pair each with the others' split of the same
// number: told on every rank of the parent (its groups were made of the other split's ranks,
// in silence). Groups of one color may have names of their own.
TEST(Split, RanksThatGiveOneGroupDifferentNamesAreTold) {
  auto& w = world();
  const bool odd = w.rank() % 2 == 1;
  if (w.size() > 1) {
    const std::string first = odd ? "b" : "a";
    EXPECT_THROW_WITH(w.split(0, w.rank(), first), MismatchError,
                      " of communicator 'world': the ranks of its group of color 0 gave it different names (world rank "
                      "0 'a', world rank 1 'b'");
  }
  // Where one group's names differ, the ranks of the other groups are told too: they had
  // gone on, and waited for the group's ranks at the parent's next collective.
  if (w.size() > 2) {
    const bool last = w.rank() == w.size() - 1;
    const std::string given = last ? "c" : (w.rank() == 0 ? "a" : "b");
    EXPECT_THROW_WITH(w.split(last ? 1 : 0, w.rank(), given), MismatchError,
                      "the ranks of its group of color 0 gave it different names (world rank 0 'a', world rank 1 'b'");
  }
  // One name per group, a name per color: fine, and the parent is as usable as before.
  auto halves = w.split(w.rank() % 2, w.rank(), odd ? "odd" : "even");
  ASSERT_NE(halves, nullptr);
  EXPECT_EQ(halves->name(), odd ? "odd" : "even");
  int one = 1;
  halves->all_reduce({&one, 1});
  EXPECT_EQ(one, odd ? w.size() / 2 : (w.size() + 1) / 2);
  w.barrier();
}

TEST(DeviceMesh, EveryLayoutOfThisWorldGivesTheDocumentedGroups) {
  auto& w = world();
  const int n = w.size();
  for (int pp = 1; pp <= n; ++pp) {
    for (int tp = 1; tp <= n; ++tp) {
      if (n % (pp * tp) != 0) continue;
      const int dp = n / (pp * tp);
      comm::DeviceMesh mesh(w, dp, tp, pp);
      const auto& c = mesh.coords();
      const int r = w.rank();
      EXPECT_EQ(mesh.rank_of(c), r);
      EXPECT_EQ(c.tp, r % tp);
      EXPECT_EQ(c.dp, (r / tp) % dp);
      EXPECT_EQ(c.pp, r / (tp * dp));
      std::vector<std::int32_t> tp_expect, dp_expect, pp_expect;
      for (int t = 0; t < tp; ++t) tp_expect.push_back(mesh.rank_of({c.dp, t, c.pp}));
      for (int d = 0; d < dp; ++d) dp_expect.push_back(mesh.rank_of({d, c.tp, c.pp}));
      for (int q = 0; q < pp; ++q) pp_expect.push_back(mesh.rank_of({c.dp, c.tp, q}));
      const std::string layout = "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp);
      EXPECT_EQ(members(mesh.tp()), tp_expect) << layout;
      EXPECT_EQ(members(mesh.dp()), dp_expect) << layout;
      EXPECT_EQ(members(mesh.pp()), pp_expect) << layout;
      EXPECT_EQ(mesh.tp().rank(), c.tp);
      EXPECT_EQ(mesh.dp().rank(), c.dp);
      EXPECT_EQ(mesh.pp().rank(), c.pp);
    }
  }
}

TEST(DeviceMesh, LayoutThatDoesNotMatchTheWorldIsAClearError) {
  auto& w = world();
  EXPECT_THROW_WITH(comm::DeviceMesh(w, w.size() + 1, 1, 1), ConfigError,
                    "does not match the " + std::to_string(w.size()) + " ranks");
  EXPECT_THROW_WITH(comm::DeviceMesh(w, w.size(), 2, 2), ConfigError, "dp*tp*pp = ");
  EXPECT_THROW_WITH(comm::DeviceMesh(w, 0, w.size(), 1), ConfigError, "must each be >= 1");
}

// Ranks that ask for different layouts are all refused, naming the first that differs from
// rank 0: they had built groups of other sizes than the mesh's sizes say, in silence, and
// a layout one rank alone refused left the others waiting in the splits for the timeout.
TEST(DeviceMesh, RanksThatAskForDifferentLayoutsAreAllRefused) {
  auto& w = world();
  const int n = w.size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks or more";
  const int first_other = n / 2;
  const bool other = w.rank() >= first_other;
  const std::string all_dp = "dp=" + std::to_string(n) + " x tp=1 x pp=1";
  EXPECT_THROW_WITH(comm::DeviceMesh(w, other ? 1 : n, other ? n : 1, 1), ConfigError,
                    "DeviceMesh on communicator 'world': rank " + std::to_string(first_other) +
                        " asked for dp=1 x tp=" + std::to_string(n) + " x pp=1 where rank 0 asked for " + all_dp +
                        "; every rank must build the same mesh");
  // The last rank's layout is no layout of this world: every rank is told, none waits.
  const bool last = w.rank() == n - 1;
  EXPECT_THROW_WITH(comm::DeviceMesh(w, last ? n + 1 : n, 1, 1), ConfigError,
                    "rank " + std::to_string(n - 1) + " asked for dp=" + std::to_string(n + 1));
  // The same layouts after it build the mesh.
  comm::DeviceMesh mesh(w, n, 1, 1);
  EXPECT_EQ(mesh.dp().size(), n);
}
TEST(NodeShare, CountsTheRanksOfThisNodeWithTheSameKey) {
  // Even ranks pass one key and odd ranks a longer one it begins with (as bus ids of two
  // GPUs would); the expected counts come from the processor names instead of the shared-
  // memory split the function uses.
  const int rank = world().rank(), size = world().size();
  const std::string key = rank % 2 == 0 ? "0000:41:00.0" : "0000:41:00.0.1";
  const auto share = detail::share_on_node(MPI_COMM_WORLD, key);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  int on_node = 0, same = 0;
  for (int r = 0; r < size; ++r) {
    if (std::strncmp(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME, name,
                     MPI_MAX_PROCESSOR_NAME) != 0)
      continue;
    ++on_node;
    same += r % 2 == rank % 2;
  }
  EXPECT_EQ(share.on_node, on_node);
  EXPECT_EQ(share.same, same);
  // One key on every rank: all of the node's ranks share it.
  EXPECT_EQ(detail::share_on_node(MPI_COMM_WORLD, "0000:c1:00.0").same, on_node);
}

}  // namespace
