// The MPI backend. Collectives are the blocking MPI calls (the fastest path in every MPI we
// measured); the front end's fence guarantees every rank is there, at the same op, before
// one starts, so the blocking call cannot hang on a missing rank or a mismatched op. A peer
// that stops in the middle of one is caught by the watchdog. Point-to-point uses
// nonblocking calls polled against the deadline.
#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include <tessera/core/session.hpp>

#include "comm/backend.hpp"
#include "core/device_copy.hpp"
#include "core/mpi_check.hpp"

namespace tessera::comm::detail {
namespace {

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Prod:
      return MPI_PROD;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Avg:
      break;  // the front end turns avg into sum + scale
  }
  throw CommError("the MPI backend got reduce op avg, which the front end should have rewritten");
}

int mpi_count(std::size_t n, const Op& op) {
  if (n > mpi_max_count)
    throw ConfigError(describe(op) + ": " + std::to_string(n) +
                      " elements per rank exceed the MPI backend's limit of " + std::to_string(mpi_max_count) +
                      " in one call (MPI's counts are ints); split the buffer, or use the gloo or nccl backend");
  return static_cast<int>(n);
}

struct MpiTransfer final : PendingTransfer {
  MPI_Request request = MPI_REQUEST_NULL;
  bool send = true;
  const char* what = "";
  MPI_Status status{};  // a receive's, once complete
  bool truncated = false;
  // How long stop() waits for a receive that has begun to end (the watchdog's grace for a
  // stuck call: max(1 s, timeout / 10)).
  std::chrono::milliseconds grace{1000};
  void wait(const Deadline& deadline) override {
    if (send) {
      wait_mpi(request, deadline, what);
      return;
    }
    // A receive keeps its status: how much the send carried, or that it did not fit (the
    // front end says so rather than MPI's MPI_ERR_IN_STATUS).
    const int rc = wait_mpi_status(request, deadline, what, status);
    if (rc != MPI_SUCCESS) keep_truncation(rc);
  }
  bool test() override {
    int done = 0;
    const int rc = MPI_Test(&request, &done, send ? MPI_STATUS_IGNORE : &status);
    if (rc != MPI_SUCCESS) {
      if (send) TESSERA_CHECK_MPI(rc);
      keep_truncation(rc);
      return true;
    }
    return done != 0;
  }
  Arrived arrived() const override {
    if (send) return {};
    if (truncated) return {true, true, 0};
    MPI_Count bytes = 0;  // MPI_Get_count's int would be MPI_UNDEFINED past 2 GiB
    if (MPI_Get_elements_x(&status, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes == MPI_UNDEFINED) return {};
    return {true, false, static_cast<std::size_t>(bytes)};
  }
  /// A receive that ended with an error: a send too large for its buffer is remembered, for
  /// arrived(); any other error is raised.
  void keep_truncation(int rc) {
    int error_class = 0;
    MPI_Error_class(rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : rc, &error_class);
    if (error_class != MPI_ERR_TRUNCATE) TESSERA_CHECK_MPI(rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : rc);
    truncated = true;
  }
  bool stop() noexcept override {
    // A transfer abandoned after a timeout must not match a later message, nor touch its
    // buffer after this: cancel it and wait for the cancellation (or the completion).
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (request == MPI_REQUEST_NULL || finalized) return true;
    MPI_Cancel(&request);
    // Open MPI and MPICH cannot cancel a send: it ends only when its receiver posts, which
    // after a timeout may be never, so waiting for it would hang the caller that the timeout
    // was to free. A receive not yet matched is cancelled at once, but one already matched
    // ends only when the rest of its data has come, and its sender may have stopped or died
    // in the middle (over TCP, or shared memory without single-copy, the sender pushes the
    // data, and a live one may just be slower than the timeout). A send gets a moment and a
    // receive the grace, then each is let go: false tells the caller that MPI may still read
    // (a send) or write (a receive) the buffer.
    const auto until = std::chrono::steady_clock::now() + (send ? std::chrono::milliseconds(200) : grace);
    int done = 0;
    while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done == 0 &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (done != 0) return true;
    MPI_Request_free(&request);  // MPI finishes it in the background, should the peer go on
    return false;
  }
  ~MpiTransfer() override { stop(); }
};

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(MPI_Comm group) : comm_(group) {
    TESSERA_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    TESSERA_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    cuda_aware_ = Session::current().cuda_aware_mpi();
  }
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  comm::Backend kind() const noexcept override { return comm::Backend::Mpi; }
  MPI_Comm group() const noexcept override { return comm_; }
  bool needs_fence() const noexcept override { return true; }
  bool accepts(MemoryKind m) const noexcept override { return m == MemoryKind::Host || cuda_aware_; }

  std::unique_ptr<Backend> make_child(MPI_Comm group, const CommOptions&) override {
    return std::make_unique<MpiBackend>(group);
  }

