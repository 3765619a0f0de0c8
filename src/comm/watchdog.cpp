#include "comm/watchdog.hpp"

#include <tessera/core/session.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "comm/backend.hpp"
#include "core/log.hpp"
#include "core/mpi_check.hpp"

namespace tessera::comm::detail {
namespace {
constexpr int kQueryTag = 7001;
constexpr int kReplyTag = 7002;

struct Reply {
  std::uint64_t query_id;
  std::uint64_t collectives_issued;
  std::uint64_t running_seq;
  std::uint64_t gave_up_seq;
  std::uint64_t gave_up_us_ago;  // a duration, not a time: the two ranks' clocks differ
  std::uint64_t busy_seq;        // where the asked communicator runs nothing: a collective that runs
                                 // on another, its number + 1 (0: none runs anywhere)
  std::uint64_t last_transfer;   // the asked communicator's Progress::last_transfer and its bytes
  std::uint64_t last_transfer_bytes;
  std::uint8_t member;
  std::uint8_t failed;
  std::uint8_t last_op;
  std::uint8_t running_op;
  std::uint8_t busy_op;
  std::int32_t busy_peer;  // where no collective runs: the peer's world rank + 1 of a send or
                           // receive this rank waits in (busy_op), on any communicator; 0: none
  char busy_name[40];      // that communicator's name, cut to fit
};

std::atomic<std::uint64_t> g_next_query{1};

std::mutex g_instance_mutex;
Watchdog* g_instance = nullptr;
}  // namespace

Watchdog& Watchdog::instance() {
  std::lock_guard<std::mutex> lock(g_instance_mutex);
  if (g_instance == nullptr) {
    g_instance = new Watchdog();
    Session::at_finalize([] {
      std::lock_guard<std::mutex> l(g_instance_mutex);
      g_instance->stop();
      delete g_instance;
      g_instance = nullptr;
    });
  }
  return *g_instance;
}

Watchdog::Watchdog() {
  Session::current();                          // throws a clear error when there is no Session
  control_ = tessera::detail::control_comm();  // made by the Session: nothing collective here
  TESSERA_CHECK_MPI(MPI_Comm_rank(control_, &world_rank_));
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::add(std::uint64_t comm_id, const Progress* progress) {
  std::lock_guard<std::mutex> lock(registry_mutex_);
  registry_[comm_id] = progress;
}

void Watchdog::remove(std::uint64_t comm_id) {
  std::lock_guard<std::mutex> lock(g_instance_mutex);
  if (g_instance == nullptr) return;
  std::lock_guard<std::mutex> l(g_instance->registry_mutex_);
  g_instance->registry_.erase(comm_id);
}

/// Answers every question waiting on the control communicator.
void Watchdog::answer_questions(bool registry_locked) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    TESSERA_CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, control_, &flag, &status));
    if (!flag) break;
    Query q{};
    TESSERA_CHECK_MPI(MPI_Recv(&q, sizeof q, MPI_BYTE, status.MPI_SOURCE, kQueryTag, control_, MPI_STATUS_IGNORE));
    const std::uint64_t comm_id = q.comm_id;
    Reply reply{};
    reply.query_id = q.query_id;
    {
      std::unique_lock<std::mutex> l(registry_mutex_, std::defer_lock);
      if (!registry_locked) l.lock();
      auto it = registry_.find(comm_id);
      if (it != registry_.end()) {
        reply.member = 1;
        reply.failed = it->second->failed.load() ? 1 : 0;
        reply.collectives_issued = it->second->collectives_issued.load();
        reply.last_op = it->second->last_op.load();
        reply.running_seq = it->second->running_seq.load();
        reply.running_op = it->second->running_op.load();
        reply.gave_up_seq = it->second->gave_up_seq.load();
        if (reply.gave_up_seq != 0) {
          const auto at =
              std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(it->second->gave_up_at.load()));
          reply.gave_up_us_ago = static_cast<std::uint64_t>(std::max<std::int64_t>(
              0, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - at).count()));
        }
        // The size belongs to the key only if the key did not change while it was read.
        const std::uint64_t key = it->second->last_transfer.load();
        reply.last_transfer_bytes = it->second->last_transfer_bytes.load();
        reply.last_transfer = it->second->last_transfer.load() == key ? key : 0;
      }
      if (reply.running_seq == 0)
        for (const auto& [id, progress] : registry_) {
          const std::uint64_t seq = progress->running_seq.load();
          if (id == comm_id || seq == 0 || progress->set_up) continue;
          reply.busy_seq = seq;
          reply.busy_op = progress->running_op.load();
          std::snprintf(reply.busy_name, sizeof reply.busy_name, "%s", progress->name.c_str());
          break;
        }
      if (reply.running_seq == 0 && reply.busy_seq == 0)
        for (const auto& [id, progress] : registry_) {
          const std::uint64_t waiting = progress->waiting_transfer.load();
          if (waiting == 0) continue;
          reply.busy_op = static_cast<std::uint8_t>(waiting >> 32);
          reply.busy_peer = static_cast<std::int32_t>(waiting & 0xffffffffu);
          std::snprintf(reply.busy_name, sizeof reply.busy_name, "%s", progress->name.c_str());
          break;
        }
      if (reply.running_seq == 0 && reply.busy_seq == 0 && reply.busy_peer == 0)
        for (const auto& [id, progress] : registry_) {
          if (id == comm_id || !progress->set_up || progress->running_seq.load() == 0) continue;
          reply.busy_seq = 1;
          reply.busy_op = kSetUpOp;
          std::snprintf(reply.busy_name, sizeof reply.busy_name, "%s", progress->name.c_str());
          break;
        }
    }
    // The reply is small enough to go eagerly; the asker has posted its receive.
    TESSERA_CHECK_MPI(MPI_Send(&reply, sizeof reply, MPI_BYTE, status.MPI_SOURCE, kReplyTag, control_));
  }
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      answer_questions(false);
    } catch (const std::exception& e) {
      tessera::detail::logger().warn("watchdog: {}", e.what());
    }
    // An op inside a backend call past its deadline (an MPI collective whose peer stopped
    // in the middle of it) cannot be interrupted: its communicator ends the process.
    // Under the registry's lock, so that the communicator cannot be removed and destroyed
    // meanwhile; on_stuck asks the peers through *this, not through instance().
    {
      const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      std::lock_guard<std::mutex> l(registry_mutex_);
      for (const auto& [id, progress] : registry_) {
        const auto until = progress->inside_until.load(std::memory_order_acquire);
        if (until != 0 && now > until && progress->on_stuck) progress->on_stuck(*this);
        const auto posting = progress->posting_until.load(std::memory_order_acquire);
        if (posting != 0 && now > posting && progress->on_post_stuck) progress->on_post_stuck(*this);
      }
    }
    lock.lock();
    stop_cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

