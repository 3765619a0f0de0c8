#include <tessera/comm/communicator.hpp>
#include <tessera/config.hpp>
#include <tessera/core/files.hpp>
#include <tessera/core/session.hpp>
#include <tessera/core/trace.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "comm/backend.hpp"
#include "comm/rank_list.hpp"
#include "comm/watchdog.hpp"
#include "core/device_copy.hpp"
#include "core/fnv1a.hpp"
#include "core/log.hpp"
#include "core/mpi_check.hpp"
#include "core/mpi_fence.hpp"

namespace tessera::comm {
namespace detail {

struct WorkState {
  Op op;
  CommState* comm = nullptr;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::atomic<bool> started{false};
  Clock::time_point started_at{};
  std::exception_ptr error;
};

namespace {
constexpr int kFenceTag = 100;    // + round; on the fence communicator only
constexpr int kCreateTag = 7100;  // + round; on the Session's control communicator
// How long a rank whose op timed out waits for its peers' watchdogs to say where they are
// (a live one answers within milliseconds).
constexpr std::chrono::milliseconds kQueryWait{1000};

/// The world rank of each rank of `group`, in the group's numbering.
std::vector<int> world_ranks_of(MPI_Comm group) {
  int size = 0;
  TESSERA_CHECK_MPI(MPI_Comm_size(group, &size));
  MPI_Group mine, world;
  TESSERA_CHECK_MPI(MPI_Comm_group(group, &mine));
  TESSERA_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<std::size_t>(size)), ranks(local.size());
  for (int i = 0; i < size; ++i) local[static_cast<std::size_t>(i)] = i;
  TESSERA_CHECK_MPI(MPI_Group_translate_ranks(mine, size, local.data(), world, ranks.data()));
  TESSERA_CHECK_MPI(MPI_Group_free(&mine));
  TESSERA_CHECK_MPI(MPI_Group_free(&world));
  return ranks;
}

/// Prints the diagnosis of a fault that ends this process (`_Exit` follows, from any thread;
/// the launcher ends the job), and removes the output copies being written, since `_Exit`
/// runs no destructor.
void report_ending(const std::string& message, int world_rank) noexcept {
  std::fprintf(stderr, "tessera: error: %s [rank %d]\n", message.c_str(), world_rank);
  std::fflush(stderr);
  remove_unfinished_files();
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

template <class To, class From>
void convert(To* out, const From* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<To>(static_cast<float>(in[i]));
}

void widen(float* out, const void* in, DType dtype, std::size_t n) {
  if (dtype == DType::BFloat16)
    convert(out, static_cast<const bfloat16*>(in), n);
  else
    convert(out, static_cast<const float16*>(in), n);
}

void narrow(void* out, const float* in, DType dtype, std::size_t n) {
  if (dtype == DType::BFloat16) {
    auto* o = static_cast<bfloat16*>(out);
    for (std::size_t i = 0; i < n; ++i) o[i] = bfloat16(in[i]);
  } else {
    auto* o = static_cast<float16*>(out);
    for (std::size_t i = 0; i < n; ++i) o[i] = float16(in[i]);
  }
}

/// What an op signature looks like on the wire in check mode.
struct Signature {
  std::uint64_t coll_seq;
  std::uint64_t count;
  std::int32_t root;
  std::uint8_t type;
  std::uint8_t dtype;
  std::uint8_t reduce;
  std::uint8_t refused;  // 1 where this rank refused its arguments (Op::refusal)
  bool operator==(const Signature& o) const {
    return coll_seq == o.coll_seq && count == o.count && root == o.root && type == o.type && dtype == o.dtype &&
           reduce == o.reduce && refused == o.refused;
  }
};

Signature signature_of(const Op& op) {
  Signature s{};
  s.coll_seq = op.coll_seq;
  s.count = op.count;
  s.type = static_cast<std::uint8_t>(op.type);
  const bool rooted = op.type == OpType::Broadcast || op.type == OpType::Scatter || op.type == OpType::Gather ||
                      op.type == OpType::Reduce;
  s.root = rooted ? op.root : 0;
  s.dtype = op.type == OpType::Barrier ? 0 : static_cast<std::uint8_t>(op.dtype);
  s.reduce = is_reduction(op.type) ? static_cast<std::uint8_t>(op.reduce) : 0;
  s.refused = op.refusal ? 1 : 0;
  return s;
}

std::string describe(const Signature& s) {
  Op op;
  op.type = static_cast<OpType>(s.type);
  op.count = s.count;
  op.root = s.root;
  op.dtype = static_cast<DType>(s.dtype);
  op.reduce = static_cast<ReduceOp>(s.reduce);
  return s.refused ? describe(op) + ", and refused its arguments" : describe(op);
}

/// Of peers' answers about collective `seq`: the ranks (as `local` maps a world rank) that met
/// its timeout, and so will never complete it, those that did before this rank began it
/// (`began`) and those after. Durations, not times, are compared (the ranks' clocks differ),
/// against when the answers came.
template <class Local>
std::pair<std::vector<int>, std::vector<int>> gave_up_on(const std::vector<PeerStatus>& peers, std::uint64_t seq,
                                                         Clock::time_point began, Clock::time_point answered,
                                                         Local&& local) {
  const auto here_for = std::chrono::duration_cast<std::chrono::microseconds>(answered - began);
  std::pair<std::vector<int>, std::vector<int>> ranks;
  for (const auto& p : peers)
    if (p.responded && p.member && p.gave_up_seq == seq + 1)
      (p.gave_up_ago > here_for ? ranks.first : ranks.second).push_back(local(p.world_rank));
  return ranks;
}
/// What a rank that came after its peers' timeout is told about it; `what`: "collective".
std::string came_late(const char* what) {
  return std::string("This rank came later than the timeout allows: something before this ") + what +
         " (a long step, I/O) held it up, or the timeout is too short for this job.";
}
std::string gave_up_text(const std::vector<int>& world_ranks, const std::vector<int>& ranks, bool before) {
  return "rank" + std::string(ranks.size() > 1 ? "s " : " ") + rank_list(world_ranks, ranks) +
         (before ? " had already given up on it at " : " gave up on it at ") + (ranks.size() > 1 ? "their" : "its") +
         (before ? " own timeout before this rank began it" : " own timeout after this rank began it");
}
/// "rank 0 had already given up on it ..., and rank 2 gave up on it ...": the peers of
/// gave_up_on (in `world_ranks`' numbering), those before this rank began first.
std::string gave_up_clause(const std::vector<int>& world_ranks, const std::vector<int>& before,
                           const std::vector<int>& after) {
  std::string text;
  if (!before.empty()) text += gave_up_text(world_ranks, before, true);
  if (!before.empty() && !after.empty()) text += ", and ";
  if (!after.empty()) text += gave_up_text(world_ranks, after, false);
  return text;
}
/// " 1" or "s 1, 3", "s 4-1023": the ranks (as `local` maps a world rank) that did not answer
/// the watchdog; "" where all did.
template <class Local>
std::string silent_ranks(const std::vector<int>& world_ranks, const std::vector<PeerStatus>& peers, Local&& local) {
  std::vector<int> silent;
  for (const auto& p : peers)
    if (!p.responded) silent.push_back(local(p.world_rank));
  if (silent.empty()) return "";
  return (silent.size() > 1 ? "s " : " ") + rank_list(world_ranks, silent);
}

/// How long past its deadline a library call may stay before the watchdog takes it as stuck.
Clock::duration stuck_grace(std::chrono::milliseconds timeout) {
  return std::max<Clock::duration>(std::chrono::seconds(1), timeout / 10);
}
/// Runs `call`, a library call that may never return (an MPI call a peer never joins), with
/// `progress` marked inside it until `until` (none: not watched); past that, the watchdog
/// calls progress.on_stuck, which ends the process.
template <class Call>
void run_watched(Progress& progress, std::optional<Clock::time_point> until, Call&& call) {
  if (until) progress.inside_until.store(until->time_since_epoch().count(), std::memory_order_release);
  struct Unmark {
    Progress& progress;
    ~Unmark() { progress.inside_until.store(0); }
  } unmark{progress};
  call();
}

std::uint64_t hash_of(const Signature& sig) {
  return tessera::detail::Fnv1a()
      .word(sig.coll_seq)
      .word(sig.count)
      .word(static_cast<std::uint64_t>(static_cast<std::uint32_t>(sig.root)))
      .word(static_cast<std::uint64_t>(sig.type) | static_cast<std::uint64_t>(sig.dtype) << 8 |
            static_cast<std::uint64_t>(sig.reduce) << 16 | static_cast<std::uint64_t>(sig.refused) << 24)
      .value();
}
}  // namespace

using tessera::detail::FenceBuffers;

/// Confirms, before `deadline`, that every rank of `comm` has arrived at an op whose signature
/// hashes to `hash`, and tells whether they all agree (every rank gets the same answer).
/// Throws DeadlineExceeded when a rank does not come.
bool agree(MPI_Comm comm, int rank, int size, std::uint64_t hash, FenceBuffers& b, int tag, const Deadline& deadline) {
  const auto result = tessera::detail::fence(comm, rank, size, hash, b, tag, deadline.at, deadline.none);
  if (result == tessera::detail::FenceResult::Expired) throw DeadlineExceeded{"waiting for every rank to arrive"};
  return result == tessera::detail::FenceResult::Agree;
}

/// This communicator's number for a peer known by its world rank.
int local_rank(const std::vector<int>& world_ranks, int world) {
  return static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world) - world_ranks.begin());
}

/// "a broadcast", "an all_reduce".
std::string with_article(const char* name) {
  return std::string(std::strchr("aeiou", name[0]) != nullptr ? "an " : "a ") + name;
}

/// Sorts the peers' answers about collective `seq` into the ranks (of this communicator) that
/// have not reached it, each with what is known of it, and those that have.
struct ArrivalReport {
  std::vector<std::pair<int, std::string>> missing;  // each rank, and what is known of it
  std::vector<int> arrived;
};
ArrivalReport arrivals(const std::vector<PeerStatus>& peers, const std::vector<int>& world_ranks, int self,
                       std::uint64_t seq, bool collective) {
  ArrivalReport report;
  report.arrived.push_back(self);
  for (const auto& p : peers) {
    const int r = local_rank(world_ranks, p.world_rank);
    if (!p.responded) {
      report.missing.push_back({r, "did not answer within 1 s: dead, stopped, or stuck where its watchdog cannot run"});
    } else if (!p.member) {
      report.missing.push_back(
          {r, "alive, but does not have this communicator: not created yet, or already destroyed"});
    } else if (p.failed && p.running_seq == 0 && (!collective || p.collectives_issued <= seq)) {
      // Its own error ended it there (a receive of another size, a staging failure): it was
      // said to be alive and not in a collective, as if it had skipped one.
      report.missing.push_back({r,
                                "alive, but this communicator failed there after an error of its own (that rank's "
                                "message says which), and runs no more ops"});
    } else if (!collective || p.collectives_issued <= seq || (p.running_seq > 0 && p.running_seq - 1 < seq)) {
      // Not issued yet, or issued (an async op) while an earlier one still runs.
      std::string where = "alive";
      if (p.running_seq > 0) {
        where += std::string(" and waiting in ") + op_name(static_cast<OpType>(p.running_op)) + " #" +
                 std::to_string(p.running_seq - 1);
      } else {
        // Busy on another communicator: a rank in a data-parallel reduction is not at the
        // tensor-parallel collective.
        const auto& e = p.elsewhere;
        if (e.busy && e.peer >= 0)
          where += std::string(" and waiting in ") +
                   (e.op == static_cast<std::uint8_t>(OpType::Send) ? "a send to" : "a receive from") + " world rank " +
                   std::to_string(e.peer) + " on communicator '" + e.communicator + "'";
        else if (e.busy && e.communicator.empty())
          where += " and waiting to create a communicator (Communicator::create #" + std::to_string(e.seq) + ")";
        else if (e.busy && e.op == kSetUpOp)
          where += " and setting up communicator '" + e.communicator + "'";
        else if (e.busy)
          where += std::string(" and waiting in ") + op_name(static_cast<OpType>(e.op)) + " #" + std::to_string(e.seq) +
                   " on communicator '" + e.communicator + "'";
        const std::string here = e.busy ? " here" : "";
        if (p.last_op != 255)
          where += ", not in a collective" + here + "; its last op" + here + " was " +
                   with_article(op_name(static_cast<OpType>(p.last_op))) + ", of " +
                   std::to_string(p.collectives_issued) + " collectives issued";
        else
          where += ", has issued no op here";
      }
      report.missing.push_back({r, where});
    } else {
      report.arrived.push_back(r);
    }
  }
  std::sort(report.arrived.begin(), report.arrived.end());
  return report;
}

