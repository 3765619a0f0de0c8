// Faults that end a rank's part of the job, one per run, on 2 ranks, launched by
// tests/fault/run_fault.sh with TESSERA_COMM_TIMEOUT set. Each prints what it saw; the
// script checks the output and how long the job took once its ranks were ready.
//
//   mpiexec -n 2 fault_scenarios <scenario>     (backend from TESSERA_TEST_BACKEND)
//
// stop_mid_collective: rank 1 stops (SIGSTOP) in the middle of a large all_reduce.
// exit_after_timeout:  rank 1 stops before a collective; rank 0 gets a TimeoutError and
//                      returns from main: the process must exit, not hang in MPI_Finalize.
// async_buffer_safe:   rank 1 stops before an async all_reduce; rank 0's wait() times out,
//                      it unmaps the buffer and lets rank 1 go on: nothing may write there.
// create_missing_rank: rank 1 stops instead of creating a communicator; rank 0's create()
//                      ends with a TimeoutError naming it.
// recv_sender_stops:   rank 1 stops (SIGSTOP) in the middle of a large send that rank 0's
//                      receive has matched (over TCP: the sender pushes the data). MPI
//                      cannot cancel that receive, so rank 0's process ends with the
//                      diagnosis at its deadline; it used to wait for the cancellation forever.
// late_rank:           rank 1 comes to an all_reduce 5 s late, after rank 0 met its 3 s
//                      timeout and went on: rank 1 must be told that rank 0 gave up on it
//                      before it came (over MPI it gets past the arrival check on the messages
//                      rank 0 sent before giving up, and used to be told a rank had stopped
//                      in the middle of the transfer).
// late_rank_split:     the same at a split, and late_rank_create at Communicator::create:
//                      there rank 1, past the arrival check on rank 0's old messages, used to
//                      wait inside MPI_Comm_split (MPI_Comm_dup) alone until the job was killed.
// stop_in_set_up:      rank 1 stops (SIGSTOP) at the start of a communicator's set-up (its
//                      backend's, after the MPI_Comm_dup), and stop_in_split_set_up at a
//                      split's (after the MPI_Comm_split): rank 0, left in a set-up call
//                      that cannot time out (MPI's; NCCL's ncclCommInitRank), used to wait
//                      there silently until the job was killed.
// set_up_fails_alone:  rank 1's set-up raises an error of its own before any collective call
//                      of it (not agreed on, as set_up_together's steps are); rank 0, left in
//                      the set-up's MPI call, is told that rank 1 is alive and not in it.
// set_up_never_ends:   every rank stays in a set-up call that never returns, named as
//                      the NCCL backend names ncclCommInitRank (whose bootstrap waits for
//                      every rank without a deadline): each must end with the diagnosis.
// post_never_returns:  rank 0's receive stays inside the call that posts it (a test hook
//                      there, as NCCL's ncclRecv waits while it connects two ranks until the
//                      peer posts its send); rank 1 never sends. Rank 0 must end with the
//                      diagnosis naming the receive and what rank 1 is doing.
// gloo_set_up_fails:   rank 1's Gloo TCP device cannot be made (a bad environment variable
//                      of its own), the first Gloo communicator of the job; rank 0, which set
//                      up its part, is told so instead of waiting for rank 1's address.
// timeout_set_in_code: a communicator whose timeout the program sets (2 s) and names as its
//                      own flag's ("--my-timeout"); rank 1 stops. Rank 0's TimeoutError must
//                      name that flag, not TESSERA_COMM_TIMEOUT (which -T overrode in
//                      tessera-bench-collectives, and the message still named).
// slow_to_finish:      a communicator given a timeout of 8 s in code, where
//                      TESSERA_COMM_TIMEOUT is 2; rank 1 reaches the end of the job 4 s after
//                      rank 0. The end of the job must wait as long as that communicator
//                      would (it waited TESSERA_COMM_TIMEOUT's 2 s and left without
//                      MPI_Finalize, and the launcher killed rank 1).
// timeout_set_back:    a communicator set to wait forever (around a long write) and set back
//                      to TESSERA_COMM_TIMEOUT's 2 s; rank 1 then stops before the end. Rank
//                      0 must leave the end of the job after 2 s (it waited forever: the
//                      longest timeout ever set counted, not each communicator's last).
// timeout_lowered:     an all_reduce started under a 30 s timeout, the timeout then lowered to
//                      1 s and a second all_reduce queued behind the first; rank 1 comes
//                      to them 14 s late. Both must complete: the wait for the second gave
//                      it up at 12 s (2 x 1 s + 10 s), judging the first by the new limit,
//                      and failed the communicator while the first was still in time.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

