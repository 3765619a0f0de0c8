#pragma once
// Internal: the narrow interface each communication backend implements, and the
// description of one operation as it reaches a backend.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include <tessera/comm/types.hpp>

namespace tessera::comm::detail {

enum class OpType : std::uint8_t {
  Broadcast,
  Scatter,
  Gather,
  Reduce,
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Barrier,
  Send,
  Recv,
  Split,  // only fenced, never executed by a backend
};
const char* op_name(OpType type) noexcept;
inline bool is_collective(OpType t) noexcept { return t != OpType::Send && t != OpType::Recv; }
inline bool is_reduction(OpType t) noexcept {
  return t == OpType::Reduce || t == OpType::AllReduce || t == OpType::ReduceScatter;
}

/// One operation, already validated. `count` is the per-rank element count n (see the
/// Communicator docs); `send`/`recv` may be empty where the op does not use them on this rank.
struct Op {
  OpType type = OpType::Barrier;
  Buffer send;
  Buffer recv;
  std::size_t count = 0;
  DType dtype = DType::Float32;
  MemoryKind memory = MemoryKind::Host;
  ReduceOp reduce = ReduceOp::Sum;
  int root = 0;
  int peer = 0;
  int tag = 0;
  bool check = false;          // compare ops across ranks first (frozen when the op is issued)
  std::uint64_t seq = 0;       // per-communicator number of this op (all ops)
  std::uint64_t coll_seq = 0;  // number among collectives (what ranks must agree on)
  // The communicator's timeout when the op was issued, its limit (below 0: not issued yet):
  // a set_timeout after that changes the ops issued after it.
  std::chrono::milliseconds timeout{-1};
  // Arguments this rank refused (a ConfigError): a collective still takes its place at the
  // fence, so the other ranks fail there at once rather than wait out the timeout for it.
  std::exception_ptr refusal;
};

/// "all_reduce (1024 x float32, sum)" and the like.
std::string describe(const Op& op);

using Clock = std::chrono::steady_clock;

/// Clock::now() from the coarse monotonic clock where there is one: the same clock as
/// steady_clock's on Linux, up to a scheduler tick (1-4 ms) behind, at a fraction of the
/// cost. Enough for deadlines, which are seconds; never for timing.
inline Clock::time_point coarse_now() noexcept {
#ifdef CLOCK_MONOTONIC_COARSE
  timespec ts{};
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                         std::chrono::nanoseconds(ts.tv_nsec)));
#endif
  return Clock::now();
}

/// When a blocking wait must give up; `none` waits forever.
struct Deadline {
  Clock::time_point at{};
  bool none = true;
  static Deadline after(std::chrono::milliseconds timeout) {
    Deadline d;
    d.none = timeout.count() <= 0;
    d.at = coarse_now() + timeout;
    return d;
  }
  bool expired() const noexcept { return !none && Clock::now() >= at; }
  /// Milliseconds left (at least 1), or a very long time when there is no deadline.
  std::chrono::milliseconds remaining() const noexcept;
};

/// Thrown by a backend when a Deadline passes; the front end turns it into a TimeoutError
/// that names the op and the ranks that did not arrive.
struct DeadlineExceeded {
  std::string what;  // e.g. "waiting in MPI_Ibarrier"
};

/// A point-to-point transfer that has been posted and not yet waited for.
class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  /// Blocks until the transfer completes; throws DeadlineExceeded or CommError.
  virtual void wait(const Deadline& deadline) = 0;
  /// Returns at once: true when the transfer has completed (throws if it failed).
  virtual bool test() = 0;
  /// Stops a transfer that will not complete (it timed out or failed) before its buffer is
  /// reused or freed: true when the backend no longer touches the buffer; false when it still
  /// may (MPI cannot cancel a send, nor a receive whose data had begun to arrive), and the
  /// buffer must then outlive the process's use of it.
  virtual bool stop() noexcept { return true; }
  /// What a completed receive was sent, where the backend can tell (MPI): the send's bytes,
  /// or `truncated` where they did not fit the receive's buffer. The front end refuses a
  /// receive whose send gave another count. Gloo and NCCL cannot tell: Gloo's slots carry
  /// the size, so a send and a receive of different sizes never match.
  struct Arrived {
    bool known = false;
    bool truncated = false;
    std::size_t bytes = 0;
  };
  virtual Arrived arrived() const { return {}; }
};

