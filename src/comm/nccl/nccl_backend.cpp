// The NCCL backend: NCCL collectives on a stream owned by the communicator. An op is
// complete when an event recorded after it has fired; waiting polls that event against the
// deadline, so NCCL needs no arrival fence, and a timeout aborts the NCCL communicator
// (ncclCommAbort), which releases the kernels stuck on the GPU.
#include "comm/nccl/nccl_backend.hpp"

#include <tessera/core/session.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend.hpp"
#include "core/cuda_check.hpp"
#include "core/log.hpp"
#include "core/mpi_check.hpp"
#include "core/node_share.hpp"

#define TESSERA_CHECK_NCCL(call)                                                                                 \
  do {                                                                                                           \
    const ncclResult_t tessera_nccl_rc_ = (call);                                                                \
    if (tessera_nccl_rc_ != ncclSuccess && tessera_nccl_rc_ != ncclInProgress) {                                 \
      std::string tessera_call_(#call);                                                                          \
      throw ::tessera::CommError(                                                                                \
          tessera_call_.substr(0, tessera_call_.find('(')) + " failed: " + ncclGetErrorString(tessera_nccl_rc_), \
          __FILE__, __LINE__);                                                                                   \
    }                                                                                                            \
  } while (0)

namespace tessera::comm::detail {
namespace {

/// The GPU this rank uses: the one Kokkos runs on (it maps the ranks of a node to GPUs when
/// it starts), or, in a build whose Kokkos has no CUDA backend, the one of the rank's index
/// among the job's ranks on its node (the same for every communicator the rank is in).
int choose_device(int devices) {
#ifdef KOKKOS_ENABLE_CUDA
  (void)devices;
  return Kokkos::DefaultExecutionSpace().cuda_device();
#else
  return Session::current().local_rank() % devices;
#endif
}

/// Collective over group: true on every rank when every rank has a CUDA device, with the
/// count of this rank's.
bool every_rank_has_a_gpu(MPI_Comm group, int& devices, std::string& why) {
  devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    cudaGetLastError();
    why = rc != cudaSuccess ? cudaGetErrorString(rc) : "no device found";
    devices = 0;
  }
  int ok = devices > 0 ? 1 : 0;
  TESSERA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, group));
  return ok == 1;
}

/// Collective over group: the most ranks of the group that share one physical GPU on a node
/// (told apart by PCI address, since CUDA_VISIBLE_DEVICES may show each rank its own GPU as
/// device 0), and this node's rank count.
struct Sharing {
  int most_per_gpu = 1;
  int ranks_on_node = 1;
};
Sharing gpu_sharing(MPI_Comm group, int device) {
  char id[32] = {};
  set_up_together(group, "nccl", [&] { TESSERA_CHECK_CUDA(cudaDeviceGetPCIBusId(id, sizeof id, device)); });
  const auto share = tessera::detail::share_on_node(group, id);
  Sharing s;
  s.ranks_on_node = share.on_node;
  s.most_per_gpu = share.same;
  TESSERA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &s.most_per_gpu, 1, MPI_INT, MPI_MAX, group));
  return s;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float16:
      return ncclFloat16;
  }
  throw ConfigError("no NCCL type for this dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Prod:
      return ncclProd;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Avg:
      return ncclAvg;
  }
  return ncclSum;
}

/// The NCCL communicator as every thread that uses it sees it. The thread that meets a
/// failure aborts it (ncclCommAbort frees it) while the progress and transfer threads may be
/// polling it: a poll and the abort take turns on the mutex, and after the abort a poll never
/// touches the freed communicator. An op's event may still fire after an abort (its kernel was
/// stopped, not finished), so a fired event counts only while the communicator is not aborted.
struct NcclComm {
  std::mutex mutex;
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};

  [[noreturn]] static void throw_aborted(const char* what) {
    throw CommError(std::string("NCCL communicator aborted after a failure on another thread (") + what + ")");
  }
  /// The communicator to issue an op on; throws once it was aborted.
  ncclComm_t get(const char* what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (aborted.load()) throw_aborted(what);
    return comm;
  }
  void check_async(const char* what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (aborted.load()) throw_aborted(what);
    ncclResult_t async = ncclSuccess;
    TESSERA_CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
    TESSERA_CHECK_NCCL(async);
  }
  void abort() noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    if (aborted.exchange(true) || comm == nullptr) return;
    ncclCommAbort(comm);
    comm = nullptr;
  }
};