/// Everything behind a Communicator: the backend, progress counters, the async worker.
class CommState {
 public:
  CommState(std::unique_ptr<Backend> b, CommOptions o, std::string p)
      : backend(std::move(b)),
        options(std::move(o)),
        path(std::move(p)),
        id(tessera::detail::fnv1a(path)),
        timeout_ms(options.timeout.count()) {
    TESSERA_CHECK_MPI(MPI_Comm_rank(backend->group(), &rank));
    TESSERA_CHECK_MPI(MPI_Comm_size(backend->group(), &size));
    TESSERA_CHECK_MPI(MPI_Comm_dup(backend->group(), &fence_comm));
    world_ranks = world_ranks_of(backend->group());
    progress.on_stuck = [this](Watchdog& watchdog) { stuck(watchdog); };
    progress.on_post_stuck = [this](Watchdog& watchdog) { post_stuck(watchdog); };
    // A peer's watchdog reads an empty name as "creating a communicator" (Communicator::create's
    // rendezvous), so a communicator named "" is named for the messages.
    if (options.name.empty()) options.name = "(unnamed)";
    progress.name = options.name;
    tessera::detail::note_comm_timeout(id, options.timeout);  // the end of the job waits as long
    Watchdog::instance().add(id, &progress);
    device = tessera::detail::current_device();
  }

