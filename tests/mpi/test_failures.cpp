// Bad arguments, timeouts and cross-rank op checks: each failure is a clear error, raised
// on the ranks it concerns, never a hang or undefined behaviour.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using comm::ReduceOp;
using test::world;

TEST(BadArguments, EachIsAConfigErrorThatSaysWhatIsWrong) {
  auto& c = world();
  const auto p = static_cast<std::size_t>(c.size());
  std::vector<float> a(32), small(32 * p - 1), big(32 * p);
  std::vector<double> d(32);
  std::vector<int> ints(32);

  EXPECT_THROW_WITH(c.all_gather({a.data(), 32}, {small.data(), small.size()}), ConfigError,
                    "all_gather: output has " + std::to_string(small.size()) +
                        " elements, needs size()*input = " + std::to_string(p) + "*32 = " + std::to_string(32 * p));
  EXPECT_THROW_WITH(c.broadcast({a.data(), 32}, c.size()), ConfigError,
                    "broadcast: root " + std::to_string(c.size()) + " is out of range");
  EXPECT_THROW_WITH(c.reduce({a.data(), 32}, {a.data(), 32}, ReduceOp::Sum, -1), ConfigError,
                    "root -1 is out of range");
  EXPECT_THROW_WITH(c.gather({a.data(), 32}, {big.data(), big.size()}, 99), ConfigError, "gather: root 99");
  EXPECT_THROW_WITH(c.all_reduce({a.data(), 32}, {d.data(), 32}), ConfigError,
                    "input is float32 but output is float64");
  EXPECT_THROW_WITH(c.all_reduce({ints.data(), 32}, ReduceOp::Avg), ConfigError,
                    "avg is defined for floating-point dtypes only, not int32");
  EXPECT_THROW_WITH(c.all_reduce({a.data(), 16}, {a.data() + 8, 16}), ConfigError,
                    "input and output overlap; the only in-place form allowed is output == input");
  EXPECT_THROW_WITH(c.all_to_all({big.data(), big.size()}, {big.data(), big.size()}), ConfigError,
                    "all_to_all: input and output overlap; use separate buffers");
  EXPECT_THROW_WITH(c.all_reduce({static_cast<float*>(nullptr), 8}, {a.data(), 8}), ConfigError,
                    "input is null but 8 elements are needed");
  EXPECT_THROW_WITH(c.send({a.data(), 4}, c.rank()), ConfigError, "send: peer is this rank itself");
  EXPECT_THROW_WITH(c.recv({a.data(), 4}, c.size() + 2), ConfigError, "recv: peer " + std::to_string(c.size() + 2));
  EXPECT_THROW_WITH(c.send({a.data(), 4}, (c.rank() + 1) % c.size(), -3), ConfigError, "tag -3 is negative");
  if (c.size() > 1) {
    EXPECT_THROW_WITH(c.reduce_scatter({a.data(), p * 3 + 1}, {a.data(), 3}), ConfigError,
                      "does not divide into " + std::to_string(p) + " equal blocks");
  }
  // A count that wrapped around (end - begin with begin > end): MPI's backend split it into
  // calls of INT_MAX elements that ran past the buffer's end (a crash, or a heap written over).
  const std::size_t wrapped = std::size_t(4) - std::size_t(8);
  EXPECT_THROW_WITH(c.all_reduce({a.data(), wrapped}), ConfigError,
                    "all_reduce: input has " + std::to_string(wrapped) +
                        " elements, more than any buffer holds (a count below 0 converted to an unsigned size?)");
  EXPECT_THROW_WITH(c.broadcast({d.data(), wrapped / 2}, 0), ConfigError, "more than any buffer holds");
  // Fine alone, but size() times it wraps (or passes any buffer): the output's check passed.
  const std::size_t huge = ((std::size_t(1) << 50) / sizeof(float)) / p + 1;
  if (c.size() > 1)
    EXPECT_THROW_WITH(c.all_gather({a.data(), huge}, {big.data(), big.size()}), ConfigError,
                      "all_gather: input has " + std::to_string(huge) + " elements, and size() times that (" +
                          std::to_string(p) + " ranks) is more than any buffer holds");
  Kokkos::View<double**, Kokkos::LayoutRight, HostMemorySpace> m("m", 4, 4);
  auto column = Kokkos::subview(m, Kokkos::ALL(), 1);
  EXPECT_THROW_WITH(c.broadcast(column, 0), ConfigError, "is not contiguous");

  // None of the above reached the backend: the communicator still works.
  EXPECT_TRUE(c.usable());
  int one = 1;
  c.all_reduce({&one, 1});
  EXPECT_EQ(one, c.size());
}