/// A backend: moves data for ops whose dtype it handles natively, in the memory it accepts.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual comm::Backend kind() const noexcept = 0;
  /// The MPI communicator that defines this backend's members and ranks.
  virtual MPI_Comm group() const noexcept = 0;
  /// True when the front end must confirm, before every collective, that every rank arrived
  /// at the same op (a fence), because the backend's call cannot time out (MPI's blocking
  /// collectives) or cannot survive ranks that disagree (Gloo aborts the process). It must
  /// not depend on per-rank settings: every rank has to make the same choice.
  virtual bool needs_fence() const noexcept = 0;
  /// True when the backend moves buffers in memory of this kind itself; the front end
  /// stages the others through the other kind.
  virtual bool accepts(MemoryKind memory) const noexcept = 0;
  /// True when bfloat16/float16 reductions and ReduceOp::Avg are handled by the backend;
  /// otherwise the front end reduces in float32 and divides by size().
  virtual bool native_half_and_avg() const noexcept { return false; }
  /// Runs a collective to completion on the calling thread. Throws DeadlineExceeded or CommError.
  virtual void execute(const Op& op, const Deadline& deadline) = 0;
  /// Posts a send or recv without waiting for it (so that two ranks can each post a send
  /// and then a receive without deadlock).
  virtual std::unique_ptr<PendingTransfer> post(const Op& op, const Deadline& deadline) = 0;
  /// A backend of the same kind over `group` (takes ownership of it).
  virtual std::unique_ptr<Backend> make_child(MPI_Comm group, const CommOptions& options) = 0;
  /// The most times its timeout one collective call may take: 1 where the call keeps the
  /// op's deadline (or takes none: MPI, which the watchdog ends), more where each of the
  /// library's internal waits is given the whole timeout (Gloo's algorithms). The watchdog
  /// waits that long before it ends a process stuck in the call.
  virtual int timeouts_per_call(int /*ranks*/) const noexcept { return 1; }
  /// True when the backend runs all of a communicator's operations, collectives and
  /// transfers alike, in the order they were issued (NCCL): a send or receive is then posted
  /// only after the collectives queued before it on the progress thread have run, so that
  /// its place in that order is the caller's, not the threads' race.
  virtual bool orders_all_ops() const noexcept { return false; }
  /// Called once after a failure, so the backend can release what a stuck op holds.
  virtual void abort() noexcept {}
};

// Factories; each takes ownership of `group`. Those not compiled in throw NotCompiledError.
/// Runs `step`, a part of a backend's set-up that can fail on one rank alone (a device, an
/// address or an environment variable of that node), then tells every rank of `group` whether
/// it failed on any, before any of them goes on to the set-up's next collective call, where
/// the others would otherwise wait forever. The rank that failed rethrows its own error; the
/// others throw a CommError that names the first rank that failed.
void set_up_together(MPI_Comm group, const char* backend, const std::function<void()>& step);

/// Names, while it lives, the library call a backend's set-up is inside (`call`,
/// "ncclCommInitRank", of `library`, "NCCL"), and what a user can do when it does not end
/// (`hint`, or nullptr), for the diagnosis of a set-up that outlives its limit:
/// Communicator::create and split watch every communicator's set-up, and end the process
/// there. Outside such a set-up it names nothing. The texts must live as long as the program
/// (literals).
class SetUpStep {
 public:
  SetUpStep(const char* call, const char* library, const char* hint) noexcept;
  SetUpStep(const SetUpStep&) = delete;
  SetUpStep& operator=(const SetUpStep&) = delete;
  ~SetUpStep();

 private:
  void* set_up_;  // the set-up this thread runs (none: the step names nothing)
  const char* previous_[3] = {nullptr, nullptr, nullptr};
};
/// For tests only: called, where set, at the start of every watched communicator set-up, on
/// the thread that runs it (tests/fault stops a rank there). None by default.
extern void (*set_up_test_hook)();
/// For tests only: called, where set, inside every watched post of a send or receive, before
/// the backend's call (tests/fault blocks there, as NCCL's connection set-up can). None by
/// default.
extern void (*post_test_hook)();

/// The most elements the MPI backend hands one MPI call (MPI's counts are ints): a longer
/// broadcast, reduce or all-reduce runs as several calls over consecutive pieces. Tests lower
/// it; INT_MAX otherwise.
extern std::size_t mpi_max_count;

std::unique_ptr<Backend> make_mpi_backend(MPI_Comm group);
std::unique_ptr<Backend> make_gloo_backend(MPI_Comm group, const CommOptions& options);
std::unique_ptr<Backend> make_nccl_backend(MPI_Comm group, const CommOptions& options);
/// True when a GPU is visible and NCCL is compiled in.
bool nccl_usable() noexcept;
/// Collective over group: true when NCCL is compiled in and every rank of the group has a
/// GPU that no other rank of the group on its node uses (what NCCL needs; for Backend::Auto).
bool nccl_one_gpu_per_rank(MPI_Comm group);

/// Waits for an MPI request, polling until it completes or the deadline passes (then
/// throws DeadlineExceeded; the request is left pending). Spins briefly, then yields and
/// sleeps, so a rank waiting for a late peer does not starve the peer's core.
void wait_mpi(MPI_Request& request, const Deadline& deadline, const char* what);
/// The same for a request whose status matters (a receive): fills `status` and returns MPI's
/// code for the request (MPI_SUCCESS, or the error it ended with) instead of raising it.
int wait_mpi_status(MPI_Request& request, const Deadline& deadline, const char* what, MPI_Status& status);
/// The same for several requests (all must complete).
void wait_mpi_all(MPI_Request* requests, int count, const Deadline& deadline, const char* what);

/// The MPI datatype that moves elements of dtype (16-bit floats move as MPI_UINT16_T).
MPI_Datatype mpi_datatype(DType dtype);

}  // namespace tessera::comm::detail
