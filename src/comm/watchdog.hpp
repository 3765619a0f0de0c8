#pragma once
// Internal: the process-wide watchdog. A background thread answers other ranks' questions
// about this rank's progress on a communicator, so that a rank whose wait timed out can
// name the ranks that never arrived. It polls a private duplicate of MPI_COMM_WORLD a few
// hundred times a second and costs nothing on the data path.

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::comm::detail {

/// A status question to a peer's watchdog.
struct Query {
  std::uint64_t comm_id;
  std::uint64_t query_id;  // echoed, so a late answer to an abandoned query is recognised
};

class Watchdog;

/// Progress counters of one communicator on this rank, read by the watchdog thread.
struct Progress {
  std::atomic<std::uint64_t> collectives_issued{0};
  std::atomic<std::uint64_t> ops_issued{0};
  std::atomic<std::uint8_t> last_op{255};  // OpType of the last op issued; 255 = none
  // The communicator failed on this rank (an error of its own there): it runs no more ops.
  std::atomic<bool> failed{false};
  // The collective this rank is running now: its number + 1 (0: none) and OpType.
  std::atomic<std::uint64_t> running_seq{0};
  std::atomic<std::uint8_t> running_op{255};
  // The collective whose timeout this rank met, its number + 1 (0: none), and when (steady
  // clock ticks; stored first): a late peer that got into it anyway (past a fence on the
  // messages sent before this rank gave up) learns that this rank will never complete it.
  std::atomic<std::int64_t> gave_up_at{0};
  std::atomic<std::uint64_t> gave_up_seq{0};
  // While a caller waits for a send or receive (blocking, or its Work): (OpType << 32) |
  // (the peer's world rank + 1); 0 otherwise. Transfers have no collective number.
  std::atomic<std::uint64_t> waiting_transfer{0};
  // The last send or receive posted on this communicator, until it completes: (1 for a
  // receive << 63) | (its tag << 32) | (the peer's world rank + 1), and its bytes; 0 when
  // none. A peer whose transfer timed out compares it with its own (a send and a receive of
  // different sizes). Bytes are stored before the key.
  std::atomic<std::uint64_t> last_transfer{0};
  std::atomic<std::uint64_t> last_transfer_bytes{0};
  // While an op is inside its backend's call: the steady-clock time (ticks) after which it
  // is stuck there (its deadline and a grace); 0 otherwise. The watchdog then calls
  // on_stuck, which ends the process (or returns where inside_until went back to 0 while it
  // asked: a set-up's), with the registry locked (it asks the peers through
  // the Watchdog it is given, not through Watchdog::instance(), whose lock remove() takes
  // before the registry's).
  std::atomic<std::int64_t> inside_until{0};
  std::function<void(Watchdog&)> on_stuck;
  // The same for a send or receive while it is being posted (the backend's call that posts
  // it, which can block: NCCL connects two ranks there the first time they exchange data,
  // waiting for the peer's matching op without a deadline): past this time, on_post_stuck.
  std::atomic<std::int64_t> posting_until{0};
  std::function<void(Watchdog&)> on_post_stuck;
  /// The communicator's name ("world.dp"; "" for Communicator::create's rendezvous), set
  /// before the watchdog is told of it: a peer's question about another communicator is
  /// answered with it, since that peer may hold another group of the same name (another id).
  std::string name;
  /// True for a communicator's set-up (Communicator::create's or split's, under an id of its
  /// own), whose running_seq is not 0 while it runs: a peer asked about another communicator
  /// is told so (kSetUpOp) only where this rank runs no collective and waits for no transfer.
  bool set_up = false;
};

/// Elsewhere::op of a rank setting up a communicator (no OpType).
constexpr std::uint8_t kSetUpOp = 254;

/// What a rank is busy with on another communicator than the one asked about.
struct Elsewhere {
  bool busy = false;         // false: it runs no collective on another communicator either
  std::string communicator;  // its name ("" for Communicator::create's rendezvous)
  std::uint64_t seq = 0;     // the collective's number on it
  std::uint8_t op = 255;     // its OpType
  int peer = -1;             // for a send or receive it waits in: the peer's world rank
};

/// A peer's answer about one communicator.
struct PeerStatus {
  int world_rank = -1;
  bool responded = false;  // false: no answer before the query deadline (dead or hung)
  bool member = false;     // false: that rank has no such communicator (yet, or any more)
  bool failed = false;     // its communicator failed there, and runs no more ops
  std::uint64_t collectives_issued = 0;
  std::uint8_t last_op = 255;
  std::uint64_t running_seq = 0;  // the collective it runs now, + 1 (0: none)
  std::uint8_t running_op = 255;
  std::uint64_t gave_up_seq = 0;             // the collective whose timeout it met, + 1 (0: none)
  std::chrono::microseconds gave_up_ago{0};  // how long before its answer it met that timeout
  std::uint64_t last_transfer = 0;           // Progress::last_transfer and its bytes
  std::uint64_t last_transfer_bytes = 0;
  /// Where it runs nothing on this communicator: the collective it runs on another, if any
  /// (a rank waiting in a data-parallel reduction is not at the tensor-parallel one), or else
  /// the send or receive it waits in, on any communicator (a pipeline stage waiting for its
  /// neighbour).
  Elsewhere elsewhere;
};

class Watchdog {
 public:
  /// The process's watchdog, started on first use (it talks over the Session's control
  /// communicator, so starting it is not collective). Stopped at Session end.
  static Watchdog& instance();

  /// Registers a communicator's progress (its name set first) under its id.
  void add(std::uint64_t comm_id, const Progress* progress);
  /// Forgets comm_id; safe to call after the watchdog has stopped (does nothing then).
  static void remove(std::uint64_t comm_id);
  /// Asks each world rank in `ranks` (this rank excluded) about comm_id; waits up to `wait`.
  std::vector<PeerStatus> query(std::uint64_t comm_id, const std::vector<int>& ranks, std::chrono::milliseconds wait);
  /// Answers the peers' questions for `duration`; from on_stuck only (the watchdog's thread,
  /// the registry locked), before the process ends: a peer stuck alike at the same moment,
  /// asking now, is then told where this rank is instead of finding it silent.
  void answer_for(std::chrono::milliseconds duration);

 private:
  Watchdog();
  void stop();
  void loop();
  /// Answers the questions waiting for this rank; `registry_locked`: the caller holds
  /// registry_mutex_ (the loop, while a stuck communicator asks its peers).
  void answer_questions(bool registry_locked);

  MPI_Comm control_ = MPI_COMM_NULL;
  int world_rank_ = 0;
  std::mutex registry_mutex_;
  std::map<std::uint64_t, const Progress*> registry_;
  std::mutex query_mutex_;       // one outgoing query at a time per process
  std::deque<Query> abandoned_;  // send buffers of queries a peer never received
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm::detail