TEST(BadArguments, BackendsNotCompiledInSayHowToGetThem) {
  if (comm::backend_compiled(comm::Backend::Nccl) && comm::backend_compiled(comm::Backend::Gloo))
    GTEST_SKIP() << "every backend is compiled in: a build without Gloo or NCCL checks this";
  if (!comm::backend_compiled(comm::Backend::Nccl)) {
    EXPECT_THROW_WITH(comm::Communicator::create(comm::Backend::Nccl), NotCompiledError,
                      "rebuild with TESSERA_ENABLE_NCCL=ON");
  }
  if (!comm::backend_compiled(comm::Backend::Gloo)) {
    EXPECT_THROW_WITH(comm::Communicator::create(comm::Backend::Gloo), NotCompiledError,
                      "rebuild with TESSERA_ENABLE_GLOO=ON");
  }
}

/// Communicator::create(backend, a communicator named `name`) must raise a MismatchError
/// saying `needle` on this rank, and leave nothing behind: the next creation, the same on
/// every rank, works.
void expect_create_refused(comm::Backend backend, const std::string& name, const std::string& needle) {
  try {
    comm::Communicator::create(backend, test::test_options(name));
    ADD_FAILURE() << "expected a MismatchError";
  } catch (const MismatchError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
  auto again = comm::Communicator::create(world().backend(), test::test_options("again"));
  float one = 1.0f;
  again->all_reduce({&one, 1});
  EXPECT_EQ(one, static_cast<float>(world().size()));
}

TEST(Mismatch, RanksThatCreateDifferentBackendsAreToldOnEveryRank) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  if (!comm::backend_compiled(comm::Backend::Gloo)) GTEST_SKIP() << "needs a second CPU backend";
  const auto mine = w.rank() == 0 ? comm::Backend::Mpi : comm::Backend::Gloo;
  expect_create_refused(mine, "odd",
                        std::string("(backend ") + comm::backend_name(mine) + "): ranks asked for different backends");
}

// Two communicators of one backend created in opposite orders: without the names compared,
// rank 0's 'first' would be paired with rank 1's 'second'.
TEST(Mismatch, RanksThatCreateCommunicatorsInDifferentOrdersAreToldOnEveryRank) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const std::string mine = w.rank() == 0 ? "first" : "second";
  expect_create_refused(w.backend(), mine,
                        "ranks asked for different backends or names (this rank: '" + mine +
                            "'), or created communicators in different orders");
}

/// A fresh communicator over all ranks with a short timeout, for tests that break it.
std::unique_ptr<comm::Communicator> breakable(const std::string& name, std::chrono::milliseconds timeout) {
  auto sub = world().split(0, world().rank(), name);
  sub->set_timeout(timeout);
  return sub;
}

// A rank that cannot reserve the buffers an op is converted through (its memory full: here
// its address space capped) takes its place at the fence as refused, and the others fail
// there at once. Reserved after the fence, that rank failed alone, and the others waited
// inside MPI_Allreduce for it until the watchdog ended their processes.
TEST(Failures, ARankWithoutMemoryToStageAnOpFailsTheOthersAtItsFence) {
  auto& w = world();
  if (w.size() < 2 || w.backend() == comm::Backend::Nccl) GTEST_SKIP() << "needs a fence (MPI, Gloo) and 2 ranks";
  auto sub = breakable("staging", std::chrono::milliseconds(3000));
  constexpr std::size_t n = std::size_t{16} << 20;  // bfloat16, reduced in float32: 64 MB each way
  std::vector<bfloat16> x(n, bfloat16(1.0f));
  sub->all_reduce({x.data(), 8});  // every rank's buffers for small ops exist
  std::optional<test::AddressSpaceCap> cap;
  if (w.rank() == 1) cap.emplace(std::size_t{24} << 20);  // room for less than 64 MB
  const auto all_reduce = [&] { sub->all_reduce({x.data(), n}); };
  if (w.rank() == 1)
    EXPECT_THROW_WITH(all_reduce(), CommError,
                      "all_reduce (16777216 x bfloat16, sum), collective #1 on communicator 'staging': could not "
                      "reserve the buffers it is staged through (out of host memory for a 67108864-byte buffer); the "
                      "other ranks were told at its fence");
  else
    EXPECT_THROW_WITH(all_reduce(), MismatchError, "refused its arguments to this one (its own message says why)");
  cap.reset();
  // The communicator is unusable after it, and says why in this rank's own words.
  if (w.rank() == 1)
    EXPECT_THROW_WITH(sub->barrier(), CommError,
                      "is unusable after an earlier failure (all_reduce (16777216 x bfloat16, sum), collective #1 on "
                      "communicator 'staging': could not reserve the buffers it is staged through");
  w.barrier();
}