  ~CommState() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      std::lock_guard<std::mutex> lock2(transfer_mutex);
      stopping = true;
    }
    cv.notify_all();
    transfer_cv.notify_all();
    if (worker.joinable()) worker.join();
    if (transfer_thread.joinable()) transfer_thread.join();
    Watchdog::remove(id);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&fence_comm);
  }

  std::unique_ptr<Backend> backend;
  CommOptions options;
  std::string path;
  std::uint64_t id;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;
  // The timeout, which set_timeout() may change while the progress threads read it
  // (options.timeout is the one it was created with).
  std::atomic<std::chrono::milliseconds::rep> timeout_ms;
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms.load(std::memory_order_relaxed));
  }
  MPI_Comm fence_comm = MPI_COMM_NULL;
  Progress progress;
  int splits = 0;
  double bytes_sent = 0;  // modelled: see Communicator::bytes_sent()

  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  std::string failure;

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::shared_ptr<WorkState>> queue;
  std::atomic<std::size_t> queued{0};  // queue.size(), changed under mutex: idle() reads it without the lock
  bool stopping = false;
  std::atomic<bool> running{false};
  std::atomic<Clock::rep> running_since{0};  // when the worker's current op started
  // The worker's current op's own limit, as it was when the op started: a set_timeout
  // while it runs changes the limit of the ops after it, not this one's.
  std::atomic<std::chrono::milliseconds::rep> running_limit{0};
  std::atomic<Clock::rep> op_began{0};  // when the collective that runs now began, fence included
  std::thread worker;

  // Staging buffers for ops whose memory the backend cannot use (or that need host-side
  // widening and averaging), and float32 images of 16-bit floats.
  tessera::detail::Staging stage_in, stage_out, device_in{MemoryKind::Device}, device_out{MemoryKind::Device},
      f32_in{MemoryKind::Host, false}, f32_out{MemoryKind::Host, false};
  // Staging for sends and receives, lent to each while in flight (several can be): declared
  // before `transfers`, whose leases end first.
  tessera::detail::StagingPool transfer_staging;
  // The check mode's gather: this rank's signature and every rank's. Its MPI_Iallgather
  // cannot be cancelled: after a timeout it stays posted, and a late rank's signature may
  // still arrive after this communicator is gone, so the buffers it writes are then kept for
  // the process (fence()).
  struct CheckBuffers {
    Signature mine{};
    std::vector<Signature> all;
  };
  std::shared_ptr<CheckBuffers> check = std::make_shared<CheckBuffers>();
  FenceBuffers fence_buffers;  // the fence's, which cancels its receives when it expires
  Op inside_op;                // the op inside the backend's call (published by progress.inside_until)
  // Sends and receives are posted one at a time (a post is short, or blocks where NCCL
  // connects two ranks), so that one slot names the one being posted (published by
  // progress.posting_until).
  std::mutex posting_mutex;
  Op posting_op;
  int device = -1;  // the GPU of the thread that created the communicator (-1: none)

  /// A posted send/recv and what completing it takes.
  struct Transfer {
    std::shared_ptr<WorkState> work;
    Deadline deadline;
    // A copy of the buffer in the other kind of memory, for backends that cannot use its own.
    tessera::detail::StagingPool::Lease staging;
    // Last, so it is destroyed first: a cancelled request is done before its buffer goes
    // (a failed transfer is dropped explicitly, by drop()).
    std::unique_ptr<PendingTransfer> pending;
  };
  std::mutex transfer_mutex;
  std::condition_variable transfer_cv;
  std::deque<Transfer> transfers;
  std::thread transfer_thread;

  /// Runs f; turns what it throws into the error a Work handle reports (and marks the
  /// communicator failed), including a timeout's diagnosis.
  template <class F>
  std::exception_ptr attempt(const Op& op, F&& f) {
    try {
      f();
      return nullptr;
    } catch (const DeadlineExceeded& e) {
      try {
        timed_out(op, e.what);
      } catch (...) {
        return std::current_exception();
      }
    } catch (const Error& e) {
      fail(e.message());
      return std::current_exception();
    } catch (const std::exception& e) {
      fail(e.what());
      return std::current_exception();
    } catch (...) {
      fail("an unknown exception");
      return std::current_exception();
    }
    return nullptr;
  }

  void received(Transfer& t) {
    const Op& op = t.work->op;
    if (op.type != OpType::Recv) return;
    // A receive takes exactly its send's count: MPI would fill only the front of a longer
    // buffer (and a staged one would be copied back whole), and refuse a shorter one.
    const std::size_t esz = dtype_size(op.dtype), want = op.count * esz;
    if (const auto a = t.pending->arrived(); a.known && (a.truncated || a.bytes != want)) {
      std::string sent = (a.truncated ? "more than " + std::to_string(want) : std::to_string(a.bytes)) + " bytes";
      if (!a.truncated && a.bytes % esz == 0)
        sent += " (" + std::to_string(a.bytes / esz) + " x " + dtype_name(op.dtype) + ")";
      throw CommError(describe(op) + " on communicator '" + options.name + "' [" + backend_name(backend->kind()) +
                      ", " + std::to_string(size) + " ranks]: the send it matched carried " + sent +
                      ", where this receive takes " + std::to_string(want) +
                      "; a send and its receive must give the same count and dtype");
    }
    if (t.staging) tessera::detail::copy_bytes(op.recv.data, op.memory, t.staging->data(), t.staging->kind(), want);
  }

  void complete(Transfer& t, std::exception_ptr error) {
    WorkState& w = *t.work;
    // On a trace, each send and receive is a span on its communicator's track, from being
    // posted to completing (the caller's own waits for it are on its step track).
    if (trace::enabled())
      trace::record("transfer", describe(w.op), "comm " + options.name, w.started_at, trace::Clock::now());
    // A transfer that completed is no peer's counterpart any more (its size would mislead a
    // later timeout); one that failed stays for the peer's diagnosis.
    if (!error) {
      std::uint64_t key = transfer_key(w.op);
      progress.last_transfer.compare_exchange_strong(key, 0);
    }
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      w.error = std::move(error);
      w.done.store(true);
    }
    w.cv.notify_all();
  }

  /// Stops a transfer that failed, before its staging buffer goes back to the pool: one the
  /// backend could not stop (a send MPI let go) keeps its buffer for good, a few leaked bytes
  /// rather than a later transfer's staged data read by that send. A receive into the
  /// caller's own buffer that MPI could not stop (its data had begun to arrive, and the rest
  /// did not come within the grace) would write into that buffer whenever the sender went
  /// on, maybe after the program freed it: this process then ends, with the diagnosis
  /// (`why`: what ended the receive), as for a collective stuck inside its MPI call.
  void drop(Transfer& t, const std::string& why) noexcept {
    if (t.pending && !t.pending->stop()) {
      if (t.work->op.type == OpType::Recv && !t.staging) stuck_receive(t.work->op, why);
      (void)t.staging.release();
    }
    t.pending.reset();
    t.staging.reset();
  }

  /// What ended a transfer that failed with `error`, for stuck_receive's message.
  std::string ended_by(const Op& op, const std::exception_ptr& error) const {
    try {
      std::rethrow_exception(error);
    } catch (const TimeoutError&) {
      return "timed out after " + seconds_text(limit_of(op));
    } catch (...) {
      return "failed";
    }
  }

  [[noreturn]] void stuck_receive(const Op& op, const std::string& why) noexcept {
    const std::string message =
        describe(op) + " on communicator '" + options.name + "' [" + backend_name(backend->kind()) + ", " +
        std::to_string(size) + " ranks] " + why +
        " with its data partly received, and the rest did not come: the sender stopped or died in the middle of "
        "the transfer, or sends more slowly than the timeout allows. The " +
        backend_name(backend->kind()) +
        " library cannot cancel a receive it has begun, and would write into the receive's buffer whenever the "
        "sender went on, so this process ends now. " +
        options.timeout_setting + " sets the limit in seconds.";
    end_process(message);
  }

  /// Prints the diagnosis and ends this process, from any thread; the launcher ends the job.
  [[noreturn]] void end_process(const std::string& message) noexcept {
    report_ending(message, world_ranks[static_cast<std::size_t>(rank)]);
    std::_Exit(EXIT_FAILURE);
  }

  /// What the watchdog says of this rank while its caller waits for a send or receive (a
  /// pipeline stage waiting for its neighbour is in no collective).
  struct WaitingFor {
    Progress& progress;
    std::uint64_t value;
    WaitingFor(CommState& comm, const Op& op)
        : progress(comm.progress),
          value(static_cast<std::uint64_t>(op.type) << 32 |
                static_cast<std::uint32_t>(comm.world_ranks[static_cast<std::size_t>(op.peer)] + 1)) {
      progress.waiting_transfer.store(value);
    }
    WaitingFor(const WaitingFor&) = delete;
    WaitingFor& operator=(const WaitingFor&) = delete;
    ~WaitingFor() {
      std::uint64_t mine = value;
      progress.waiting_transfer.compare_exchange_strong(mine, 0);
    }
  };

  /// Progress::last_transfer's value for a send or receive posted here: its direction, tag
  /// and the peer's world rank.
  std::uint64_t transfer_key(const Op& op) const {
    return static_cast<std::uint64_t>(op.type == OpType::Recv) << 63 | static_cast<std::uint64_t>(op.tag) << 32 |
           static_cast<std::uint32_t>(world_ranks[static_cast<std::size_t>(op.peer)] + 1);
  }

  /// For a send or receive that timed out: where the peer's last transfer here is its
  /// counterpart (the other direction, this rank, the same tag) but of another size, a
  /// sentence that says so (they can never match: Gloo matches on the size, NCCL pairs them
  /// in order and waits for the bytes); "" otherwise.
  std::string size_mismatch(const Op& op, const PeerStatus& peer) const {
    if (!peer.responded || peer.last_transfer == 0) return "";
    Op counterpart = op;  // as the peer would have posted it
    counterpart.type = op.type == OpType::Send ? OpType::Recv : OpType::Send;
    counterpart.peer = rank;
    const std::uint64_t expected = transfer_key(counterpart);
    const std::size_t mine = op.count * dtype_size(op.dtype);
    if (peer.last_transfer != expected || peer.last_transfer_bytes == mine) return "";
    return std::string(" Its last ") + (op.type == OpType::Send ? "receive" : "send") + " here, " +
           (op.type == OpType::Send ? "from" : "to") + " this rank with tag " + std::to_string(op.tag) + ", is of " +
           std::to_string(peer.last_transfer_bytes) + " bytes where this " + op_name(op.type) + " is of " +
           std::to_string(mine) + ": a send and its receive must give the same count and dtype.";
  }

  /// Waits for a posted transfer on the calling thread (blocking send/recv).
  void finish(Transfer& t) {
    auto error = attempt(t.work->op, [&] {
      const WaitingFor waiting(*this, t.work->op);
      t.pending->wait(t.deadline);
      received(t);
    });
    if (error) drop(t, ended_by(t.work->op, error));
    complete(t, std::move(error));
  }

  /// Selects the communicator's GPU on a thread of its own; a failure (a CUDA error) fails
  /// the communicator, so its ops report it, rather than ending the process from a thread.
  void use_device(const char* thread) noexcept {
    if (device < 0) return;
    try {
      tessera::detail::set_device(device);
    } catch (const std::exception& e) {
      fail(std::string(thread) + " could not select GPU " + std::to_string(device) + ": " + e.what());
    }
  }

  /// Polls every outstanding transfer, so each completes as soon as its peer acts, in any
  /// order (waiting for them one by one could deadlock a valid exchange).
  void transfer_loop() {
    use_device("the transfer thread");
    std::vector<Transfer> active;
    for (;;) {
      bool destroying = false;
      {
        std::unique_lock<std::mutex> lock(transfer_mutex);
        if (active.empty()) transfer_cv.wait(lock, [&] { return stopping || !transfers.empty(); });
        if (stopping && transfers.empty() && active.empty()) return;
        destroying = stopping;
        while (!transfers.empty()) {
          active.push_back(std::move(transfers.front()));
          transfers.pop_front();
        }
      }
      // A communicator being destroyed does not wait out its receives' deadlines (a
      // pipeline's receive posted ahead, whose sender will not send once a failure unwinds
      // the step): nothing can wait for them any more. The communicator fails, which aborts
      // a backend that cannot cancel a receive on its own (NCCL's kernel would otherwise keep
      // ncclCommDestroy waiting), and its transfers are stopped. Its sends alone are still
      // waited for, as their receivers may yet post.
      const auto posted_receive = [&] {
        return std::any_of(active.begin(), active.end(),
                           [](const Transfer& t) { return t.work->op.type == OpType::Recv; });
      };
      if (destroying && (failed.load() || posted_receive())) {
        if (!failed.load()) fail("communicator '" + options.name + "' was destroyed with a receive still posted");
        for (auto& t : active) {
          drop(t, "was stopped when its communicator was destroyed");
          complete(t, std::make_exception_ptr(CommError("communicator '" + options.name + "' was destroyed with this " +
                                                        op_name(t.work->op.type) + " unfinished")));
        }
        active.clear();
        continue;
      }
      bool progressed = false;
      for (auto it = active.begin(); it != active.end();) {
        bool done = false;
        auto error = attempt(it->work->op, [&] {
          if (it->pending->test()) {
            received(*it);
            done = true;
          } else if (it->deadline.expired()) {
            throw DeadlineExceeded{it->work->op.type == OpType::Send ? "waiting for the receiver"
                                                                     : "waiting for the sender"};
          }
        });
        if (done || error) {
          if (error) drop(*it, ended_by(it->work->op, error));
          complete(*it, std::move(error));
          it = active.erase(it);
          progressed = true;
        } else {
          ++it;
        }
      }
      if (!progressed && !active.empty()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  /// Hands a posted transfer to the transfer thread. Takes it by reference: should this throw
  /// (no thread, no memory), the caller still holds it, and fails the communicator, which
  /// stops the backend's request, before its staging buffer can be lent again.
  void enqueue(Transfer&& t) {
    {
      std::lock_guard<std::mutex> lock(transfer_mutex);
      if (!transfer_thread.joinable()) transfer_thread = std::thread([this] { transfer_loop(); });
      transfers.push_back(std::move(t));
    }
    transfer_cv.notify_one();
  }

  /// Nothing queued or running on the progress thread (acquire: what the last queued op
  /// wrote is visible to the op that runs next on the caller's thread).
  bool idle() const { return queued.load(std::memory_order_acquire) == 0; }

  void ensure_usable() {
    if (!failed.load()) return;
    std::lock_guard<std::mutex> lock(failure_mutex);
    throw CommError("communicator '" + options.name + "' is unusable after an earlier failure (" + failure +
                    "); create a new communicator or restart the job");
  }

  void fail(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (failed.load()) return;
      failure = message;
      failed.store(true);
    }
    progress.failed.store(true);  // a peer that waits for this rank is told
    tessera::detail::note_communication_failure();
    backend->abort();
  }

  void enqueue(std::shared_ptr<WorkState> w) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
      queue.push_back(std::move(w));
      queued.store(queue.size(), std::memory_order_release);
    }
    cv.notify_one();
  }

  void worker_loop() {
    use_device("the progress thread");
    for (;;) {
      std::shared_ptr<WorkState> w;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        w = queue.front();
        // Under the lock: a waiter that gives up on a queued op removes it only while it
        // has not started, and then it never touches the op's buffers.
        w->started_at = Clock::now();
        w->started.store(true);
        // Under the lock too: a waiter reads the three under it, so that it never pairs one
        // op's start with another's limit.
        running_limit.store(limit_of(w->op).count());
        running_since.store(w->started_at.time_since_epoch().count());
        running.store(true);
      }
      const auto limit = std::chrono::milliseconds(running_limit.load());
      try {
        run(w->op, limit);
      } catch (...) {
        w->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        running.store(false);
        queue.pop_front();
        queued.store(queue.size(), std::memory_order_release);
      }
      {
        std::lock_guard<std::mutex> lock(w->mutex);
        w->done.store(true);
      }
      w->cv.notify_all();
    }
  }

  /// Runs one op to completion on the calling thread, with the fence, conversions and
  /// failure handling that every backend shares.
  void run(const Op& op) { run(op, limit_of(op)); }
  /// An op's limit: the timeout as it was when the op was issued.
  std::chrono::milliseconds limit_of(const Op& op) const { return op.timeout.count() >= 0 ? op.timeout : timeout(); }
  /// The same, within `limit` (zero: forever).
  void run(const Op& op, std::chrono::milliseconds limit) {
    ensure_usable();
    const Deadline deadline = Deadline::after(limit);
    // What peers' questions hear while this op runs (the watchdog answers them).
    struct Running {
      Progress& p;
      Running(Progress& progress, const Op& op) : p(progress) {
        p.running_op.store(static_cast<std::uint8_t>(op.type));
        p.running_seq.store(op.coll_seq + 1);
      }
      ~Running() { p.running_seq.store(0); }
    } running_now(progress, op);
    op_began.store(Clock::now().time_since_epoch().count());
    // On a trace, each collective is a span on its communicator's track.
    struct Traced {
      const Op& op;
      const std::string& comm;
      bool on = trace::enabled();
      trace::Clock::time_point begin = on ? trace::Clock::now() : trace::Clock::time_point();
      ~Traced() {
        if (on) trace::record("collective", describe(op), "comm " + comm, begin, trace::Clock::now());
      }
    } traced{op, options.name};
    bool arrived = false;  // the fence confirmed every rank is at this op
    // Every rank must take the same branch here, so it depends only on the op (check is
    // frozen into it when issued) and the backend, never on this rank's timeout.
    const bool fenced = is_collective(op.type) && (op.check || backend->needs_fence());
    try {
      // The buffers it is staged or converted through are reserved before the fence: a rank
      // that cannot have them (its host or GPU memory full) takes its place there as refused,
      // and the others fail at once. Reserved after it, that rank failed alone, and the
      // others waited inside the backend's call for it until the watchdog ended them.
      const Op* at_fence = &op;
      Op refused;
      std::string refused_why;
      if (fenced && !op.refusal && op.count > 0 && !runs_alone(op)) {
        try {
          reserve_for(op);
        } catch (const Error& e) {
          refused_why = describe(op) + ", collective #" + std::to_string(op.coll_seq) + " on communicator '" +
                        options.name + "': could not reserve the buffers it is staged through (" + e.message() +
                        "); the other ranks were told at its fence";
          refused = op;
          refused.refusal = std::make_exception_ptr(CommError(refused_why, __FILE__, __LINE__));
          at_fence = &refused;
        }
      }
      if (fenced) {
        try {
          fence(*at_fence, deadline);
        } catch (const MismatchError&) {
          if (at_fence == &op) throw;
          {  // the fence failed the communicator with the others' words: this rank keeps its own
            std::lock_guard<std::mutex> lock(failure_mutex);
            failure = refused_why;
          }
          std::rethrow_exception(refused.refusal);
        }
      }
      arrived = fenced;
      if (at_fence != &op) std::rethrow_exception(refused.refusal);  // every rank refused
      if (op.type == OpType::Barrier && fenced) return;              // the fence is a barrier
      if (op.refusal) return;                                        // its place at the fence was all it had to do
      if (op.count == 0 && op.type != OpType::Barrier) return;
      if (runs_alone(op)) {
        run_alone(op);
        return;
      }
      execute_converted(op, deadline);
    } catch (const DeadlineExceeded& e) {
      timed_out(op, e.what, arrived, fenced && !arrived);
    } catch (const MismatchError&) {
      throw;  // fence() already marked the failure
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      fail(e.message());
      throw;
    } catch (const std::bad_alloc&) {
      // A backend's own buffer (MPI's for an in-place reduce-scatter): not an Error, and the
      // communicator went on as if sound.
      const std::string message = describe(op) + ", collective #" + std::to_string(op.coll_seq) + " on communicator '" +
                                  options.name + "': out of host memory";
      fail(message);
      throw CommError(message, __FILE__, __LINE__);
    }
  }

  /// Before a collective on a backend that needs it (needs_fence()): every rank arrived, and
  /// every rank called the same op, or every rank raises the same MismatchError.
  /// Runs only the fence of op (a split, which MPI cannot time out): every rank arrives at
  /// it before the deadline and agrees about it, whatever the backend.
  void rendezvous(const Op& op) {
    ensure_usable();
    progress.running_op.store(static_cast<std::uint8_t>(op.type));
    progress.running_seq.store(op.coll_seq + 1);
    op_began.store(Clock::now().time_since_epoch().count());
    try {
      fence(op, Deadline::after(limit_of(op)));
    } catch (const DeadlineExceeded& e) {
      progress.running_seq.store(0);
      timed_out(op, e.what, false, true);
    } catch (...) {
      progress.running_seq.store(0);
      throw;
    }
    progress.running_seq.store(0);
  }

  void fence(const Op& op, const Deadline& deadline) {
    MPI_Request request;
    if (!op.check) {
      if (agree(fence_comm, rank, size, hash_of(signature_of(op)), fence_buffers, kFenceTag, deadline)) return;
      const std::string message =
          "collective mismatch on communicator '" + options.name + "' at collective #" + std::to_string(op.coll_seq) +
          ": this rank called " + describe(op) +
          ", and at least one other rank called another op, count, dtype, root or reduce op, or refused its "
          "arguments to this one (its own message says why). Every rank must issue the same collectives in the same "
          "order; TESSERA_COMM_CHECK=1 names which rank called what.";
      fail(message);
      throw MismatchError(message, __FILE__, __LINE__);
    }
    check->mine = signature_of(op);
    check->all.resize(static_cast<std::size_t>(size));
    const std::vector<Signature>& all = check->all;
    TESSERA_CHECK_MPI(MPI_Iallgather(&check->mine, sizeof(Signature), MPI_BYTE, check->all.data(), sizeof(Signature),
                                     MPI_BYTE, fence_comm, &request));
    try {
      wait_mpi(request, deadline, "waiting for every rank to arrive at the op check");
    } catch (const DeadlineExceeded&) {
      // The gather stays posted (a collective cannot be cancelled), and a late rank's
      // signature may arrive after this communicator is destroyed: its buffers are kept.
      static std::mutex kept_mutex;
      static auto* kept = new std::vector<std::shared_ptr<CheckBuffers>>;  // never freed
      {
        std::lock_guard<std::mutex> lock(kept_mutex);
        kept->push_back(check);
      }
      check = std::make_shared<CheckBuffers>();
      throw;
    }
    if (std::all_of(all.begin(), all.end(), [&](const Signature& s) { return s == all[0]; })) return;
    // Every rank holds the same table, so every rank raises the same error.
    std::vector<std::pair<Signature, std::vector<int>>> groups;
    for (int r = 0; r < size; ++r) {
      const Signature& s = all[static_cast<std::size_t>(r)];
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == s; });
      if (it == groups.end())
        groups.push_back({s, {r}});
      else
        it->second.push_back(r);
    }
    std::string message = "collective mismatch on communicator '" + options.name + "' at collective #" +
                          std::to_string(op.coll_seq) + ":";
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const auto& g = groups[i];
      message += std::string(i ? ";" : "") + (g.second.size() > 1 ? " ranks " : " rank ") +
                 rank_list(world_ranks, g.second) + " called " + describe(g.first);
      if (g.first.coll_seq != op.coll_seq) message += " as their collective #" + std::to_string(g.first.coll_seq);
    }
    message +=
        ". Every rank must issue the same collectives, with the same counts, dtypes and "
        "roots, in the same order.";
    fail(message);
    throw MismatchError(message, __FILE__, __LINE__);
  }

  /// True when the backend cannot reduce this op itself: 16-bit floats and averages are
  /// then reduced in float32 (or float64) on the host.
  bool needs_conversion(const Op& op) const {
    if (!is_reduction(op.type) || backend->native_half_and_avg()) return false;
    return op.reduce == ReduceOp::Avg || op.dtype == DType::BFloat16 || op.dtype == DType::Float16;
  }

  /// True for an op that a communicator of one rank runs without its backend, because the
  /// backend would need staging or conversion: nothing has to move, so nothing is staged.
  bool runs_alone(const Op& op) const { return size == 1 && (needs_conversion(op) || !backend->accepts(op.memory)); }

  /// An op on a communicator of one rank: the result is the input, so at most a local copy.
  void run_alone(const Op& op) {
    if (op.type == OpType::Broadcast || op.type == OpType::Barrier) return;
    const auto [in_n, out_n] = extents(op);
    const std::size_t bytes = std::min(in_n, out_n) * dtype_size(op.dtype);
    if (op.send.data != op.recv.data)
      tessera::detail::copy_bytes(op.recv.data, op.memory, op.send.data, op.memory, bytes);
  }

  /// Runs op on the backend, staging its buffers through the other kind of memory when the
  /// backend cannot use theirs, and reducing 16-bit floats and averages on the host when the
  /// backend cannot. The backend's own memory and dtypes go straight through.
  /// How execute_converted moves an op: through which memory, staged or not, converted or not.
  struct Plan {
    MemoryKind wire;
    bool convert, stage, wide;
  };
  Plan plan_of(const Op& op) const {
    Plan p{};
    p.convert = needs_conversion(op);
    // Conversion happens on the host; every backend that needs it moves host memory.
    p.wire =
        p.convert ? MemoryKind::Host : (backend->accepts(op.memory) ? op.memory : tessera::detail::other(op.memory));
    p.stage = p.wire != op.memory;
    p.wide = p.convert && (op.dtype == DType::BFloat16 || op.dtype == DType::Float16);
    return p;
  }

  /// Reserves the buffers execute_converted will stage and convert `op` through.
  void reserve_for(const Op& op) {
    const Plan p = plan_of(op);
    if (!backend->accepts(p.wire) || (!p.stage && !p.wide)) return;
    const auto [in_n, out_n] = extents(op);
    const std::size_t esz = dtype_size(op.dtype);
    if (p.stage) {
      (p.wire == MemoryKind::Host ? stage_out : device_out).reserve(std::max<std::size_t>(out_n, 1) * esz);
      if (op.type != OpType::Broadcast)
        (p.wire == MemoryKind::Host ? stage_in : device_in).reserve(std::max<std::size_t>(in_n, 1) * esz);
    }
    if (p.wide) {
      f32_in.reserve(std::max<std::size_t>(in_n, 1) * 4);
      f32_out.reserve(std::max<std::size_t>(out_n, 1) * 4);
    }
  }

  void execute_converted(const Op& op, const Deadline& deadline) {
    const Plan plan = plan_of(op);
    const bool convert = plan.convert;
    const MemoryKind wire = plan.wire;
    if (!backend->accepts(wire))
      throw Error("internal: the " + std::string(backend_name(backend->kind())) +
                  " backend cannot move the memory this op is staged through");
    const bool stage = plan.stage;
    const bool wide = plan.wide;
    const bool average = convert && op.reduce == ReduceOp::Avg;
    if (!stage && !convert) {
      execute_backend(op, deadline);
      return;
    }
    const auto [in_n, out_n] = extents(op);
    const std::size_t esz = dtype_size(op.dtype);
    Op staged = op;
    if (stage) {
      auto& in_buffer = wire == MemoryKind::Host ? stage_in : device_in;
      auto& out_buffer = wire == MemoryKind::Host ? stage_out : device_out;
      void* out = out_buffer.reserve(std::max<std::size_t>(out_n, 1) * esz);
      if (op.type == OpType::Broadcast) {
        if (rank == op.root) tessera::detail::copy_bytes(out, wire, op.recv.data, op.memory, op.count * esz);
        staged.send.data = out;
      } else {
        void* in = in_buffer.reserve(std::max<std::size_t>(in_n, 1) * esz);
        tessera::detail::copy_bytes(in, wire, op.send.data, op.memory, in_n * esz);
        staged.send.data = in;
      }
      staged.recv.data = out;
      staged.memory = staged.send.memory = staged.recv.memory = wire;
    }
    Op native = staged;
    if (wide) {
      auto* in = static_cast<float*>(f32_in.reserve(std::max<std::size_t>(in_n, 1) * 4));
      auto* out = static_cast<float*>(f32_out.reserve(std::max<std::size_t>(out_n, 1) * 4));
      widen(in, staged.send.data, op.dtype, in_n);
      native.send = Buffer(in, in_n, DType::Float32, MemoryKind::Host);
      native.recv = Buffer(out, out_n, DType::Float32, MemoryKind::Host);
      native.dtype = DType::Float32;
    }
    if (average) native.reduce = ReduceOp::Sum;
    execute_backend(native, deadline);
    if (average && out_n > 0) {
      if (native.dtype == DType::Float64) {
        auto* p = static_cast<double*>(native.recv.data);
        for (std::size_t i = 0; i < out_n; ++i) p[i] /= size;
      } else {
        auto* p = static_cast<float*>(native.recv.data);
        const float inv = 1.0f / static_cast<float>(size);
        for (std::size_t i = 0; i < out_n; ++i) p[i] *= inv;
      }
    }
    if (wide && out_n > 0) narrow(staged.recv.data, static_cast<const float*>(native.recv.data), op.dtype, out_n);
    if (stage) tessera::detail::copy_bytes(op.recv.data, op.memory, staged.recv.data, wire, out_n * esz);
  }

  /// The backend's call, watched: past its deadline and a grace (the backends that take a
  /// deadline have given up by then; Gloo's, whose internal waits each get the whole
  /// timeout, by several timeouts more), the watchdog calls stuck().
  void execute_backend(const Op& op, const Deadline& deadline) {
    watched(op, deadline, backend->timeouts_per_call(size), [&] { backend->execute(op, deadline); });
  }

  /// Runs `call`, a library call of op that may not return by itself (MPI's), watched: past
  /// the deadline, a grace and `timeouts - 1` more timeouts, the watchdog calls stuck().
  template <class Call>
  void watched(const Op& op, const Deadline& deadline, int timeouts, Call&& call) {
    std::optional<Clock::time_point> until;
    if (!deadline.none) {
      inside_op = op;
      const auto limit = limit_of(op);
      until = deadline.at + stuck_grace(limit) + (timeouts - 1) * limit;
    }
    run_watched(progress, until, std::forward<Call>(call));
  }

  /// Called by the watchdog thread for an op stuck inside its backend's call past its
  /// deadline: a rank stopped or died in the middle of an MPI collective. MPI cannot
  /// interrupt the call, and the call would write into the op's buffers whenever the rank
  /// came back, maybe after the program freed them: so this process ends here, with the
  /// diagnosis, and the launcher ends the job.
  /// Returns where the call ended while the peers were asked (up to 1 s), also where the next
  /// call has begun since (its own deadline then stands in inside_until): the watchdog calls
  /// again for a call still inside past its deadline.
  void stuck(Watchdog& watchdog) {
    const auto until = progress.inside_until.load(std::memory_order_acquire);
    const Op op = inside_op;
    std::vector<PeerStatus> peers;
    try {
      peers = watchdog.query(id, world_ranks, kQueryWait);
    } catch (...) {
    }
    if (until == 0 || progress.inside_until.load(std::memory_order_acquire) != until) return;
    // Peers that met this collective's timeout: the call can never complete. Before this
    // rank began it, the fence passed on the messages they had sent before giving up; just
    // after, the fence passed here but not there (this rank's message came too late).
    const auto [before, after] = gave_up_on(peers, op);
    // A split runs MPI_Comm_split, after its fence, on every backend.
    const bool split = op.type == OpType::Split;
    const bool fenced = split || backend->needs_fence() || op.check;
    const std::string library = split ? "MPI" : backend_name(backend->kind());
    std::string message = describe(op) + ", collective #" + std::to_string(op.coll_seq) + " on communicator '" +
                          options.name + "' [" + backend_name(backend->kind()) + ", " + std::to_string(size) +
                          " ranks], has been inside " + (split ? "MPI_Comm_split" : "the backend's call") +
                          " for longer than its timeout of " + seconds_text(limit_of(op));
    if (!before.empty() || !after.empty()) {
      message += ": " + gave_up_clause(world_ranks, before, after);
      message += std::string(fenced ? " (this rank got past the arrival check on the messages sent before that)" : "") +
                 ", so it cannot complete. " + came_late("collective");
    } else
      message += split ? ": every rank arrived at it, and one stopped or died in the middle of the split."
                 : backend->needs_fence()
                     ? ": every rank arrived at it, and one stopped or died in the middle of the transfer."
                     : ": a rank that never called it, or one that stopped or died in the middle of the transfer, "
                       "holds it up.";
    const auto silent = silent_ranks(peers);
    if (!silent.empty()) message += " No answer from rank" + silent + ".";
    message += " The " + library + " library cannot interrupt " +
               (split ? std::string("MPI_Comm_split")
                      : std::string("its call, which would write into the op's buffers whenever ") +
                            (before.empty() && after.empty() ? "that rank resumed" : "it went on")) +
               ", so this process ends now. " + options.timeout_setting + " sets the limit in seconds.";
    end_process(message);
  }

  /// Posts a send or receive through `call` (the backend's post), watched: past the op's
  /// deadline and a grace, the watchdog ends this process with post_stuck's diagnosis.
  template <class Call>
  void watched_post(const Op& op, const Deadline& deadline, Call&& call) {
    std::lock_guard<std::mutex> lock(posting_mutex);
    const WaitingFor waiting(*this, op);  // what a peer asking about this rank is told
    if (!deadline.none) {
      posting_op = op;
      progress.posting_until.store((deadline.at + stuck_grace(limit_of(op))).time_since_epoch().count(),
                                   std::memory_order_release);
    }
    struct Unmark {
      Progress& progress;
      ~Unmark() { progress.posting_until.store(0); }
    } unmark{progress};
    if (post_test_hook != nullptr) post_test_hook();
    call();
  }

  /// Called by the watchdog thread for a send or receive whose post has not returned past its
  /// deadline: NCCL connects two ranks the first time they exchange data, inside ncclSend or
  /// ncclRecv, and waits there for the peer's matching op with no deadline of its own.
  /// Returns where the post ended while the peer was asked, as stuck() does.
  void post_stuck(Watchdog& watchdog) {
    const auto until = progress.posting_until.load(std::memory_order_acquire);
    const Op op = posting_op;
    const int peer_world = world_ranks[static_cast<std::size_t>(op.peer)];
    std::vector<PeerStatus> peers;
    try {
      peers = watchdog.query(id, {peer_world}, kQueryWait);
    } catch (...) {
    }
    if (until == 0 || progress.posting_until.load(std::memory_order_acquire) != until) return;
    const auto report = arrivals(peers, world_ranks, rank, op.coll_seq, false);
    const std::string library = backend_name(backend->kind());
    std::string message =
        describe(op) + " on communicator '" + options.name + "' [" + library + ", " + std::to_string(size) +
        " ranks] has been inside the " + library + " backend's call that posts it for longer than its timeout of " +
        seconds_text(limit_of(op)) +
        ": that call waits for the peer (NCCL connects two ranks there the first time they " +
        "exchange data, until the peer posts its matching " + (op.type == OpType::Recv ? "send" : "receive") +
        "). Peer: rank " +
        (report.missing.empty() ? rank_list(world_ranks, {op.peer}) + " is alive"
                                : rank_list(world_ranks, {report.missing[0].first}, report.missing[0].second)) +
        "." + (peers.empty() ? std::string() : size_mismatch(op, peers.front())) + " The " + library +
        " library cannot interrupt its call, so this process ends now. " + options.timeout_setting +
        " sets the limit in seconds.";
    end_process(message);
  }

  /// The ranks (of this communicator) that met op's timeout, and so will never complete it:
  /// those that did before this rank began op, and those that did after. Durations, not
  /// times, are compared (the ranks' clocks differ), against when the answers came.
  std::pair<std::vector<int>, std::vector<int>> gave_up_on(const std::vector<PeerStatus>& peers, const Op& op) const {
    return comm::detail::gave_up_on(peers, op.coll_seq, Clock::time_point(Clock::duration(op_began.load())),
                                    Clock::now(), [this](int world) { return local_rank(world_ranks, world); });
  }
  std::string gave_up_text(const std::vector<int>& ranks, bool before) const {
    return comm::detail::gave_up_text(world_ranks, ranks, before);
  }

  /// " 1" or "s 1, 3": the ranks (of this communicator) that did not answer the watchdog.
  std::string silent_ranks(const std::vector<PeerStatus>& peers) const {
    return comm::detail::silent_ranks(world_ranks, peers, [this](int world) { return local_rank(world_ranks, world); });
  }

  /// Elements this rank reads from send and writes to recv.
  std::pair<std::size_t, std::size_t> extents(const Op& op) const {
    const std::size_t n = op.count, all = n * static_cast<std::size_t>(size);
    const bool root = rank == op.root;
    switch (op.type) {
      case OpType::Broadcast:
        return {root ? n : 0, n};
      case OpType::Scatter:
        return {root ? all : 0, n};
      case OpType::Gather:
        return {n, root ? all : 0};
      case OpType::Reduce:
        return {n, root ? n : 0};
      case OpType::AllReduce:
        return {n, n};
      case OpType::AllGather:
        return {n, all};
      case OpType::ReduceScatter:
        return {all, n};
      case OpType::AllToAll:
        return {all, all};
      case OpType::Send:
        return {n, 0};
      case OpType::Recv:
        return {0, n};
      case OpType::Barrier:
      case OpType::Split:
        return {0, 0};
    }
    return {0, 0};
  }

  /// Raises the TimeoutError of op, naming what each peer was doing. `arrived`: every rank
  /// was known to be at this op (its fence passed), so the data phase stalled.
  /// `arrived`: the fence confirmed every rank at this op; `fence_expired`: the deadline
  /// passed in the fence (neither: no fence ran, e.g. NCCL without the check mode).
  /// `began`: false for an op given up while still queued behind another (it never ran, so
  /// this rank neither publishes that it gave up on it nor compares when peers did).
  [[noreturn]] void timed_out(const Op& op, const std::string& what, bool arrived = false, bool fence_expired = false,
                              bool began = true) {
    const bool collective = is_collective(op.type);
    if (collective && began) {
      progress.gave_up_at.store(Clock::now().time_since_epoch().count());
      progress.gave_up_seq.store(op.coll_seq + 1);
    }
    std::string message = describe(op) + (collective ? ", collective #" + std::to_string(op.coll_seq) : "") +
                          " on communicator '" + options.name + "' [" + backend_name(backend->kind()) + ", " +
                          std::to_string(size) + " ranks], timed out after " + seconds_text(limit_of(op)) + " " + what +
                          ".";
    const std::vector<int> ask =
        collective ? world_ranks : std::vector<int>{world_ranks[static_cast<std::size_t>(op.peer)]};
    const auto peers = Watchdog::instance().query(id, ask, kQueryWait);
    const auto report = arrivals(peers, world_ranks, rank, op.coll_seq, collective);
    if (!collective) {
      message +=
          " Peer: rank " +
          (report.missing.empty() ? rank_list(world_ranks, {op.peer}) + " is alive"
                                  : rank_list(world_ranks, {report.missing[0].first}, report.missing[0].second)) +
          "." + (peers.empty() ? std::string() : size_mismatch(op, peers.front()));
    } else if (const auto gave_up = began ? gave_up_on(peers, op).first : std::vector<int>{};
               report.missing.empty() && !gave_up.empty()) {
      std::string who = gave_up_text(gave_up, true);
      who[0] = 'R';
      message += " " + who + ", so it cannot complete. " + came_late("collective");
    } else if (fence_expired && report.missing.empty()) {
      // The fence's deadline passed, and the last rank came before the watchdog asked.
      message +=
          " Every rank has arrived by now, but not all within the timeout: one was busy elsewhere for longer "
          "than that (a long step, I/O), or the timeout is too short for this job.";
    } else if (arrived || report.missing.empty()) {
      message += " Every rank arrived at this collective, and it did not complete inside the " +
                 std::string(backend_name(backend->kind())) +
                 " backend: a rank stopped or died while the data moved, or a link failed.";
      const auto silent = silent_ranks(peers);
      if (!silent.empty()) message += " No answer from rank" + silent + ".";
    } else {
      message += " Ranks that did not arrive: " + grouped_ranks(world_ranks, report.missing) +
                 ". Ranks that arrived: " + rank_list(world_ranks, report.arrived) +
                 ". A rank that skipped a collective or runs a different number of them causes this; "
                 "TESSERA_COMM_CHECK=1 compares every op across ranks.";
    }
    message += " " + options.timeout_setting + " sets the limit in seconds.";
    fail(message);
    throw TimeoutError(message, __FILE__, __LINE__);
  }
};