/// Polls an event until it fires; checks the communicator for asynchronous errors meanwhile.
void wait_event(cudaEvent_t event, NcclComm& comm, const Deadline& deadline, const char* what) {
  for (std::uint64_t spins = 0;; ++spins) {
    const cudaError_t rc = cudaEventQuery(event);
    if (rc == cudaSuccess) {
      if (comm.aborted.load()) NcclComm::throw_aborted(what);
      return;
    }
    if (rc != cudaErrorNotReady) TESSERA_CHECK_CUDA(rc);
    if ((spins & 255) == 0) {
      comm.check_async(what);
      if (deadline.expired()) throw DeadlineExceeded{what};
      std::this_thread::yield();
    }
  }
}

/// ncclGroupStart ... ncclGroupEnd, the group closed also when an error is thrown inside it
/// (an open group would hold back every later NCCL call of this thread).
class NcclGroup {
 public:
  NcclGroup() { TESSERA_CHECK_NCCL(ncclGroupStart()); }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    TESSERA_CHECK_NCCL(ncclGroupEnd());
  }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }

 private:
  bool open_ = true;
};

struct NcclTransfer final : PendingTransfer {
  cudaEvent_t event = nullptr;
  std::shared_ptr<NcclComm> comm;
  const char* what = "";
  void wait(const Deadline& deadline) override { wait_event(event, *comm, deadline, what); }
  bool test() override {
    const cudaError_t rc = cudaEventQuery(event);
    if (rc == cudaErrorNotReady) return false;
    TESSERA_CHECK_CUDA(rc);
    if (comm->aborted.load()) NcclComm::throw_aborted(what);
    return true;
  }
  ~NcclTransfer() override {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(MPI_Comm group, const CommOptions&) : group_(group) {
    TESSERA_CHECK_MPI(MPI_Comm_rank(group_, &rank_));
    TESSERA_CHECK_MPI(MPI_Comm_size(group_, &size_));
    try {
      // Every check below is collective, so every rank raises the same error together.
      int devices = 0;
      std::string why;
      if (!every_rank_has_a_gpu(group_, devices, why))
        throw ConfigError("the nccl backend needs a CUDA device on every rank, and " +
                          (devices == 0 ? "none is usable here (" + why + ")" : std::string("another rank has none")) +
                          "; use the mpi or gloo backend");
      int device = 0;
      set_up_together(group_, "nccl", [&] {
        device = choose_device(devices);
        TESSERA_CHECK_CUDA(cudaSetDevice(device));
      });
      // NCCL refuses two ranks of one communicator on one GPU (and would hang or fail inside
      // its initialisation): every rank says so the same way, before NCCL starts.
      const Sharing sharing = gpu_sharing(group_, device);
      if (sharing.most_per_gpu > 1)
        throw ConfigError("the nccl backend needs a GPU of its own for every rank, but " +
                          std::to_string(sharing.most_per_gpu) + " ranks share one GPU (" +
                          std::to_string(sharing.ranks_on_node) + " ranks and " + std::to_string(devices) +
                          " GPU(s) on this node); run at most one rank per GPU, or use the mpi backend, "
                          "which stages device buffers through host memory");
      ncclUniqueId id{};
      set_up_together(group_, "nccl", [&] {
        if (rank_ == 0) TESSERA_CHECK_NCCL(ncclGetUniqueId(&id));
      });
      TESSERA_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group_));
      {
        // Blocking, and without a deadline of its own: NCCL's bootstrap waits for every rank,
        // so a rank that cannot reach the others would hold them here; the communicator's
        // set-up is watched, and ends the process past its limit with this named.
        const SetUpStep step("ncclCommInitRank", "NCCL",
                             "NCCL_DEBUG=INFO shows where NCCL's set-up waits; NCCL_SOCKET_IFNAME names the network "
                             "interface its bootstrap uses, and NCCL_IB_HCA the InfiniBand devices.");
        TESSERA_CHECK_NCCL(ncclCommInitRank(&nccl_->comm, size_, id, rank_));
      }
      // The communicator's set-up goes on with collective calls (MPI_Comm_dup).
      set_up_together(group_, "nccl", [&] {
        TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking));
        TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&recv_stream_, cudaStreamNonBlocking));
        TESSERA_CHECK_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
        TESSERA_CHECK_CUDA(cudaMalloc(&token_, sizeof(float)));
      });
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclBackend() override { release(); }

  comm::Backend kind() const noexcept override { return comm::Backend::Nccl; }
  MPI_Comm group() const noexcept override { return group_; }
  bool needs_fence() const noexcept override { return false; }
  bool accepts(MemoryKind m) const noexcept override { return m == MemoryKind::Device; }
  bool native_half_and_avg() const noexcept override { return true; }
  std::unique_ptr<Backend> make_child(MPI_Comm group, const CommOptions& options) override {
    return std::make_unique<NcclBackend>(group, options);
  }
  NcclHandles handles() const { return {nccl_->comm, stream_}; }

  void execute(const Op& op, const Deadline& deadline) override {
    const ncclComm_t comm = nccl_->get("before an NCCL collective");
    const ncclDataType_t t = nccl_type(op.dtype);
    const std::size_t n = op.count, bytes = n * dtype_size(op.dtype);
    char* send = static_cast<char*>(op.send.data);
    char* recv = static_cast<char*>(op.recv.data);
    const bool root = rank_ == op.root;
    switch (op.type) {
      case OpType::Broadcast:
        TESSERA_CHECK_NCCL(ncclBroadcast(recv, recv, n, t, op.root, comm, stream_));
        break;
      case OpType::AllReduce:
        TESSERA_CHECK_NCCL(ncclAllReduce(send, recv, n, t, nccl_op(op.reduce), comm, stream_));
        break;
      case OpType::Reduce:
        // Only the root's output is written; other ranks pass their input in its place.
        TESSERA_CHECK_NCCL(ncclReduce(send, root ? recv : send, n, t, nccl_op(op.reduce), op.root, comm, stream_));
        break;
      case OpType::AllGather:
        TESSERA_CHECK_NCCL(ncclAllGather(send, recv, n, t, comm, stream_));
        break;
      case OpType::ReduceScatter:
        TESSERA_CHECK_NCCL(ncclReduceScatter(send, recv, n, t, nccl_op(op.reduce), comm, stream_));
        break;
      case OpType::Gather: {
        NcclGroup group;
        if (root) {
          for (int r = 0; r < size_; ++r) {
            char* slot = recv + static_cast<std::size_t>(r) * bytes;
            if (r == rank_) {
              if (slot != send)
                TESSERA_CHECK_CUDA(cudaMemcpyAsync(slot, send, bytes, cudaMemcpyDeviceToDevice, stream_));
            } else {
              TESSERA_CHECK_NCCL(ncclRecv(slot, n, t, r, comm, stream_));
            }
          }
        } else {
          TESSERA_CHECK_NCCL(ncclSend(send, n, t, op.root, comm, stream_));
        }
        group.end();
      } break;
      case OpType::Scatter: {
        NcclGroup group;
        if (root) {
          for (int r = 0; r < size_; ++r) {
            char* slot = send + static_cast<std::size_t>(r) * bytes;
            if (r == rank_) {
              if (slot != recv)
                TESSERA_CHECK_CUDA(cudaMemcpyAsync(recv, slot, bytes, cudaMemcpyDeviceToDevice, stream_));
            } else {
              TESSERA_CHECK_NCCL(ncclSend(slot, n, t, r, comm, stream_));
            }
          }
        } else {
          TESSERA_CHECK_NCCL(ncclRecv(recv, n, t, op.root, comm, stream_));
        }
        group.end();
      } break;
      case OpType::AllToAll: {
        NcclGroup group;
        for (int r = 0; r < size_; ++r) {
          const std::size_t off = static_cast<std::size_t>(r) * bytes;
          TESSERA_CHECK_NCCL(ncclSend(send + off, n, t, r, comm, stream_));
          TESSERA_CHECK_NCCL(ncclRecv(recv + off, n, t, r, comm, stream_));
        }
        group.end();
      } break;
      case OpType::Barrier:
        TESSERA_CHECK_NCCL(ncclAllReduce(token_, token_, 1, ncclFloat32, ncclSum, comm, stream_));
        break;
      case OpType::Send:
      case OpType::Recv:
      case OpType::Split:
        throw CommError(std::string(op_name(op.type)) + " is not executed by a backend");
    }
    TESSERA_CHECK_CUDA(cudaEventRecord(done_, stream_));
    wait_event(done_, *nccl_, deadline, "waiting for the NCCL kernel");
  }

  std::unique_ptr<PendingTransfer> post(const Op& op, const Deadline&) override {
    const ncclComm_t comm = nccl_->get(op.type == OpType::Send ? "before ncclSend" : "before ncclRecv");
    auto pending = std::make_unique<NcclTransfer>();
    pending->comm = nccl_;
    TESSERA_CHECK_CUDA(cudaEventCreateWithFlags(&pending->event, cudaEventDisableTiming));
    // Sends and receives run on streams of their own, beside the collectives'. NCCL still
    // runs the communicator's operations in the order they were posted, and a send may wait
    // for its receive: callers post matching orders (docs/communication.md).
    if (op.type == OpType::Send) {
      pending->what = "in ncclSend, waiting for the receiver";
      TESSERA_CHECK_NCCL(ncclSend(op.send.data, op.count, nccl_type(op.dtype), op.peer, comm, send_stream_));
      TESSERA_CHECK_CUDA(cudaEventRecord(pending->event, send_stream_));
    } else {
      pending->what = "in ncclRecv, waiting for the sender";
      TESSERA_CHECK_NCCL(ncclRecv(op.recv.data, op.count, nccl_type(op.dtype), op.peer, comm, recv_stream_));
      TESSERA_CHECK_CUDA(cudaEventRecord(pending->event, recv_stream_));
    }
    return pending;
  }

  bool orders_all_ops() const noexcept override { return true; }
  void abort() noexcept override { nccl_->abort(); }

 private:
  void release() noexcept {
    {
      std::lock_guard<std::mutex> lock(nccl_->mutex);
      if (nccl_->comm != nullptr) ncclCommDestroy(nccl_->comm);
      nccl_->comm = nullptr;
    }
    if (token_ != nullptr) cudaFree(token_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    for (cudaStream_t s : {stream_, send_stream_, recv_stream_})
      if (s != nullptr) cudaStreamDestroy(s);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && group_ != MPI_COMM_NULL) MPI_Comm_free(&group_);
  }

  MPI_Comm group_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<NcclComm> nccl_ = std::make_shared<NcclComm>();
  cudaStream_t stream_ = nullptr, send_stream_ = nullptr, recv_stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* token_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(MPI_Comm group, const CommOptions& options) {
  return std::make_unique<NcclBackend>(group, options);
}

bool nccl_one_gpu_per_rank(MPI_Comm group) {
  int devices = 0;
  std::string why;
  if (!every_rank_has_a_gpu(group, devices, why)) return false;
  return gpu_sharing(group, choose_device(devices)).most_per_gpu == 1;
}

bool nccl_usable() noexcept {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return devices > 0;
}

NcclHandles nccl_handles(Communicator& comm) {
  auto* nccl = dynamic_cast<NcclBackend*>(&comm.backend_impl());
  if (nccl == nullptr) throw ConfigError("nccl_handles: the communicator does not use the nccl backend");
  return nccl->handles();
}

}  // namespace tessera::comm::detail