TEST(Timeout, BlockingCollectiveNamesTheOpAndTheRankThatNeverCame) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a second rank to stay away";
  auto sub = breakable("flaky", std::chrono::milliseconds(700));
  const int absent = w.size() - 1;
  std::vector<float> x(1024, 1.0f);
  sub->broadcast({x.data(), 8}, 0);  // collective #0 completes everywhere
  if (w.rank() != absent) {
    try {
      sub->all_reduce({x.data(), x.size()});
      ADD_FAILURE() << "expected a TimeoutError";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("all_reduce (1024 x float32, sum), collective #1 on communicator 'flaky'"), std::string::npos)
          << m;
      EXPECT_NE(m.find("timed out after 0.7 s"), std::string::npos) << m;
      // The absent rank waits in the barrier below, on another communicator.
      EXPECT_NE(m.find("Ranks that did not arrive: " + std::to_string(absent) + " (alive and waiting in barrier #"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find(" on communicator 'world', not in a collective here; its last op here was a broadcast, of 1 "
                       "collectives issued)"),
                std::string::npos)
          << m;
    }
    EXPECT_FALSE(sub->usable());
    EXPECT_THROW_WITH(sub->barrier(), CommError, "is unusable after an earlier failure");
  }
  w.barrier();
}

// On a communicator whose ranks are not the job's (a data- or tensor-parallel group), a rank
// is named by both numbers: its number there is another process's world rank.
TEST(Timeout, RanksOfASubCommunicatorAreNamedWithTheirWorldRank) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a second rank to stay away";
  auto sub = w.split(0, w.size() - 1 - w.rank(), "reversed");  // its rank r is world rank size - 1 - r
  sub->set_timeout(std::chrono::milliseconds(700));
  const int absent_world = w.size() - 1, absent_local = 0;
  std::vector<float> x(16, 1.0f);
  if (w.rank() != absent_world) {
    try {
      sub->all_reduce({x.data(), x.size()});
      ADD_FAILURE() << "expected a TimeoutError";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("Ranks that did not arrive: " + std::to_string(absent_local) + " (world rank " +
                       std::to_string(absent_world) + "; alive and waiting in barrier #"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("on communicator 'world', has issued no op here)"), std::string::npos) << m;
      // The ranks that arrived, each with its world rank at its place: "1, 2 (world ranks 1, 0)".
      std::string locals, worlds;
      bool differ = false;
      for (int r = 0; r < sub->size(); ++r) {
        if (r == absent_local) continue;
        const int world_rank = w.size() - 1 - r;
        locals += (locals.empty() ? "" : ", ") + std::to_string(r);
        worlds += (worlds.empty() ? "" : ", ") + std::to_string(world_rank);
        differ = differ || world_rank != r;
      }
      const bool several = sub->size() > 2;
      EXPECT_NE(m.find("Ranks that arrived: " + locals +
                       (differ ? std::string(several ? " (world ranks " : " (world rank ") + worlds + ")" : "") + "."),
                std::string::npos)
          << m;
    }
  }
  w.barrier();
}

// A rank that is waiting in a collective on another communicator is said to be: over a
// dp x tp mesh, the rank missing from a tensor-parallel all-reduce is often stuck in a
// data-parallel one. From 3 ranks on, "busy" is two groups of one name (even and odd ranks,
// as a mesh's data-parallel groups are), so ranks of the other group hold another
// communicator by that name and must still be told which one the busy rank waits in.
TEST(Timeout, ARankBusyOnAnotherCommunicatorIsSaidToBe) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a second rank to be busy elsewhere";
  auto busy = w.split(w.size() >= 3 ? w.rank() % 2 : 0, w.rank(), "busy");
  busy->set_timeout(std::chrono::seconds(20));
  const int elsewhere = w.size() - 1;
  // The ranks that time out, which let the busy rank go only once each has its error: a rank
  // of its group whose timeout came first let it go on to the next op before the slower ones
  // asked where it was (4 ranks on 2 cores: "waiting in barrier #18 on communicator 'world'").
  auto others = w.split(w.rank() == elsewhere ? 1 : 0, w.rank(), "others");
  others->set_timeout(std::chrono::seconds(20));
  auto flaky = breakable("waited_for", std::chrono::milliseconds(700));
  std::vector<float> x(16, 1.0f), y(16, 1.0f);
  flaky->broadcast({x.data(), 4}, 0);  // collective #0 completes everywhere
  if (w.rank() == elsewhere) {
    busy->all_reduce({y.data(), y.size()});  // waits here until the others come
  } else {
    EXPECT_THROW_WITH(flaky->all_reduce({x.data(), x.size()}), TimeoutError,
                      "Ranks that did not arrive: " + std::to_string(elsewhere) +
                          " (alive and waiting in all_reduce #0 on communicator 'busy', not in a collective here; "
                          "its last op here was a broadcast, of 1 collectives issued)");
    others->barrier();
    busy->all_reduce({y.data(), y.size()});  // lets the busy rank go
  }
  w.barrier();
}