namespace {
/// Communicator::create's rendezvous on this rank: its progress (the watchdog's id 0, which is
/// no communicator's: peers ask it which create this rank runs, and which it gave up on), the
/// fence's buffers, and the create running now (written before its MPI calls are watched,
/// read by the watchdog's thread when one does not return).
struct Creations {
  Progress progress;
  FenceBuffers buffers;
  std::string what;  // "Communicator::create #2 (backend mpi)"
  std::uint64_t seq = 0;
  std::chrono::milliseconds timeout{0};
  std::string timeout_setting;  // what the messages name as the timeout's setting
  Clock::time_point began;
  const char* call = "";  // the MPI call being watched
};
[[noreturn]] void creation_stuck(Watchdog& watchdog);
Creations& creations() {
  static Creations c;
  static std::once_flag registered;
  std::call_once(registered, [] {
    c.progress.on_stuck = [](Watchdog& w) { creation_stuck(w); };
    Watchdog::instance().add(0, &c.progress);
  });
  return c;
}

/// Called by the watchdog thread when a create's MPI call has not returned past the create's
/// timeout: a rank that came after its peers' timeout passed the rendezvous on the messages
/// they had sent before giving up, and waits in the call alone. MPI cannot interrupt it.
[[noreturn]] void creation_stuck(Watchdog& watchdog) {
  // A copy first: were the call to return meanwhile (the query below takes up to a second),
  // the creating thread would go on to rewrite these.
  const Creations& current = creations();
  const std::string what = current.what, call = current.call, setting = current.timeout_setting;
  const std::uint64_t seq = current.seq;
  const auto timeout = current.timeout;
  const auto began = current.began;
  const Session& session = Session::current();
  std::vector<int> world(static_cast<std::size_t>(session.size()));
  for (int r = 0; r < session.size(); ++r) world[static_cast<std::size_t>(r)] = r;
  std::vector<PeerStatus> peers;
  try {
    peers = watchdog.query(0, world, kQueryWait);
  } catch (...) {
  }
  const auto same = [](int r) { return r; };
  const auto [before, after] = gave_up_on(peers, seq, began, Clock::now(), same);
  const std::string silent = silent_ranks(world, peers, same);
  std::string message = what + " has been inside " + call + " for longer than its timeout of " + seconds_text(timeout);
  if (!before.empty() || !after.empty()) {
    message += ": " + gave_up_clause(world, before, after);
    message += " (this rank got past the arrival check on the messages sent before that), so it cannot complete. " +
               came_late("create");
  } else if (!silent.empty()) {
    message += ": a rank that gave up on it and left, or one that stopped or died, holds it up.";
  } else {
    message += ": every rank arrived at it, and one stopped or died in the middle of it.";
  }
  if (!silent.empty()) message += " No answer from rank" + silent + ".";
  message += " The MPI library cannot interrupt " + call + ", so this process ends now. " + setting +
             " sets the limit in seconds.";
  report_ending(message, session.rank());
  std::_Exit(EXIT_FAILURE);
}
}  // namespace