  // The deadline was enforced by the fence; a blocking MPI call cannot take one.
  void execute(const Op& op, const Deadline& deadline) override {
    // Each element of a broadcast, reduce or all-reduce depends on that element alone: one
    // longer than an MPI call takes (a DDP bucket of one parameter of 2^31 elements or more)
    // runs as several calls, every rank cutting it alike.
    const bool elementwise = op.type == OpType::Broadcast || op.type == OpType::Reduce || op.type == OpType::AllReduce;
    if (elementwise && op.count > mpi_max_count) {
      const std::size_t esz = dtype_size(op.dtype);
      const auto shifted = [&](void* base, std::size_t at) {
        return base == nullptr ? nullptr : static_cast<void*>(static_cast<char*>(base) + at * esz);
      };
      for (std::size_t at = 0; at < op.count; at += mpi_max_count) {
        Op piece = op;
        piece.count = std::min(mpi_max_count, op.count - at);
        piece.send.data = shifted(op.send.data, at);
        piece.recv.data = shifted(op.recv.data, at);
        execute(piece, deadline);
      }
      return;
    }
    const MPI_Datatype type = mpi_datatype(op.dtype);
    const int n = mpi_count(op.count, op);  // MPI takes per-rank counts only
    // Open MPI's reduce-scatter counts its whole input in an int (rcount * size), which would
    // wrap where each rank's block fits one.
    if (op.type == OpType::ReduceScatter && op.count * static_cast<std::size_t>(size_) > mpi_max_count)
      throw ConfigError(describe(op) + ": its whole input, " + std::to_string(op.count) + " elements per rank x " +
                        std::to_string(size_) + " ranks, exceeds the MPI backend's limit of " +
                        std::to_string(mpi_max_count) +
                        " (Open MPI counts a reduce-scatter's whole input in an int); split the buffer, or use the "
                        "gloo or nccl backend");
    void* send = op.send.data;
    void* recv = op.recv.data;
    const bool root = rank_ == op.root;
    const std::size_t esz = dtype_size(op.dtype);
    auto at = [&](void* base, int block) {
      return static_cast<void*>(static_cast<char*>(base) + static_cast<std::size_t>(block) * op.count * esz);
    };
    switch (op.type) {
      case OpType::Broadcast:
        TESSERA_CHECK_MPI(MPI_Bcast(recv, n, type, op.root, comm_));
        break;
      case OpType::Scatter:
        TESSERA_CHECK_MPI(MPI_Scatter(send, n, type, root && recv == at(send, op.root) ? MPI_IN_PLACE : recv, n, type,
                                      op.root, comm_));
        break;
      case OpType::Gather:
        TESSERA_CHECK_MPI(MPI_Gather(root && send == at(recv, op.root) ? MPI_IN_PLACE : send, n, type, recv, n, type,
                                     op.root, comm_));
        break;
      case OpType::Reduce:
        TESSERA_CHECK_MPI(
            MPI_Reduce(root && send == recv ? MPI_IN_PLACE : send, recv, n, type, mpi_op(op.reduce), op.root, comm_));
        break;
      case OpType::AllReduce:
        TESSERA_CHECK_MPI(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, type, mpi_op(op.reduce), comm_));
        break;
      case OpType::AllGather:
        TESSERA_CHECK_MPI(MPI_Allgather(send == at(recv, rank_) ? MPI_IN_PLACE : send, n, type, recv, n, type, comm_));
        break;
      case OpType::ReduceScatter:
        if (recv == at(send, rank_)) {
          // MPI's in-place form has other semantics (result at the buffer's start); reduce
          // into a private block, then place it.
          scratch_.resize(op.count * esz);
          TESSERA_CHECK_MPI(MPI_Reduce_scatter_block(send, scratch_.data(), n, type, mpi_op(op.reduce), comm_));
          // recv is device memory where a CUDA-aware MPI took a device buffer unstaged.
          tessera::detail::copy_bytes(recv, op.memory, scratch_.data(), MemoryKind::Host, scratch_.size());
        } else {
          TESSERA_CHECK_MPI(MPI_Reduce_scatter_block(send, recv, n, type, mpi_op(op.reduce), comm_));
        }
        break;
      case OpType::AllToAll:
        TESSERA_CHECK_MPI(MPI_Alltoall(send, n, type, recv, n, type, comm_));
        break;
      case OpType::Barrier:
        break;  // the front end's fence, which comes first, is the barrier
      case OpType::Send:
      case OpType::Recv:
      case OpType::Split:
        throw CommError(std::string(op_name(op.type)) + " is not executed by a backend");
    }
  }

  std::unique_ptr<PendingTransfer> post(const Op& op, const Deadline& deadline) override {
    auto pending = std::make_unique<MpiTransfer>();
    if (!deadline.none) pending->grace = std::max(pending->grace, deadline.remaining() / 10);
    const int n = mpi_count(op.count, op);
    if (op.type == OpType::Send) {
      pending->what = "in MPI_Isend, waiting for the receiver";
      TESSERA_CHECK_MPI(MPI_Isend(op.send.data, n, mpi_datatype(op.dtype), op.peer, op.tag, comm_, &pending->request));
    } else {
      pending->send = false;
      pending->what = "in MPI_Irecv, waiting for the sender";
      TESSERA_CHECK_MPI(MPI_Irecv(op.recv.data, n, mpi_datatype(op.dtype), op.peer, op.tag, comm_, &pending->request));
    }
    return pending;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool cuda_aware_ = false;
  std::vector<char> scratch_;
};

}  // namespace

std::size_t mpi_max_count = INT_MAX;

std::unique_ptr<Backend> make_mpi_backend(MPI_Comm group) { return std::make_unique<MpiBackend>(group); }

}  // namespace tessera::comm::detail