// A pipeline stage waiting for its neighbour is in no collective: a peer whose collective
// timed out is told which send or receive it waits in, and on which communicator, whether
// the wait is a blocking receive or a Work's.
TEST(Timeout, ARankWaitingInAReceiveIsSaidToBe) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a second rank to wait for a message";
  auto stage = w.split(0, w.rank(), "stage");
  stage->set_timeout(std::chrono::seconds(20));
  const int waiting = w.size() - 1;
  // The others, to release the waiting rank only once every one of them has its message.
  auto others = w.split(w.rank() == waiting ? -1 : 0, w.rank(), "others");
  for (bool async : {false, true}) {
    auto flaky = breakable(async ? "waited_for_async" : "waited_for", std::chrono::milliseconds(700));
    std::vector<float> x(16, 1.0f), y(16, 1.0f);
    flaky->broadcast({x.data(), 4}, 0);  // collective #0 completes everywhere
    if (w.rank() == waiting) {
      if (async)
        stage->recv_async({y.data(), y.size()}, 0, 5).wait();
      else
        stage->recv({y.data(), y.size()}, 0, 5);  // until rank 0 sends, after its timeout
    } else {
      SCOPED_TRACE(async ? "the waiting rank in Work::wait" : "the waiting rank in recv");
      EXPECT_THROW_WITH(flaky->all_reduce({x.data(), x.size()}), TimeoutError,
                        "Ranks that did not arrive: " + std::to_string(waiting) +
                            " (alive and waiting in a receive from world rank 0 on communicator 'stage', not in a "
                            "collective here; its last op here was a broadcast");
      others->barrier();
      if (w.rank() == 0) stage->send({x.data(), x.size()}, waiting, 5);  // lets the waiting rank go
    }
    w.barrier();
  }
}

TEST(Timeout, AsyncWaitRaisesTheSameError) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a second rank to stay away";
  auto sub = breakable("flaky_async", std::chrono::milliseconds(500));
  std::vector<double> x(64, 1.0);
  if (w.rank() != 0) {
    auto work = sub->all_reduce_async({x.data(), x.size()});
    EXPECT_THROW_WITH(work.wait(), TimeoutError, "Ranks that did not arrive: 0 (alive and waiting in barrier #");
  }
  w.barrier();
}

// A communicator destroyed with a receive still posted, whose sender will never send (a
// pipeline's receive posted ahead, when a failure unwinds the step), stops it: it used to
// wait out the receive's deadline, here 60 s.
TEST(Timeout, DestroyingACommunicatorStopsItsPostedReceives) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a peer that never sends";
  std::vector<float> y(16);
  const auto start = std::chrono::steady_clock::now();
  {
    auto sub = breakable("abandoned", std::chrono::seconds(60));
    if (w.rank() == 0) (void)sub->recv_async({y.data(), y.size()}, 1, 5);
    // The others keep their ends open until rank 0 has destroyed its communicator: a backend
    // that waits for the peer to close its connections (Gloo did) would wait the 60 s.
    if (w.rank() != 0) w.barrier();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0)
      << "seconds to destroy a communicator with a receive posted (its timeout: 60 s)";
  if (w.rank() == 0) w.barrier();
  w.barrier();
}

TEST(Timeout, RecvFromASilentPeerNamesThePeer) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks";
  auto sub = breakable("quiet", std::chrono::milliseconds(400));
  if (w.rank() == 0) {
    std::vector<int> x(16);
    EXPECT_THROW_WITH(sub->recv({x.data(), 16}, 1, 9), TimeoutError,
                      "recv (16 x int32, from rank 1, tag 9) on communicator 'quiet' [");
    EXPECT_THROW_WITH(sub->recv({x.data(), 16}, 1, 9), CommError, "is unusable after an earlier failure");
  }
  w.barrier();
}