/// Every rank of the job must create its communicators in the same order: a fence over the
/// Session's control communicator, with the communicator's deadline, before the MPI_Comm_dup
/// (which cannot time out) and the backend's set-up.
void rendezvous_to_create(comm::Backend requested, const CommOptions& options) {
  Creations& creation = creations();
  const Session& session = Session::current();
  Signature sig{};
  sig.coll_seq = creation.progress.collectives_issued.fetch_add(1);
  // The backend and the name: two communicators of one backend created in opposite orders
  // would otherwise pair one rank's "dp" with another's "tp".
  sig.count = static_cast<std::uint64_t>(requested) ^ tessera::detail::fnv1a(options.name) << 8;
  creation.what =
      "Communicator::create #" + std::to_string(sig.coll_seq) + " (backend " + backend_name(requested) + ")";
  creation.seq = sig.coll_seq;
  creation.timeout = options.timeout;
  creation.timeout_setting = options.timeout_setting;
  creation.began = Clock::now();
  creation.progress.running_seq.store(sig.coll_seq + 1);
  const std::string& what = creation.what;
  try {
    const bool same = agree(tessera::detail::control_comm(), session.rank(), session.size(), hash_of(sig),
                            creation.buffers, kCreateTag, Deadline::after(options.timeout));
    creation.progress.running_seq.store(0);
    if (!same) {
      tessera::detail::note_communication_failure();
      throw MismatchError(what + ": ranks asked for different backends or names (this rank: '" + options.name +
                          "'), or created communicators in different orders; every rank must create the same "
                          "communicators in the same order");
    }
  } catch (const DeadlineExceeded&) {
    creation.progress.running_seq.store(0);
    // A rank that comes later may pass its rendezvous on this rank's messages: it learns
    // from here that this rank will never make the communicator (creation_stuck).
    creation.progress.gave_up_at.store(Clock::now().time_since_epoch().count());
    creation.progress.gave_up_seq.store(sig.coll_seq + 1);
    std::vector<int> world(static_cast<std::size_t>(session.size()));
    for (int r = 0; r < session.size(); ++r) world[static_cast<std::size_t>(r)] = r;
    const auto report =
        arrivals(Watchdog::instance().query(0, world, kQueryWait), world, session.rank(), sig.coll_seq, true);
    std::string message =
        what + " timed out after " + seconds_text(options.timeout) + " waiting for every rank to create it.";
    if (report.missing.empty()) {
      message +=
          " Every rank has arrived by now, but not all within the timeout: one was busy elsewhere for longer than "
          "that, or the timeout is too short for this job.";
    } else {
      message += " Ranks that did not arrive: " + grouped_ranks(world, report.missing) +
                 ". Ranks that arrived: " + rank_list(world, report.arrived) + ".";
    }
    message += " " + options.timeout_setting + " sets the limit in seconds.";
    tessera::detail::note_communication_failure();
    throw TimeoutError(message, __FILE__, __LINE__);
  }
}

/// Runs `call`, an MPI call of the create that just passed its rendezvous, named `name`,
/// watched: past the create's timeout and a grace, the watchdog ends this process with
/// creation_stuck's diagnosis (a rank later than its peers' timeout may pass the rendezvous on
/// the messages they sent before giving up, and would wait there alone).
template <class Call>
void watch_creation(const char* name, Call&& call) {
  Creations& creation = creations();
  std::optional<Clock::time_point> until;
  if (creation.timeout.count() > 0) {
    creation.call = name;
    until = Clock::now() + creation.timeout + stuck_grace(creation.timeout);
  }
  run_watched(creation.progress, until, std::forward<Call>(call));
}

void set_up_together(MPI_Comm group, const char* backend, const std::function<void()>& step) {
  std::exception_ptr error;
  try {
    step();
  } catch (...) {
    error = std::current_exception();
  }
  int world_rank = 0;
  TESSERA_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  int first = error ? world_rank : std::numeric_limits<int>::max();
  TESSERA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, group));
  if (error) std::rethrow_exception(error);
  if (first != std::numeric_limits<int>::max())
    throw CommError(std::string("the ") + backend + " backend could not be set up on rank " + std::to_string(first) +
                        " (that rank's error says why), so no rank has this communicator",
                    __FILE__, __LINE__);
}

void (*set_up_test_hook)() = nullptr;
void (*post_test_hook)() = nullptr;