#include "comm/backend.hpp"
#include "test_support.hpp"

namespace {
using namespace tessera;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void say(int rank, const std::string& what) {
  std::printf("[rank %d] %s\n", rank, what.c_str());
  std::fflush(stdout);
}

int stop_mid_collective(comm::Communicator& c) {
  const std::size_t n = std::size_t(64) << 20;  // 256 MiB of float: long enough to stop inside
  std::vector<float> x(n, 1.0f);
  // Rank 0 has a file half written, as an app's output copy: a process ended from inside the
  // call must remove it, as a stop signal would (the test checks that it is gone).
  // One name per backend and rank count: the runs of this scenario may run at once (ctest -j,
  // scripts/run_test_list.py -j).
  const char* backend = std::getenv("TESSERA_TEST_BACKEND");
  const std::string name = std::string("stop_mid_collective_") + (backend != nullptr ? backend : "mpi") + "_np" +
                           std::to_string(c.size()) + ".tmp";
  const char* unfinished = name.c_str();
  std::unique_ptr<UnfinishedFile> tracked;
  if (c.rank() == 0) {
    if (std::FILE* f = std::fopen(unfinished, "w")) {
      std::fputs("half written\n", f);
      std::fclose(f);
    }
    tracked = std::make_unique<UnfinishedFile>(unfinished);
  }
  c.barrier();
  std::thread stopper;
  if (c.rank() == 1)
    stopper = std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      raise(SIGSTOP);
    });
  const auto start = Clock::now();
  try {
    c.all_reduce({x.data(), n});
    say(c.rank(), "the all_reduce completed after " + std::to_string(since(start)) + " s");
  } catch (const Error& e) {
    say(c.rank(), std::string("caught: ") + e.what());
  }
  if (stopper.joinable()) stopper.join();
  if (tracked) {  // the call returned: its owner removes it
    tracked.reset();
    std::remove(unfinished);
  }
  return 0;
}

int exit_after_timeout(comm::Communicator& c) {
  if (c.rank() == 1) raise(SIGSTOP);  // never continued: it stays away
  std::vector<double> x(64, 1.0);
  try {
    c.all_reduce({x.data(), x.size()});
  } catch (const TimeoutError& e) {
    say(c.rank(), std::string("caught TimeoutError: ") + e.message());
  }
  say(c.rank(), "returning from main");
  return 0;
}

int async_buffer_safe(comm::Communicator& c, comm::Communicator& world) {
  // Each rank learns the other's process id first.
  int pids[2] = {0, 0};
  int mine = static_cast<int>(getpid());
  world.all_gather({&mine, 1}, {pids, 2});
  if (c.rank() == 1) raise(SIGSTOP);  // rank 0 continues it after its wait timed out
  const std::size_t bytes = 1 << 20;
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* x = static_cast<float*>(region);
  for (std::size_t i = 0; i < bytes / sizeof(float); ++i) x[i] = 1.0f;
  auto work = c.all_reduce_async({x, bytes / sizeof(float)});
  try {
    work.wait();
    say(c.rank(), "the all_reduce completed");
  } catch (const TimeoutError& e) {
    say(c.rank(), std::string("caught TimeoutError: ") + e.message());
  }
  if (c.rank() == 0) {
    // Any write into the buffer from now on is a segmentation fault.
    munmap(region, bytes);
    kill(pids[1], SIGCONT);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    say(c.rank(), "survived: nothing wrote into the buffer after the timeout");
  }
  return 0;
}
int create_missing_rank(int rank) {
  if (rank == 1) raise(SIGSTOP);  // never continued: it never creates the communicator
  try {
    auto late = comm::Communicator::create(test::backend_under_test());
    say(rank, "created a communicator without rank 1");
  } catch (const TimeoutError& e) {
    say(rank, std::string("caught TimeoutError: ") + e.message());
  }
  return 0;
}
int recv_sender_stops(comm::Communicator& c) {
  std::vector<float> x(std::size_t(1) << 26);  // 256 MiB: far longer on the wire than the pause below
  if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0's receive is posted
    auto sending = c.send_async({x.data(), x.size()}, 0, 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the transfer has begun
    raise(SIGSTOP);
    sending.wait();
    return 0;
  }
  try {
    c.recv({x.data(), x.size()}, 1, 3);
    say(0, "received everything");
  } catch (const Error& e) {
    say(0, std::string("caught: ") + e.message());
  }
  return 0;
}