// A send whose receiver never posts: large enough that no transport can complete it on its
// own (no eager copy), so only the deadline ends it. The error names the peer, and dropping
// the abandoned send (which MPI cannot cancel) neither hangs nor lets it complete later.
TEST(Timeout, SendToASilentPeerNamesThePeer) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> x(1 << 20, 1.0f);  // 4 MiB
  {
    auto sub = breakable("deaf", std::chrono::milliseconds(400));
    if (w.rank() == 0) {
      try {
        sub->send({x.data(), x.size()}, 1, 7);
        ADD_FAILURE() << "expected a TimeoutError";
      } catch (const TimeoutError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("send (1048576 x float32, to rank 1, tag 7) on communicator 'deaf' ["), std::string::npos)
            << m;
        EXPECT_NE(m.find("waiting for the receiver. Peer: rank 1 (alive"), std::string::npos) << m;
      }
      EXPECT_THROW_WITH(sub->send({x.data(), 16}, 1, 7), CommError, "is unusable after an earlier failure");
      EXPECT_THROW_WITH(sub->send_async({x.data(), 16}, 1, 8), CommError, "is unusable after an earlier failure");
    }
    w.barrier();  // rank 1 keeps its end open until then
  }               // destroyed with the send still unmatched
  {
    auto sub = breakable("deaf_async", std::chrono::milliseconds(400));
    if (w.rank() == 0) {
      auto work = sub->send_async({x.data(), x.size()}, 1, 7);
      EXPECT_THROW_WITH(work.wait(), TimeoutError, "send (1048576 x float32, to rank 1, tag 7)");
    }
    w.barrier();
  }
  w.barrier();
}