namespace {
/// A communicator's set-up running on this rank (after Communicator::create's MPI_Comm_dup or
/// a split's MPI_Comm_split: its backend's set-up and the Communicator's own calls), watched.
/// Its progress is registered with the watchdog, for the set-up's length, under an id every
/// rank of it derives from the communicator's path: a peer asked about it answers whether it
/// is inside this same set-up. Its fields are written before it is registered; the step's
/// texts (SetUpStep's, literals) change while it runs.
struct SetUp {
  std::uint64_t id = 0;
  Progress progress;
  std::string what;              // "Communicator::create #2 (backend nccl)"
  std::vector<int> world_ranks;  // of the communicator being set up, in its numbering
  int rank = 0;                  // this rank's number in it
  std::chrono::milliseconds limit{0};
  std::atomic<const char*> call{nullptr}, library{nullptr}, hint{nullptr};
};
/// The set-up this thread runs (SetUpStep names its steps); none outside one.
thread_local SetUp* current_set_up = nullptr;

/// Called by the watchdog thread when a communicator's set-up has not ended past its limit: a
/// rank stopped or died in the middle of it, or the backend's own connection between the ranks
/// does not come up (NCCL's bootstrap waits for every rank without a deadline). Neither MPI nor
/// a blocking NCCL set-up can be interrupted, so this process ends, with the diagnosis; unless
/// the set-up ended meanwhile (it may, while the peers are asked).
void set_up_stuck(SetUp& s, Watchdog& watchdog) {
  const auto ended = [&] { return s.progress.inside_until.load() == 0; };
  if (ended()) return;
  std::vector<PeerStatus> peers;
  try {
    peers = watchdog.query(s.id, s.world_ranks, kQueryWait);
  } catch (...) {
  }
  if (ended()) return;
  const char* call = s.call.load();
  const char* library = s.library.load();
  const char* hint = s.hint.load();
  const auto& world = s.world_ranks;
  // The peers that did not answer, and those that answered from outside this set-up (the rest
  // are inside it, as this rank is).
  std::vector<int> silent, outside;
  for (const auto& p : peers) {
    const int r = local_rank(world, p.world_rank);
    if (r == s.rank) continue;
    if (!p.responded)
      silent.push_back(r);
    else if (!p.member || p.running_seq == 0)
      outside.push_back(r);
  }
  const bool asked = peers.size() + 1 == world.size();
  const auto ranks = [&](const std::vector<int>& r) {
    return "rank" + std::string(r.size() > 1 ? "s " : " ") + rank_list(world, r);
  };
  const auto outside_text = [&] {
    return ranks(outside) + (outside.size() > 1 ? " are" : " is") +
           " not in it (finished it, left it with an error, or not come to it yet)";
  };
  std::string message = s.what + " has been setting up its communicator of " + std::to_string(world.size()) +
                        (world.size() > 1 ? " ranks" : " rank") + " for longer than its limit of " +
                        seconds_text(s.limit) + ", inside " + (call != nullptr ? call : "the calls of its set-up");
  if (world.size() == 1) {
    message += ": no other rank takes part, so a call of this rank's own does not return.";
  } else if (!asked) {
    message += ": its peers could not be asked where they are.";
  } else if (!silent.empty()) {
    message +=
        ": no answer from " + ranks(silent) + " (dead, stopped, or stuck where " +
        (silent.size() > 1 ? "their watchdogs cannot run), which hold" : "its watchdog cannot run), which holds") +
        " it up";
    if (!outside.empty()) message += "; " + outside_text();
    message += ".";
  } else if (!outside.empty()) {
    message += ": " + outside_text() + ".";
  } else {
    message += std::string(": every rank of it is inside it, and it does not end") +
               (call != nullptr ? ": the backend cannot connect the ranks." : ".");
  }
  if (hint != nullptr && *hint != '\0') message += std::string(" ") + hint;
  message += call != nullptr ? std::string(" ") + (library != nullptr ? library : "Its library") +
                                   " cannot interrupt " + call + ", so this process ends now."
                             : std::string(
                                   " A set-up's calls (MPI's, a network's) cannot be interrupted, so this "
                                   "process ends now.");
  message += " TESSERA_COMM_SETUP_TIMEOUT sets the limit in seconds.";
  report_ending(message, world[static_cast<std::size_t>(s.rank)]);
  // Every rank of a set-up that cannot connect meets its limit at about the same moment, and
  // asks the others: where one answered, this rank answers a while longer before it ends, so
  // that one that asks after this rank had its answers is not told this rank stopped or died.
  if (silent.size() + 1 < world.size()) {
    try {
      watchdog.answer_for(kQueryWait);
    } catch (...) {
    }
  }
  std::_Exit(EXIT_FAILURE);
}
}  // namespace

SetUpStep::SetUpStep(const char* call, const char* library, const char* hint) noexcept : set_up_(current_set_up) {
  if (set_up_ == nullptr) return;
  auto& s = *static_cast<SetUp*>(set_up_);
  previous_[0] = s.call.exchange(call);
  previous_[1] = s.library.exchange(library);
  previous_[2] = s.hint.exchange(hint);
}
SetUpStep::~SetUpStep() {
  if (set_up_ == nullptr) return;
  auto& s = *static_cast<SetUp*>(set_up_);
  s.call.store(previous_[0]);
  s.library.store(previous_[1]);
  s.hint.store(previous_[2]);
}

/// Runs `body`, the set-up of the communicator at `path` on `group` (its backend's and the
/// Communicator's own calls, after the MPI call that made the group), watched: past `limit`
/// (CommOptions::set_up_limit(): longer than an op's timeout, since local work, a GPU's
/// context or a host name's lookup, comes on top of the waits for the peers, NCCL's set-up
/// on many GPUs takes minutes, and a Gloo pair's connect takes a whole timeout to fail) and
/// a grace, the watchdog ends this process with set_up_stuck's diagnosis. A rank that stops
/// or dies in the middle of it, or an NCCL bootstrap that cannot reach a rank, would
/// otherwise hold every other rank of it there silently. `what` names it
/// ("Communicator::create #2 (backend nccl)"), `name` is the communicator's.
template <class Body>
void watch_set_up(std::string what, const std::string& path, const std::string& name, MPI_Comm group,
                  std::chrono::milliseconds limit, Body&& body) {
  SetUp s;
  s.id = tessera::detail::fnv1a(path + "#set-up");
  TESSERA_CHECK_MPI(MPI_Comm_rank(group, &s.rank));
  s.world_ranks = world_ranks_of(group);
  s.what = std::move(what);
  s.limit = limit;
  // A peer asked about another communicator says this rank is setting this one up.
  s.progress.name = name.empty() ? "(unnamed)" : name;
  s.progress.set_up = true;
  s.progress.running_seq.store(1);
  s.progress.on_stuck = [&s](Watchdog& w) { set_up_stuck(s, w); };
  std::optional<Clock::time_point> until;
  if (limit.count() > 0) until = Clock::now() + limit + stuck_grace(limit);
  Watchdog::instance().add(s.id, &s.progress);
  struct Done {
    SetUp& s;
    SetUp* outer;
    ~Done() {
      current_set_up = outer;
      Watchdog::remove(s.id);  // after this, the watchdog no longer reads s
    }
  } done{s, current_set_up};
  current_set_up = &s;
  run_watched(s.progress, until, [&] {
    if (set_up_test_hook != nullptr) set_up_test_hook();
    body();
  });
}

}  // namespace detail

using detail::Op;
using detail::OpType;

// ---- Work -----------------------------------------------------------------------------

void Work::wait() {
  if (!state_) return;
  auto& w = *state_;
  std::optional<detail::CommState::WaitingFor> transfer;
  if (!w.done.load() && !detail::is_collective(w.op.type)) transfer.emplace(*w.comm, w.op);
  std::unique_lock<std::mutex> lock(w.mutex);
  while (!w.done.load()) {
    w.cv.wait_for(lock, std::chrono::milliseconds(50));
    if (w.done.load() || w.started.load()) continue;
    // A started op ends by itself: its fence and the backends other than MPI have deadlines,
    // and the watchdog ends the process when an MPI call outlives its deadline. A queued op
    // is given up when the communicator failed, or when the op ahead outlived its deadline
    // by far (stuck where no deadline reaches it); it is then taken off the queue unstarted,
    // so its buffers are never touched.
    auto& comm = *w.comm;
    // Read under the queue's lock, under which the worker stores them as an op starts: one
    // op's start and limit. The op ahead is judged by its own limit: one lowered by
    // set_timeout while it ran had given up the ops behind it as stuck, and failed the
    // communicator, while it was still in time.
    bool busy = false;
    detail::Clock::time_point ahead;
    std::chrono::milliseconds limit{0};
    {
      std::lock_guard<std::mutex> queue_lock(comm.mutex);
      busy = comm.running.load();
      ahead = detail::Clock::time_point(detail::Clock::duration(comm.running_since.load()));
      limit = std::chrono::milliseconds(comm.running_limit.load());
    }
    const bool stuck = busy && limit.count() > 0 && detail::Clock::now() - ahead > 2 * limit + std::chrono::seconds(10);
    if (!comm.failed.load() && !stuck) continue;
    {
      std::lock_guard<std::mutex> queue_lock(comm.mutex);
      if (w.started.load()) continue;
      const auto queued = std::find(comm.queue.begin(), comm.queue.end(), state_);
      if (queued != comm.queue.end()) comm.queue.erase(queued);
      comm.queued.store(comm.queue.size(), std::memory_order_release);
    }
    // The op is given up: it completes with the error, so that test() and a second wait()
    // (through this handle or a copy) report it too.
    lock.unlock();
    std::exception_ptr error;
    try {
      comm.ensure_usable();
      comm.timed_out(w.op, "queued behind an earlier operation that did not complete", false, false, /*began=*/false);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    w.error = error;
    w.done.store(true);
    w.cv.notify_all();
  }
  lock.unlock();
  if (w.error) std::rethrow_exception(w.error);
}

bool Work::test() {
  if (!state_) return true;
  if (!state_->done.load()) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

// ---- Communicator -----------------------------------------------------------------------

Communicator::Communicator(std::unique_ptr<detail::Backend> backend, CommOptions options, std::string path)
    : state_(std::make_unique<detail::CommState>(std::move(backend), std::move(options), std::move(path))) {}

Communicator::~Communicator() {
  // A worker stuck inside a failed backend call cannot be joined: let it go with its state.
  if (state_ && state_->failed.load() && state_->running.load()) {
    state_->worker.detach();
    (void)state_.release();
    tessera::detail::logger().warn(
        "communicator destroyed while an operation was stuck after a failure; "
        "its resources are leaked");
  }
}

std::unique_ptr<Communicator> Communicator::create(Backend backend, CommOptions options) {
  Session::current();
  if (!backend_compiled(backend))
    throw NotCompiledError(std::string("the ") + backend_name(backend) +
                           " backend is not compiled in; rebuild with TESSERA_ENABLE_" +
                           (backend == Backend::Gloo ? "GLOO" : "NCCL") + "=ON");
  detail::rendezvous_to_create(backend, options);
  const Backend requested = backend;
  if (backend == Backend::Auto) {
    // NCCL when the model's memory is a GPU's and every rank has a GPU of its own; MPI
    // otherwise (device buffers are then staged through host memory).
    const bool device_build = memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device;
    bool nccl = false;
    if (device_build)
      detail::watch_creation("the MPI calls that ask whether every rank has a GPU of its own",
                             [&] { nccl = detail::nccl_one_gpu_per_rank(MPI_COMM_WORLD); });
    backend = nccl ? Backend::Nccl : Backend::Mpi;
  }
  static std::atomic<int> roots{0};
  const std::string path = "c" + std::to_string(roots++);
  MPI_Comm group;
  detail::watch_creation("MPI_Comm_dup", [&] { TESSERA_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &group)); });
  // "Communicator::create #2 (backend auto: nccl)" where Auto chose.
  std::string what = detail::creations().what;
  if (requested == Backend::Auto) what.insert(what.size() - 1, std::string(": ") + backend_name(backend));
  std::unique_ptr<Communicator> made;
  const std::string name = options.name;
  detail::watch_set_up(std::move(what), path, name, group, options.set_up_limit(), [&] {
    std::unique_ptr<detail::Backend> impl;
    switch (backend) {
      case Backend::Gloo:
        impl = detail::make_gloo_backend(group, options);
        break;
      case Backend::Nccl:
        impl = detail::make_nccl_backend(group, options);
        break;
      default:
        impl = detail::make_mpi_backend(group);
        break;
    }
    made = std::make_unique<Communicator>(std::move(impl), std::move(options), path);
  });
  return made;
}

bool backend_compiled(Backend backend) noexcept {
  switch (backend) {
    case Backend::Gloo:
      return TESSERA_HAVE_GLOO != 0;
    case Backend::Nccl:
      return TESSERA_HAVE_NCCL != 0;
    default:
      return true;
  }
}

detail::Backend& Communicator::backend_impl() noexcept { return *state_->backend; }
int Communicator::rank() const noexcept { return state_->rank; }
int Communicator::size() const noexcept { return state_->size; }
Backend Communicator::backend() const noexcept { return state_->backend->kind(); }
const std::string& Communicator::name() const noexcept { return state_->options.name; }
std::chrono::milliseconds Communicator::timeout() const noexcept { return state_->timeout(); }
void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0)
    throw ConfigError("tessera::comm::set_timeout: " + std::to_string(timeout.count()) +
                      " ms is negative; give a duration > 0, or 0 to wait forever");
  state_->timeout_ms.store(timeout.count(), std::memory_order_relaxed);
  tessera::detail::note_comm_timeout(state_->id, timeout);
}
bool Communicator::check_enabled() const noexcept { return state_->options.check; }
void Communicator::set_check(bool enabled) {
  // Collective, as it is documented: the ranks compare what they ask for first (an
  // all_gather in the mode they are all in). Ranks left in different modes wait in fences
  // that never meet: the next op hung until the timeout, reported as a rank that never came.
  std::vector<std::int32_t> asked(static_cast<std::size_t>(size()), 0);
  const std::int32_t mine = enabled ? 1 : 0;
  all_gather({&mine, 1}, {asked.data(), asked.size()});
  std::vector<int> on, off;
  for (int r = 0; r < size(); ++r) (asked[static_cast<std::size_t>(r)] != 0 ? on : off).push_back(r);
  if (!on.empty() && !off.empty())
    throw MismatchError("set_check on communicator '" + state_->options.name + "': rank" +
                            (on.size() > 1 ? "s " : " ") + detail::rank_list(state_->world_ranks, on) +
                            " asked for it on, rank" + (off.size() > 1 ? "s " : " ") +
                            detail::rank_list(state_->world_ranks, off) +
                            " for it off; every rank must call set_check with the same value. The mode is unchanged.",
                        __FILE__, __LINE__);
  state_->options.check = enabled;
}
std::uint64_t Communicator::ops_issued() const noexcept { return state_->progress.ops_issued.load(); }
bool Communicator::usable() const noexcept { return !state_->failed.load(); }