int late_rank(comm::Communicator& c) {
  std::vector<double> x(64, 1.0);
  if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(5));  // past rank 0's 3 s timeout
  try {
    c.all_reduce({x.data(), x.size()});
    say(c.rank(), "the all_reduce completed");
  } catch (const TimeoutError& e) {
    say(c.rank(), std::string("caught TimeoutError: ") + e.message());
  }
  // Alive, with the communicator, answering its watchdog until rank 1 has asked (MPI: at
  // 5 + 3 + 1 s, when its process ends and so the job; Gloo: at 5 + 3 s).
  if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(12));
  say(c.rank(), "returning from main");
  return 0;
}

/// Rank 1 comes 5 s late (after rank 0 met its 3 s timeout) to `call`, a split or a create.
int late_rank_at(int rank, const char* what, const std::function<void()>& call) {
  if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(5));
  try {
    call();
    say(rank, std::string("the ") + what + " completed");
  } catch (const TimeoutError& e) {
    say(rank, std::string("caught TimeoutError: ") + e.message());
  }
  if (rank == 0) std::this_thread::sleep_for(std::chrono::seconds(12));  // answering, as in late_rank
  say(rank, "returning from main");
  return 0;
}

/// Rank 1 stops at the start of the next communicator set-up that `call` runs (the test hook
/// runs inside the watched set-up, on every rank); rank 0 must end with the diagnosis.
int stop_in_set_up(int rank, const char* what, const std::function<void()>& call) {
  static int stopping_rank = -1;
  stopping_rank = rank == 1 ? 1 : -1;
  comm::detail::set_up_test_hook = [] {
    if (stopping_rank == 1) raise(SIGSTOP);  // never continued
  };
  try {
    call();
    say(rank, std::string("the ") + what + " completed");
  } catch (const Error& e) {
    say(rank, std::string("caught: ") + e.what());
  }
  comm::detail::set_up_test_hook = nullptr;
  say(rank, "returning from main");
  return 0;
}

int set_up_fails_alone(int rank) {
  static int failing_rank = -1;
  failing_rank = rank == 1 ? 1 : -1;
  comm::detail::set_up_test_hook = [] {
    if (failing_rank == 1) throw CommError("a set-up step failed on this rank alone");
  };
  try {
    comm::Communicator::create(test::backend_under_test());
    say(rank, "the create completed");
  } catch (const Error& e) {
    say(rank, std::string("caught: ") + e.what());
  }
  comm::detail::set_up_test_hook = nullptr;
  std::this_thread::sleep_for(std::chrono::seconds(10));  // alive, answering rank 0's watchdog
  say(rank, "returning from main");
  return 0;
}

int set_up_never_ends(int rank) {
  comm::detail::set_up_test_hook = [] {
    const comm::detail::SetUpStep step("test_connect", "The test library", "The hint for this step.");
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  };
  comm::Communicator::create(test::backend_under_test());
  say(rank, "the create completed");
  return 0;
}

int post_never_returns(comm::Communicator& c) {
  if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(10));  // alive, sending nothing
    say(1, "returning from main");
    return 0;
  }
  comm::detail::post_test_hook = [] {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  };
  std::vector<float> x(16);
  try {
    c.recv({x.data(), x.size()}, 1, 9);
    say(0, "received");
  } catch (const Error& e) {
    say(0, std::string("caught: ") + e.what());
  }
  return 0;
}

int gloo_set_up_fails(int rank) {
  if (rank == 1) setenv("TESSERA_GLOO_LOOP_SCHED", "sometimes", 1);
  try {
    auto gloo = comm::Communicator::create(comm::Backend::Gloo);
    say(rank, "created a Gloo communicator");
  } catch (const Error& e) {
    say(rank,
        std::string("caught ") + (dynamic_cast<const ConfigError*>(&e) ? "ConfigError: " : "Error: ") + e.message());
  }
  return 0;
}
}  // namespace