// A send and a receive of different sizes (tag 3, rank 0 to rank 1). MPI tells at once on
// the receiving rank, whose buffer would be filled only in part or refused, and its send
// completes. Gloo matches on the size, so both time out, each naming the other's size: it
// used to end the receiving process from its own thread when the send was the larger. The
// side that posts first (async, before a barrier) has the longer timeout, so that each side
// asks its peer only after the peer has posted, however loaded the machine.
TEST(Mismatch, ASendAndAReceiveOfDifferentSizesAreTold) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks";
  if (w.backend() == comm::Backend::Nccl) GTEST_SKIP() << "NCCL cannot tell the size a send carried";
  const bool mpi = w.backend() == comm::Backend::Mpi;
  constexpr auto kFirst = std::chrono::milliseconds(3000), kSecond = std::chrono::milliseconds(1000);
  struct Case {
    std::size_t sent, posted;
    bool receiver_first;  // the receive is posted first (async); else the send is
  };
  for (const Case c : {Case{4, 8, false}, Case{8, 4, true}}) {
    SCOPED_TRACE("send " + std::to_string(c.sent) + ", receive " + std::to_string(c.posted) +
                 (c.receiver_first ? ", the receive first" : ", the send first"));
    auto sub = breakable("sizes", kSecond);
    std::vector<float> x(8, -1.0f);
    const std::vector<float> out(c.sent, 2.0f);
    const bool first = (w.rank() == 1) == c.receiver_first;
    if (w.rank() < 2 && first) sub->set_timeout(kFirst);
    const auto send = [&] { return sub->send_async({out.data(), c.sent}, 1, 3); };
    const auto receive = [&] { return sub->recv_async({x.data(), c.posted}, 0, 3); };
    comm::Work posted;
    if (w.rank() < 2 && first) posted = w.rank() == 0 ? send() : receive();
    w.barrier();
    if (w.rank() < 2 && !first) posted = w.rank() == 0 ? send() : receive();
    const std::string mine = std::to_string(4 * (w.rank() == 0 ? c.sent : c.posted)),
                      theirs = std::to_string(4 * (w.rank() == 0 ? c.posted : c.sent));
    if (w.rank() < 2 && mpi) {
      if (w.rank() == 0)
        EXPECT_NO_THROW(posted.wait());
      else
        EXPECT_THROW_WITH(posted.wait(), CommError,
                          "recv (" + std::to_string(c.posted) +
                              " x float32, from rank 0, tag 3) on communicator 'sizes' [mpi, " +
                              std::to_string(w.size()) + " ranks]: the send it matched carried " +
                              (c.sent < c.posted ? "16 bytes (4 x float32), where this receive takes 32"
                                                 : "more than 16 bytes, where this receive takes 16"));
    } else if (w.rank() < 2 && !first) {
      // Gloo: the side that posted second times out first, and names the first's size.
      EXPECT_THROW_WITH(posted.wait(), TimeoutError,
                        w.rank() == 0 ? "Its last receive here, from this rank with tag 3, is of " + theirs +
                                            " bytes where this send is of " + mine
                                      : "Its last send here, to this rank with tag 3, is of " + theirs +
                                            " bytes where this recv is of " + mine);
    } else if (w.rank() < 2) {
      // The other side's transfer then ends as the failed communicator closes its connections
      // (or by its own, longer, timeout, on a machine slow enough).
      try {
        posted.wait();
        ADD_FAILURE() << "the transfer completed";
      } catch (const CommError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(
            what.find("failed: the peer closed its connection, as it does when its communicator is destroyed") !=
                std::string::npos ||
            what.find("timed out after 3 s") != std::string::npos)
            << what;
      }
    }
    w.barrier();
  }
  // MPI's blocking receive reads the size through another path (the caller's wait).
  for (const auto& [sent, posted] : {std::pair<std::size_t, std::size_t>{4, 8}, {8, 4}}) {
    if (!mpi) break;
    auto sub = breakable("sizes", kFirst);
    std::vector<float> x(8, -1.0f);
    const std::vector<float> out(sent, 2.0f);
    if (w.rank() == 0) {
      EXPECT_NO_THROW(sub->send({out.data(), sent}, 1, 3));  // small enough to go eagerly
    } else if (w.rank() == 1) {
      EXPECT_THROW_WITH(sub->recv({x.data(), posted}, 0, 3), CommError,
                        sent < posted ? "carried 16 bytes (4 x float32), where this receive takes 32"
                                      : "carried more than 16 bytes, where this receive takes 16");
    }
    w.barrier();
    // The receiver's communicator failed there alone: the others, waiting for it in the
    // next collective, are told so (it was "alive, not in a collective here; its last op here
    // was a recv", as if it had skipped one).
    if (sent > posted) {
      sub->set_timeout(std::chrono::milliseconds(1000));
      if (w.rank() == 1)
        EXPECT_THROW_WITH(sub->barrier(), CommError, "is unusable after an earlier failure");
      else
        EXPECT_THROW_WITH(sub->barrier(), TimeoutError,
                          "Ranks that did not arrive: 1 (alive, but this communicator failed there after an error of "
                          "its own (that rank's message says which), and runs no more ops)");
      w.barrier();
    }
  }
}

// Without the check mode, the fence before every MPI and Gloo collective still compares a
// hash of (op, count, dtype, root, reduce op, collective number): ranks that disagree get a
// MismatchError, all of them, before any data moves, instead of a hang (MPI) or an abort (Gloo).
TEST(Mismatch, DifferentOpsRootsOrCountsAreAnErrorOnEveryRankWithoutTheCheckMode) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  if (w.backend() == comm::Backend::Nccl) GTEST_SKIP() << "NCCL has no fence: a mismatch is its timeout";
  std::vector<float> x(16, 1.0f);
  const std::string hint = "TESSERA_COMM_CHECK=1 names which rank called what";
  {
    auto sub = breakable("ops", std::chrono::seconds(30));
    if (w.rank() == 0)
      EXPECT_THROW_WITH(sub->all_reduce({x.data(), 16}), MismatchError,
                        "collective #0: this rank called all_reduce (16 x float32, sum)");
    else
      EXPECT_THROW_WITH(sub->broadcast({x.data(), 16}, 0), MismatchError, hint);
    EXPECT_FALSE(sub->usable());
  }
  {
    auto sub = breakable("roots", std::chrono::seconds(30));
    EXPECT_THROW_WITH(sub->broadcast({x.data(), 16}, w.rank() == 0 ? 0 : 1), MismatchError, hint);
  }
  {
    auto sub = breakable("counts", std::chrono::seconds(30));
    std::vector<float> y(16, 5.0f);
    EXPECT_THROW_WITH(sub->all_reduce({y.data(), w.rank() == 0 ? 16u : 12u}), MismatchError, hint);
    EXPECT_EQ(y[0], 5.0f) << "no data may move once the ranks disagree";
  }
  w.barrier();
}