int Communicator::world_rank(int r) const {
  if (r < 0 || r >= size())
    throw ConfigError("tessera::comm::world_rank: rank " + std::to_string(r) + " is outside [0, " +
                      std::to_string(size()) + ")");
  return state_->world_ranks[static_cast<std::size_t>(r)];
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  auto& s = *state_;
  s.ensure_usable();
  while (!s.idle()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  const int index = s.splits++;
  // MPI_Comm_split cannot time out: a fence first, so that it starts only once every rank
  // has come to this split, and a rank that never comes is a TimeoutError.
  Op op;
  op.type = OpType::Split;
  op.seq = s.progress.ops_issued.fetch_add(1);
  op.coll_seq = s.progress.collectives_issued.fetch_add(1);
  op.check = s.options.check;
  s.progress.last_op.store(static_cast<std::uint8_t>(op.type));
  s.rendezvous(op);
  // Watched: a rank that came after its peers' timeout may pass the fence on the messages
  // they sent before giving up, and would wait in MPI_Comm_split alone (stuck() says so).
  MPI_Comm child;
  s.watched(op, detail::Deadline::after(s.timeout()), 1, [&] {
    TESSERA_CHECK_MPI(MPI_Comm_split(s.backend->group(), color < 0 ? MPI_UNDEFINED : color, key, &child));
  });
  CommOptions options = s.options;
  options.timeout = s.timeout();  // the parent's, as set_timeout() left it
  options.name = name.empty() ? s.options.name + "." + std::to_string(color) : name;
  // The ranks of one group must give it one name. Ranks that issue their splits in other
  // orders (split "a" then "b" on one, "b" then "a" on another) pair each split with the
  // others' of the same number: their groups were made of the other split's ranks, in
  // silence. Every rank of the parent compares them (so that every rank raises the same
  // error, not a group's alone while the others wait for it): each is here, just out of
  // MPI_Comm_split, so this exchange waits for none.
  {
    struct Given {
      std::int64_t color;
      std::uint64_t hash;  // of the whole name
      char shown[48];
    } mine{};
    mine.color = color < 0 ? -1 : color;
    mine.hash = tessera::detail::fnv1a(options.name);
    std::copy_n(options.name.begin(), std::min(options.name.size(), sizeof mine.shown - 1), mine.shown);
    std::vector<Given> all(static_cast<std::size_t>(s.size));
    TESSERA_CHECK_MPI(
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, s.backend->group()));
    std::map<std::int64_t, std::uint64_t> name_of_color;
    std::int64_t differs = -1;
    for (const Given& g : all) {
      if (g.color < 0) continue;
      const auto [it, first] = name_of_color.emplace(g.color, g.hash);
      if (!first && it->second != g.hash) {
        differs = g.color;
        break;
      }
    }
    if (differs >= 0) {
      std::string names;
      int shown = 0, more = 0;
      for (int q = 0; q < s.size; ++q) {
        const Given& g = all[static_cast<std::size_t>(q)];
        if (g.color != differs) continue;
        if (shown++ >= 8) {
          ++more;
          continue;
        }
        names += std::string(names.empty() ? "" : ", ") + "world rank " +
                 std::to_string(s.world_ranks[static_cast<std::size_t>(q)]) + " '" + g.shown + "'";
      }
      if (more > 0) names += ", and " + std::to_string(more) + " more";
      if (child != MPI_COMM_NULL) MPI_Comm_free(&child);
      throw MismatchError("split #" + std::to_string(index) + " of communicator '" + s.options.name +
                              "': the ranks of its group of color " + std::to_string(differs) +
                              " gave it different names (" + names +
                              "): ranks that issue their splits in other orders pair each with the others' split of "
                              "the same number. Every rank must split in the same order; the names of one group must "
                              "agree",
                          __FILE__, __LINE__);
    }
  }
  if (child == MPI_COMM_NULL) return nullptr;
  const std::string path = s.path + "/" + std::to_string(index) + ":" + std::to_string(color);
  const std::string child_name = options.name;
  std::unique_ptr<Communicator> made;
  detail::watch_set_up("split #" + std::to_string(index) + " of communicator '" + s.options.name + "' into '" +
                           child_name + "' (backend " + backend_name(s.backend->kind()) + ")",
                       path, child_name, child, options.set_up_limit(), [&] {
                         auto backend = s.backend->make_child(child, options);
                         made = std::make_unique<Communicator>(std::move(backend), std::move(options), path);
                       });
  return made;
}

namespace {
/// Bytes one rank sends, on average over the ranks, when `op` runs on a bandwidth-optimal
/// schedule: a ring for all_reduce, all_gather, reduce_scatter and all_to_all, a pipelined
/// chain for broadcast and reduce, the root alone for scatter and gather (nccl-tests'
/// bus-bandwidth factors, per rank).
double modelled_bytes(const Op& op, int ranks) {
  const double n = ranks, block = static_cast<double>(op.count * dtype_size(op.dtype));
  if (ranks < 2) return op.type == OpType::Send ? block : 0.0;
  switch (op.type) {
    case OpType::AllReduce:
      return 2 * (n - 1) / n * block;
    case OpType::AllGather:
    case OpType::ReduceScatter:
    case OpType::AllToAll:
      return (n - 1) * block;  // count is the per-rank block
    case OpType::Broadcast:
    case OpType::Reduce:
      return (n - 1) / n * block;
    case OpType::Scatter:
    case OpType::Gather:
      return (n - 1) / n * block;  // the root's (n-1) blocks, over n ranks
    case OpType::Send:
      return block;
    default:
      return 0.0;
  }
}
}  // namespace

double Communicator::bytes_sent() const noexcept { return state_->bytes_sent; }

Work Communicator::submit(Op op, bool async) {
  auto& s = *state_;
  op.timeout = s.timeout();
  if (op.refusal) {
    // Refused here. A collective still takes its place in the order, blocking, so that the
    // other ranks learn of it at the fence (on a backend that has one) and fail there with a
    // MismatchError rather than wait out the timeout for this rank; this rank raises its own
    // error. A failed communicator, or a send or receive, has nothing to tell.
    if (!detail::is_collective(op.type)) std::rethrow_exception(op.refusal);
    try {
      s.ensure_usable();
    } catch (const Error&) {
      std::rethrow_exception(op.refusal);
    }
    async = false;
  }
  s.ensure_usable();
  s.bytes_sent += modelled_bytes(op, s.size);
  op.seq = s.progress.ops_issued.fetch_add(1);
  op.check = s.options.check;
  if (detail::is_collective(op.type)) op.coll_seq = s.progress.collectives_issued.fetch_add(1);
  s.progress.last_op.store(static_cast<std::uint8_t>(op.type));
  // Device buffers are written by kernels that may still run (asynchronously, on another
  // stream than the backend's): wait for the default execution space's here, on the thread
  // that launched them. Only for that instance: a global fence would also wait for the
  // reductions already in flight on the backend's streams.
  if ((op.memory == MemoryKind::Device || op.send.device_written || op.recv.device_written) &&
      !(s.runs_alone(op) && op.send.data == op.recv.data))
    Kokkos::DefaultExecutionSpace().fence();
  if (!detail::is_collective(op.type)) return submit_transfer(op, async);
  if (op.refusal) {
    try {
      if (s.idle()) {
        s.run(op);
      } else {
        auto w = std::make_shared<detail::WorkState>();
        w->op = op;
        w->comm = &s;
        s.enqueue(w);
        Work(w).wait();
      }
    } catch (const MismatchError&) {
      // The mismatch the other ranks raise too: this rank's own error says what was wrong.
    } catch (const Error& e) {
      // The fence itself failed (a rank did not come): both are told.
      try {
        std::rethrow_exception(op.refusal);
      } catch (const Error& refused) {
        throw ConfigError(refused.message() + "; and at this collective's fence, which it still took: " + e.message());
      }
    }
    std::rethrow_exception(op.refusal);
  }
  if (!async && s.idle()) {
    s.run(op);
    return {};
  }
  auto w = std::make_shared<detail::WorkState>();
  w->op = op;
  w->comm = &s;
  s.enqueue(w);
  Work work(w);
  if (async) return work;
  work.wait();
  return {};
}