int timeout_set_in_code(comm::Communicator& c) {
  comm::CommOptions options = comm::CommOptions::from_env();
  options.timeout = std::chrono::seconds(2);
  options.timeout_setting = "--my-timeout";
  options.name = "own";
  auto own = comm::Communicator::create(test::backend_under_test(), options);
  if (c.rank() == 1) raise(SIGSTOP);  // never continued
  std::vector<double> x(64, 1.0);
  try {
    own->all_reduce({x.data(), x.size()});
  } catch (const TimeoutError& e) {
    say(c.rank(), std::string("caught TimeoutError: ") + e.message());
  }
  return 0;
}

int slow_to_finish(comm::Communicator& c) {
  comm::CommOptions options = comm::CommOptions::from_env();
  options.timeout = std::chrono::seconds(8);
  options.name = "patient";
  auto own = comm::Communicator::create(test::backend_under_test(), options);
  own->barrier();
  if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(4));
  say(c.rank(), "reached the end of the job");
  return 0;
}

int timeout_set_back(comm::Communicator& c) {
  const auto limit = c.timeout();
  c.set_timeout(std::chrono::milliseconds(0));
  c.barrier();  // the long write
  c.set_timeout(limit);
  c.barrier();
  if (c.rank() == 1) raise(SIGSTOP);  // never continued: it never reaches the end
  say(c.rank(), "reached the end of the job");
  return 0;
}

int timeout_lowered(comm::Communicator& c) {
  std::vector<double> x(64, 1.0), y(64, 1.0);
  if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(14));
  auto first = c.all_reduce_async({x.data(), x.size()});
  c.set_timeout(std::chrono::seconds(1));
  auto second = c.all_reduce_async({y.data(), y.size()});
  try {
    second.wait();
    first.wait();
    say(c.rank(), "both completed, " + std::to_string(x[0] + y[0]));
  } catch (const Error& e) {
    say(c.rank(), "caught: " + e.message());
  }
  return 0;
}

int main(int argc, char** argv) {
  Session session(argc, argv);
  const std::string scenario = argc > 1 ? argv[1] : "";
  // stop_mid_collective also runs on more (rank 1 stops, the others are left inside the call).
  if (session.size() != 2 && !(scenario == "stop_mid_collective" && session.size() > 2)) {
    std::fprintf(stderr, "fault_scenarios runs on 2 ranks (stop_mid_collective on 2 or more)\n");
    return 2;
  }
  auto world = comm::Communicator::create(comm::Backend::Mpi);
  // Before any Gloo communicator exists: the process makes its Gloo device only once.
  if (scenario == "gloo_set_up_fails") return gloo_set_up_fails(world->rank());
  auto c = comm::Communicator::create(test::backend_under_test());  // timeout from TESSERA_COMM_TIMEOUT
  // run_fault.sh times the job from here: starting it (the launcher, MPI, a GPU's context)
  // takes longer on some nodes than others, and is not what the scenarios test.
  if (c->rank() == 0) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    say(0, "ready at " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()) +
               " ms since the epoch");
  }
  if (scenario == "stop_mid_collective") return stop_mid_collective(*c);
  if (scenario == "exit_after_timeout") return exit_after_timeout(*c);
  if (scenario == "async_buffer_safe") return async_buffer_safe(*c, *world);
  if (scenario == "create_missing_rank") return create_missing_rank(c->rank());
  if (scenario == "recv_sender_stops") return recv_sender_stops(*c);
  if (scenario == "late_rank") return late_rank(*c);
  if (scenario == "late_rank_split") return late_rank_at(c->rank(), "split", [&] { c->split(0, c->rank()); });
  if (scenario == "late_rank_create")
    return late_rank_at(c->rank(), "create", [] { comm::Communicator::create(test::backend_under_test()); });
  if (scenario == "stop_in_set_up")
    return stop_in_set_up(c->rank(), "create", [] { comm::Communicator::create(test::backend_under_test()); });
  if (scenario == "set_up_never_ends") return set_up_never_ends(c->rank());
  if (scenario == "post_never_returns") return post_never_returns(*c);
  if (scenario == "set_up_fails_alone") return set_up_fails_alone(c->rank());
  if (scenario == "timeout_set_in_code") return timeout_set_in_code(*c);
  if (scenario == "slow_to_finish") return slow_to_finish(*c);
  if (scenario == "timeout_set_back") return timeout_set_back(*c);
  if (scenario == "timeout_lowered") return timeout_lowered(*c);
  if (scenario == "stop_in_split_set_up") return stop_in_set_up(c->rank(), "split", [&] { c->split(0, c->rank()); });
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  return 2;
}