// Arguments that only some ranks refuse: an all_gather "in place" at this rank's own block
// offset 0, right on rank 0 and overlapping on every other rank, and a gather whose output is
// too small only on its root. The ranks that refused raise their ConfigError; the others, at
// the fence, a MismatchError at once, where they waited out the whole timeout (600 s by
// default) for ranks that would never come.
TEST(BadArguments, ArgumentsSomeRanksRefuseFailTheOthersAtOnce) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a rank that accepts and one that refuses";
  if (w.backend() == comm::Backend::Nccl) GTEST_SKIP() << "NCCL has no fence: the others meet their timeout";
  const auto p = static_cast<std::size_t>(w.size());
  std::vector<float> all(32 * p, 1.0f);
  {
    auto sub = breakable("refused_all_gather", std::chrono::seconds(10));
    if (w.rank() == 0) {
      EXPECT_THROW_WITH(sub->all_gather({all.data(), 32}, {all.data(), all.size()}), MismatchError,
                        "or refused its arguments to this one");
    } else {
      EXPECT_THROW_WITH(sub->all_gather({all.data(), 32}, {all.data(), all.size()}), ConfigError,
                        "all_gather: input and output overlap");
    }
    EXPECT_FALSE(sub->usable());
  }
  {
    auto sub = breakable("refused_gather", std::chrono::seconds(10));
    std::vector<float> mine(32, 2.0f), short_out(32 * p - 1);
    if (w.rank() == 1) {
      EXPECT_THROW_WITH(sub->gather({mine.data(), 32}, {short_out.data(), short_out.size()}, 1), ConfigError,
                        "gather: output has");
    } else {
      EXPECT_THROW_WITH(sub->gather({mine.data(), 32}, {short_out.data(), short_out.size()}, 1), MismatchError,
                        "or refused its arguments to this one");
    }
  }
  {
    // The same in the check mode, which gathers every rank's op: the others name the rank
    // that refused.
    auto sub = breakable("refused_checked", std::chrono::seconds(10));
    sub->set_check(true);
    if (w.rank() == 0) {
      EXPECT_THROW_WITH(sub->all_gather({all.data(), 32}, {all.data(), all.size()}), MismatchError,
                        "and refused its arguments");
    } else {
      EXPECT_THROW_WITH(sub->all_gather({all.data(), 32}, {all.data(), all.size()}), ConfigError,
                        "all_gather: input and output overlap");
    }
  }
  {
    // Behind async ops still queued: the refused one takes its place after them, and they
    // complete on every rank.
    auto sub = breakable("refused_queued", std::chrono::seconds(10));
    std::vector<float> a(4096, 1.0f), b(4096, 2.0f);
    auto first = sub->all_reduce_async({a.data(), a.size()});
    auto second = sub->all_reduce_async({b.data(), b.size()});
    if (w.rank() == 0) {
      EXPECT_THROW_WITH(sub->all_gather({all.data(), 32}, {all.data(), all.size()}), MismatchError,
                        "or refused its arguments to this one");
    } else {
      EXPECT_THROW_WITH(sub->all_gather_async({all.data(), 32}, {all.data(), all.size()}), ConfigError,
                        "all_gather: input and output overlap");
    }
    first.wait();
    second.wait();
    EXPECT_EQ(a[4095], static_cast<float>(w.size()));
    EXPECT_EQ(b[0], 2.0f * static_cast<float>(w.size()));
  }
  {
    // Refused alike on every rank, the communicator stays usable, as before.
    auto sub = breakable("refused_alike", std::chrono::seconds(10));
    EXPECT_THROW_WITH(sub->broadcast({all.data(), 8}, w.size()), ConfigError, "root");
    EXPECT_TRUE(sub->usable());
    int one = 1;
    sub->all_reduce({&one, 1});
    EXPECT_EQ(one, w.size());
  }
  w.barrier();
}

TEST(Timeout, SplitThatARankNeverCallsNamesIt) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a second rank to stay away";
  auto sub = breakable("parent", std::chrono::milliseconds(500));
  const int absent = w.size() - 1;
  if (w.rank() != absent) {
    try {
      sub->split(0, w.rank());
      ADD_FAILURE() << "expected a TimeoutError";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("split, collective #0 on communicator 'parent'"), std::string::npos) << m;
      EXPECT_NE(m.find("Ranks that did not arrive: " + std::to_string(absent)), std::string::npos) << m;
    }
  }
  w.barrier();
}