Work Communicator::submit_transfer(Op op, bool async) {
  auto& s = *state_;
  if (op.count == 0) return {};
  if (s.backend->orders_all_ops()) {
    // After the collectives queued before it (each ends by its deadline), never beside them.
    while (!s.idle()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    s.ensure_usable();
  }
  s.progress.last_transfer_bytes.store(op.count * dtype_size(op.dtype));
  s.progress.last_transfer.store(s.transfer_key(op));
  auto w = std::make_shared<detail::WorkState>();
  w->comm = &s;
  w->started_at = detail::Clock::now();
  w->started.store(true);
  w->op = op;
  detail::CommState::Transfer t;
  t.work = w;
  t.deadline = detail::Deadline::after(s.timeout());
  Op posted = op;
  if (!s.backend->accepts(op.memory)) {
    const MemoryKind wire = tessera::detail::other(op.memory);
    const std::size_t bytes = op.count * dtype_size(op.dtype);
    t.staging = s.transfer_staging.take(wire, bytes);
    Buffer staged(t.staging->data(), op.count, op.dtype, wire);
    if (op.type == OpType::Send) {
      tessera::detail::copy_bytes(staged.data, wire, op.send.data, op.memory, bytes);
      posted.send = staged;
    } else {
      posted.recv = staged;
    }
    posted.memory = wire;
  }
  try {
    s.watched_post(op, t.deadline, [&] { t.pending = s.backend->post(posted, t.deadline); });
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    s.fail(e.message());
    throw;
  }
  if (async) {
    try {
      s.enqueue(std::move(t));
    } catch (const std::exception& e) {
      s.fail(std::string("could not hand a posted ") + (op.type == OpType::Send ? "send" : "receive") +
             " to the transfer thread: " + e.what());
      s.drop(t, "could not be handed to the transfer thread");
      throw;
    }
    return Work(w);
  }
  s.finish(t);
  if (w->error) std::rethrow_exception(w->error);
  return {};
}

// ---- argument checks --------------------------------------------------------------------

namespace {
[[noreturn]] void bad(const char* fn, const std::string& what) {
  throw ConfigError(std::string("tessera::comm::") + fn + ": " + what);
}

const char* memory_name(MemoryKind m) { return m == MemoryKind::Host ? "host" : "device"; }

bool overlaps(const Buffer& a, std::size_t a_n, const Buffer& b, std::size_t b_n) {
  if (a_n == 0 || b_n == 0) return false;
  const auto* pa = static_cast<const char*>(a.data);
  const auto* pb = static_cast<const char*>(b.data);
  const std::size_t esz = dtype_size(a.dtype);
  return pa < pb + b_n * esz && pb < pa + a_n * esz;
}

const char* offset_of(const Buffer& base, std::size_t elements) {
  return static_cast<const char*>(base.data) + elements * dtype_size(base.dtype);
}

/// More elements than any buffer holds (a petabyte): a count that wrapped around, such as a
/// negative difference converted to size_t, which would run the op past the buffer's end.
constexpr std::size_t kLargestBufferBytes = std::size_t(1) << 50;

struct Checker {
  const char* fn;
  const detail::CommState& s;

  void data(const Buffer& b, std::size_t needed, const char* which) const {
    if (b.count > kLargestBufferBytes / dtype_size(b.dtype))
      bad(fn, std::string(which) + " has " + std::to_string(b.count) +
                  " elements, more than any buffer holds (a count below 0 converted to an unsigned size?)");
    if (needed > 0 && b.data == nullptr)
      bad(fn, std::string(which) + " is null but " + std::to_string(needed) + " elements are needed");
  }
  void capacity(const Buffer& b, std::size_t needed, const char* which, const std::string& formula) const {
    if (b.count < needed)
      bad(fn, std::string(which) + " has " + std::to_string(b.count) + " elements, needs " + formula + " = " +
                  std::to_string(needed));
    data(b, needed, which);
  }
  /// size() * n, where the op moves that many elements (checked: n was checked alone).
  std::size_t all(std::size_t n, DType dtype, const char* which) const {
    if (n > kLargestBufferBytes / dtype_size(dtype) / static_cast<std::size_t>(s.size))
      bad(fn, std::string(which) + " has " + std::to_string(n) + " elements, and size() times that (" +
                  std::to_string(s.size) +
                  " ranks) is more than any buffer holds (a count below 0 converted to an unsigned size?)");
    return n * static_cast<std::size_t>(s.size);
  }
  void root(int r) const {
    if (r < 0 || r >= s.size)
      bad(fn, "root " + std::to_string(r) + " is out of range; this communicator has ranks 0.." +
                  std::to_string(s.size - 1));
  }
  void same_type(const Buffer& a, const Buffer& b) const {
    if (a.dtype != b.dtype)
      bad(fn, std::string("input is ") + dtype_name(a.dtype) + " but output is " + dtype_name(b.dtype) +
                  "; both must have the same dtype");
    if (a.memory != b.memory)
      bad(fn, std::string("input is in ") + memory_name(a.memory) + " memory but output is in " +
                  memory_name(b.memory) + " memory; use the same kind for both");
  }
  void reduce_op(ReduceOp op, DType dtype) const {
    const auto value = static_cast<int>(op);
    if (value < static_cast<int>(ReduceOp::Sum) || value > static_cast<int>(ReduceOp::Avg))
      bad(fn, "reduce op " + std::to_string(value) + " is not one of sum, prod, min, max, avg");
    if (op == ReduceOp::Avg && !is_floating(dtype))
      bad(fn, std::string("avg is defined for floating-point dtypes only, not ") + dtype_name(dtype) +
                  "; use sum and divide");
  }
  void no_overlap(const Buffer& a, std::size_t a_n, const Buffer& b, std::size_t b_n,
                  const std::string& allowed) const {
    if (overlaps(a, a_n, b, b_n))
      bad(fn, "input and output overlap" + (allowed.empty() ? std::string("; use separate buffers")
                                                            : "; the only in-place form allowed is " + allowed));
  }
};

Checker checker(const char* fn, const detail::CommState& s) { return Checker{fn, s}; }
}  // namespace

namespace {
using detail::CommState;

Op make_broadcast(const CommState& s, Buffer b, int root) {
  const auto c = checker("broadcast", s);
  c.root(root);
  c.data(b, b.count, "buffer");
  Op op;
  op.type = OpType::Broadcast;
  op.send = op.recv = b;
  op.count = b.count;
  op.dtype = b.dtype;
  op.memory = b.memory;
  op.root = root;
  return op;
}

Op make_scatter(const CommState& s, Buffer send, Buffer recv, int root) {
  const auto c = checker("scatter", s);
  c.root(root);
  const std::size_t n = recv.count;
  c.data(recv, n, "output");
  const std::size_t all = c.all(n, recv.dtype, "output");
  if (s.rank == root) {
    c.same_type(send, recv);
    c.capacity(send, all, "input", "size()*output = " + std::to_string(s.size) + "*" + std::to_string(n));
    if (static_cast<const char*>(recv.data) != offset_of(send, n * static_cast<std::size_t>(root)))
      c.no_overlap(send, all, recv, n, "output == input + root*count at the root");
  } else {
    send = Buffer(nullptr, 0, recv.dtype, recv.memory);
  }
  Op op;
  op.type = OpType::Scatter;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = recv.dtype;
  op.memory = recv.memory;
  op.root = root;
  return op;
}

Op make_gather(const CommState& s, Buffer send, Buffer recv, int root) {
  const auto c = checker("gather", s);
  c.root(root);
  const std::size_t n = send.count;
  c.data(send, n, "input");
  const std::size_t all = c.all(n, send.dtype, "input");
  if (s.rank == root) {
    c.same_type(send, recv);
    c.capacity(recv, all, "output", "size()*input = " + std::to_string(s.size) + "*" + std::to_string(n));
    if (static_cast<const char*>(send.data) != offset_of(recv, n * static_cast<std::size_t>(root)))
      c.no_overlap(send, n, recv, all, "input == output + root*count at the root");
  } else {
    recv = Buffer(nullptr, 0, send.dtype, send.memory);
  }
  Op op;
  op.type = OpType::Gather;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = send.dtype;
  op.memory = send.memory;
  op.root = root;
  return op;
}

Op make_reduce(const CommState& s, Buffer send, Buffer recv, ReduceOp rop, int root) {
  const auto c = checker("reduce", s);
  c.root(root);
  const std::size_t n = send.count;
  c.data(send, n, "input");
  c.reduce_op(rop, send.dtype);
  if (s.rank == root) {
    c.same_type(send, recv);
    c.capacity(recv, n, "output", "input");
    if (send.data != recv.data) c.no_overlap(send, n, recv, n, "output == input");
  } else {
    recv = Buffer(nullptr, 0, send.dtype, send.memory);
  }
  Op op;
  op.type = OpType::Reduce;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = send.dtype;
  op.memory = send.memory;
  op.reduce = rop;
  op.root = root;
  return op;
}

Op make_all_reduce(const CommState& s, Buffer send, Buffer recv, ReduceOp rop) {
  const auto c = checker("all_reduce", s);
  const std::size_t n = send.count;
  c.data(send, n, "input");
  c.same_type(send, recv);
  c.reduce_op(rop, send.dtype);
  c.capacity(recv, n, "output", "input");
  if (send.data != recv.data) c.no_overlap(send, n, recv, n, "output == input");
  Op op;
  op.type = OpType::AllReduce;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = send.dtype;
  op.memory = send.memory;
  op.reduce = rop;
  return op;
}

Op make_all_gather(const CommState& s, Buffer send, Buffer recv) {
  const auto c = checker("all_gather", s);
  const std::size_t n = send.count;
  c.data(send, n, "input");
  const std::size_t all = c.all(n, send.dtype, "input");
  c.same_type(send, recv);
  c.capacity(recv, all, "output", "size()*input = " + std::to_string(s.size) + "*" + std::to_string(n));
  if (static_cast<const char*>(send.data) != offset_of(recv, n * static_cast<std::size_t>(s.rank)))
    c.no_overlap(send, n, recv, all, "input == output + rank*count");
  Op op;
  op.type = OpType::AllGather;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = send.dtype;
  op.memory = send.memory;
  return op;
}

Op make_reduce_scatter(const CommState& s, Buffer send, Buffer recv, ReduceOp rop) {
  const auto c = checker("reduce_scatter", s);
  if (send.count % static_cast<std::size_t>(s.size) != 0)
    bad("reduce_scatter", "input has " + std::to_string(send.count) + " elements, which does not divide into " +
                              std::to_string(s.size) + " equal blocks (one per rank)");
  const std::size_t n = send.count / static_cast<std::size_t>(s.size);
  c.data(send, send.count, "input");
  c.same_type(send, recv);
  c.reduce_op(rop, send.dtype);
  c.capacity(recv, n, "output", "input/size() = " + std::to_string(send.count) + "/" + std::to_string(s.size));
  if (static_cast<const char*>(recv.data) != offset_of(send, n * static_cast<std::size_t>(s.rank)))
    c.no_overlap(send, send.count, recv, n, "output == input + rank*count");
  Op op;
  op.type = OpType::ReduceScatter;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = send.dtype;
  op.memory = send.memory;
  op.reduce = rop;
  return op;
}

Op make_all_to_all(const CommState& s, Buffer send, Buffer recv) {
  const auto c = checker("all_to_all", s);
  if (send.count % static_cast<std::size_t>(s.size) != 0)
    bad("all_to_all", "input has " + std::to_string(send.count) + " elements, which does not divide into " +
                          std::to_string(s.size) + " equal blocks (one per rank)");
  const std::size_t n = send.count / static_cast<std::size_t>(s.size);
  c.data(send, send.count, "input");
  c.same_type(send, recv);
  c.capacity(recv, send.count, "output", "input");
  c.no_overlap(send, send.count, recv, send.count, "");
  Op op;
  op.type = OpType::AllToAll;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = send.dtype;
  op.memory = send.memory;
  return op;
}

Op make_p2p(const CommState& s, OpType type, Buffer b, int peer, int tag) {
  const char* fn = type == OpType::Send ? "send" : "recv";
  const auto c = checker(fn, s);
  if (peer < 0 || peer >= s.size)
    bad(fn, "peer " + std::to_string(peer) + " is out of range; this communicator has ranks 0.." +
                std::to_string(s.size - 1));
  if (tag < 0) bad(fn, "tag " + std::to_string(tag) + " is negative; use a tag >= 0");
  if (peer == s.rank) bad(fn, "peer is this rank itself (" + std::to_string(peer) + "); copy the data locally");
  c.data(b, b.count, "buffer");
  Op op;
  op.type = type;
  (type == OpType::Send ? op.send : op.recv) = b;
  op.count = b.count;
  op.dtype = b.dtype;
  op.memory = b.memory;
  op.peer = peer;
  op.tag = tag;
  return op;
}

Op make_barrier() {
  Op op;
  op.type = OpType::Barrier;
  return op;
}

/// The op `make` builds or, where this rank refuses its arguments (a ConfigError), an op of
/// the same type that carries the error (Communicator::submit: a collective still takes its
/// place at the fence, so the other ranks fail at once instead of after the timeout).
template <class Make>
Op or_refused(OpType type, Make&& make) {
  try {
    return make();
  } catch (const ConfigError&) {
    Op op;
    op.type = type;
    op.refusal = std::current_exception();
    return op;
  }
}
}  // namespace

void Communicator::broadcast(Buffer b, int root) {
  submit(or_refused(OpType::Broadcast, [&] { return make_broadcast(*state_, b, root); }), false);
}
void Communicator::scatter(Buffer s, Buffer r, int root) {
  submit(or_refused(OpType::Scatter, [&] { return make_scatter(*state_, s, r, root); }), false);
}
void Communicator::gather(Buffer s, Buffer r, int root) {
  submit(or_refused(OpType::Gather, [&] { return make_gather(*state_, s, r, root); }), false);
}
void Communicator::reduce(Buffer s, Buffer r, ReduceOp op, int root) {
  submit(or_refused(OpType::Reduce, [&] { return make_reduce(*state_, s, r, op, root); }), false);
}
void Communicator::all_reduce(Buffer s, Buffer r, ReduceOp op) {
  submit(or_refused(OpType::AllReduce, [&] { return make_all_reduce(*state_, s, r, op); }), false);
}
void Communicator::all_reduce(Buffer b, ReduceOp op) {
  submit(or_refused(OpType::AllReduce, [&] { return make_all_reduce(*state_, b, b, op); }), false);
}
void Communicator::all_gather(Buffer s, Buffer r) {
  submit(or_refused(OpType::AllGather, [&] { return make_all_gather(*state_, s, r); }), false);
}
void Communicator::reduce_scatter(Buffer s, Buffer r, ReduceOp op) {
  submit(or_refused(OpType::ReduceScatter, [&] { return make_reduce_scatter(*state_, s, r, op); }), false);
}
void Communicator::all_to_all(Buffer s, Buffer r) {
  submit(or_refused(OpType::AllToAll, [&] { return make_all_to_all(*state_, s, r); }), false);
}
void Communicator::barrier() { submit(make_barrier(), false); }
void Communicator::send(Buffer b, int peer, int tag) { submit(make_p2p(*state_, OpType::Send, b, peer, tag), false); }
void Communicator::recv(Buffer b, int peer, int tag) { submit(make_p2p(*state_, OpType::Recv, b, peer, tag), false); }

Work Communicator::broadcast_async(Buffer b, int root) {
  return submit(or_refused(OpType::Broadcast, [&] { return make_broadcast(*state_, b, root); }), true);
}
Work Communicator::scatter_async(Buffer s, Buffer r, int root) {
  return submit(or_refused(OpType::Scatter, [&] { return make_scatter(*state_, s, r, root); }), true);
}
Work Communicator::gather_async(Buffer s, Buffer r, int root) {
  return submit(or_refused(OpType::Gather, [&] { return make_gather(*state_, s, r, root); }), true);
}
Work Communicator::reduce_async(Buffer s, Buffer r, ReduceOp op, int root) {
  return submit(or_refused(OpType::Reduce, [&] { return make_reduce(*state_, s, r, op, root); }), true);
}
Work Communicator::all_reduce_async(Buffer s, Buffer r, ReduceOp op) {
  return submit(or_refused(OpType::AllReduce, [&] { return make_all_reduce(*state_, s, r, op); }), true);
}
Work Communicator::all_reduce_async(Buffer b, ReduceOp op) {
  return submit(or_refused(OpType::AllReduce, [&] { return make_all_reduce(*state_, b, b, op); }), true);
}
Work Communicator::all_gather_async(Buffer s, Buffer r) {
  return submit(or_refused(OpType::AllGather, [&] { return make_all_gather(*state_, s, r); }), true);
}
Work Communicator::reduce_scatter_async(Buffer s, Buffer r, ReduceOp op) {
  return submit(or_refused(OpType::ReduceScatter, [&] { return make_reduce_scatter(*state_, s, r, op); }), true);
}
Work Communicator::all_to_all_async(Buffer s, Buffer r) {
  return submit(or_refused(OpType::AllToAll, [&] { return make_all_to_all(*state_, s, r); }), true);
}
Work Communicator::barrier_async() { return submit(make_barrier(), true); }
Work Communicator::send_async(Buffer b, int peer, int tag) {
  return submit(make_p2p(*state_, OpType::Send, b, peer, tag), true);
}
Work Communicator::recv_async(Buffer b, int peer, int tag) {
  return submit(make_p2p(*state_, OpType::Recv, b, peer, tag), true);
}

}  // namespace tessera::comm