void Watchdog::answer_for(std::chrono::milliseconds duration) {
  const auto until = Clock::now() + duration;
  while (Clock::now() < until) {
    answer_questions(true);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::vector<PeerStatus> Watchdog::query(std::uint64_t comm_id, const std::vector<int>& ranks,
                                        std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(query_mutex_);
  // The sends read the query until they complete: where a dead peer never takes one, the
  // query stays in abandoned_ (a deque: its elements never move) for the process.
  abandoned_.push_back(Query{comm_id, g_next_query.fetch_add(1)});
  const Query& query = abandoned_.back();
  std::vector<PeerStatus> result;
  std::vector<Reply> replies;
  std::vector<MPI_Request> sends, recvs;
  replies.reserve(ranks.size());
  for (int peer : ranks) {
    if (peer == world_rank_) continue;
    PeerStatus s;
    s.world_rank = peer;
    result.push_back(s);
    replies.push_back({});
    recvs.push_back(MPI_REQUEST_NULL);
    sends.push_back(MPI_REQUEST_NULL);
    TESSERA_CHECK_MPI(MPI_Irecv(&replies.back(), sizeof(Reply), MPI_BYTE, peer, kReplyTag, control_, &recvs.back()));
    TESSERA_CHECK_MPI(MPI_Isend(&query, sizeof query, MPI_BYTE, peer, kQueryTag, control_, &sends.back()));
  }
  const auto deadline = Clock::now() + wait;
  std::size_t pending = recvs.size();
  // Asked from the watchdog's own thread (a communicator stuck inside a backend call asks
  // from there, with the registry locked), nothing else answers this rank's peers meanwhile,
  // and they may be stuck in the same call and asking this rank at the same moment: it
  // answers them while it waits for their answers.
  const bool answer_here = std::this_thread::get_id() == thread_.get_id();
  while (pending > 0 && Clock::now() < deadline) {
    if (answer_here) answer_questions(true);
    for (std::size_t k = 0; k < recvs.size(); ++k) {
      if (recvs[k] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      TESSERA_CHECK_MPI(MPI_Test(&recvs[k], &flag, MPI_STATUS_IGNORE));
      if (!flag) continue;
      const Reply& r = replies[k];
      if (r.query_id != query.query_id) {  // a late answer to an earlier query: listen again
        TESSERA_CHECK_MPI(
            MPI_Irecv(&replies[k], sizeof(Reply), MPI_BYTE, result[k].world_rank, kReplyTag, control_, &recvs[k]));
        continue;
      }
      result[k].responded = true;
      result[k].member = r.member != 0;
      result[k].failed = r.failed != 0;
      result[k].collectives_issued = r.collectives_issued;
      result[k].last_op = r.last_op;
      result[k].running_seq = r.running_seq;
      result[k].running_op = r.running_op;
      result[k].gave_up_seq = r.gave_up_seq;
      result[k].gave_up_ago = std::chrono::microseconds(r.gave_up_us_ago);
      result[k].last_transfer = r.last_transfer;
      result[k].last_transfer_bytes = r.last_transfer_bytes;
      if (r.busy_seq > 0 || r.busy_peer > 0)
        result[k].elsewhere = {true, std::string(r.busy_name, strnlen(r.busy_name, sizeof r.busy_name)),
                               r.busy_seq > 0 ? r.busy_seq - 1 : 0, r.busy_op, r.busy_peer - 1};
      --pending;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Receives from peers that never answered are cancelled, and completed before their
  // buffers go. A send a dead peer never took keeps its buffer: it is kept for the process.
  for (auto& r : recvs) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  bool unsent = false;
  for (auto& s : sends) {
    int done = 0;
    if (s != MPI_REQUEST_NULL) MPI_Test(&s, &done, MPI_STATUS_IGNORE);
    if (s != MPI_REQUEST_NULL && !done) {
      MPI_Request_free(&s);
      unsent = true;
    }
  }
  if (!unsent) abandoned_.pop_back();
  return result;
}

}  // namespace tessera::comm::detail