TEST(BadArguments, AnUnknownReduceOpOrANegativeTimeoutIsRefusedAndHarmsNothing) {
  auto& c = world();
  std::vector<float> x(4, 1.0f);
  EXPECT_THROW_WITH(c.all_reduce({x.data(), 4}, static_cast<ReduceOp>(17)), ConfigError,
                    "reduce op 17 is not one of sum, prod, min, max, avg");
  EXPECT_THROW_WITH(c.set_timeout(std::chrono::milliseconds(-1)), ConfigError, "-1 ms is negative");
  EXPECT_TRUE(c.usable());
  c.all_reduce({x.data(), 4}, ReduceOp::Sum);
  EXPECT_EQ(x[0], static_cast<float>(c.size()));
  EXPECT_EQ(c.timeout(), std::chrono::seconds(60));
}

TEST(CheckMode, MismatchedOpsRaiseOnEveryRankNamingTheDisagreeingRanks) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  auto sub = breakable("checked", std::chrono::seconds(30));
  sub->set_check(true);
  const auto p = static_cast<std::size_t>(w.size());
  std::vector<float> x(8 * p, 1.0f), y(8 * p);
  sub->all_reduce({x.data(), 8});  // agreeing ops pass the check
  EXPECT_EQ(x[0], static_cast<float>(w.size()));
  // Every rank but 1, as messages name ranks: "0, 2", "0, 2, 3", "0, 2-4" (three or more in
  // a row as a range).
  std::string others = "0";
  if (w.size() == 3 || w.size() == 4) others += ", 2" + std::string(w.size() == 4 ? ", 3" : "");
  if (w.size() > 4) others += ", 2-" + std::to_string(w.size() - 1);
  // Collective #0 is set_check's own, #1 the all_reduce above.
  const std::string expect = "collective mismatch on communicator 'checked' at collective #2: " +
                             std::string(w.size() > 2 ? "ranks " : "rank ") + others +
                             " called all_reduce (8 x float32, sum); rank 1 called all_gather (8 x float32)";
  if (w.rank() == 1) {
    EXPECT_THROW_WITH(sub->all_gather({x.data(), 8}, {y.data(), y.size()}), MismatchError, expect);
  } else {
    EXPECT_THROW_WITH(sub->all_reduce({x.data(), 8}), MismatchError, expect);
  }
  EXPECT_FALSE(sub->usable());
  w.barrier();
}

// set_check is collective: ranks that ask for different modes are told so, each of them,
// and the mode stays as it was. It was local: rank 0 alone in check mode waited in an
// all_gather the others never joined, and the next op hung until the timeout, reported as
// ranks that never came to it.
TEST(CheckMode, RanksThatAskForDifferentModesAreToldAndTheModeStays) {
  auto& w = world();
  auto sub = breakable("check_disagree", std::chrono::seconds(30));
  EXPECT_FALSE(sub->check_enabled());
  if (w.size() > 1) {
    const std::string others = w.size() == 2   ? "rank 1"
                               : w.size() == 3 ? "ranks 1, 2"
                                               : "ranks 1-" + std::to_string(w.size() - 1);
    EXPECT_THROW_WITH(sub->set_check(w.rank() == 0), MismatchError,
                      "set_check on communicator 'check_disagree': rank 0 asked for it on, " + others +
                          " for it off; every rank must call set_check with the same value. The mode is unchanged.");
    EXPECT_FALSE(sub->check_enabled());
  }
  // The communicator is sound: ops go on, and an agreed change takes.
  int one = 1;
  sub->all_reduce({&one, 1});
  EXPECT_EQ(one, w.size());
  sub->set_check(true);
  EXPECT_TRUE(sub->check_enabled());
  one = 1;
  sub->all_reduce({&one, 1});
  EXPECT_EQ(one, w.size());
  w.barrier();
}

TEST(CheckMode, CountMismatchIsCaughtBeforeAnyDataMoves) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  auto sub = breakable("checked_count", std::chrono::seconds(30));
  sub->set_check(true);
  // The root sends 2.0; the others hold -1 until data moves, which must not happen.
  std::vector<double> x(16, w.rank() == 0 ? 2.0 : -1.0);
  const std::size_t n = w.rank() == 0 ? 16 : 12;
  EXPECT_THROW_WITH(sub->broadcast({x.data(), n}, 0), MismatchError, "rank 0 called broadcast (16 x float64, root 0)");
  for (double v : x) EXPECT_EQ(v, w.rank() == 0 ? 2.0 : -1.0);  // EXPECT: every rank reaches the barrier
  w.barrier();
}
}  // namespace
