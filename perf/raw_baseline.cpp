#include "raw_baseline.hpp"

#include <tessera/config.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "comm/backend.hpp"

#if TESSERA_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>

#include "comm/gloo/gloo_backend.hpp"
#endif
#if TESSERA_HAVE_NCCL
#include "comm/nccl/nccl_backend.hpp"
#endif

namespace tessera::perf {
namespace {

class MpiRaw final : public RawBaseline {
 public:
  explicit MpiRaw(MPI_Comm world) {
    // The benchmark's communicators span MPI_COMM_WORLD.
    MPI_Comm_dup(world, &comm_);
  }
  ~MpiRaw() override { MPI_Comm_free(&comm_); }
  void run(const std::string& op, DType dtype, comm::ReduceOp redop, int root, void* s, void* r,
           std::size_t n) override {
    const MPI_Datatype t = comm::detail::mpi_datatype(dtype);
    const int c = static_cast<int>(n);
    const MPI_Op o = redop == comm::ReduceOp::Sum    ? MPI_SUM
                     : redop == comm::ReduceOp::Prod ? MPI_PROD
                     : redop == comm::ReduceOp::Min  ? MPI_MIN
                                                     : MPI_MAX;
    if (op == "all_reduce")
      MPI_Allreduce(s, r, c, t, o, comm_);
    else if (op == "all_gather")
      MPI_Allgather(s, c, t, r, c, t, comm_);
    else if (op == "reduce_scatter")
      MPI_Reduce_scatter_block(s, r, c, t, o, comm_);
    else if (op == "broadcast")
      MPI_Bcast(r, c, t, root, comm_);
    else if (op == "reduce")
      MPI_Reduce(s, r, c, t, o, root, comm_);
    else
      MPI_Alltoall(s, c, t, r, c, t, comm_);
  }

 private:
  MPI_Comm comm_;
};

#if TESSERA_HAVE_GLOO
class GlooRaw final : public RawBaseline {
 public:
  explicit GlooRaw(comm::Communicator& c) : context_(comm::detail::gloo_context(c)), size_(c.size()) {}
  void run(const std::string& op, DType dtype, comm::ReduceOp redop, int root, void* s, void* r,
           std::size_t n) override {
    switch (dtype) {
      case DType::Float32:
        go<float>(op, redop, root, s, r, n);
        break;
      case DType::Float64:
        go<double>(op, redop, root, s, r, n);
        break;
      case DType::Int32:
        go<std::int32_t>(op, redop, root, s, r, n);
        break;
      case DType::BFloat16:  // moved as 16-bit words: raw_supports offers no reduction of them
      case DType::Float16:
        go<std::uint16_t>(op, redop, root, s, r, n);
        break;
      default:
        go<std::int64_t>(op, redop, root, s, r, n);
        break;
    }
  }

 private:
  template <class T>
  void go(const std::string& op, comm::ReduceOp redop, int root, void* sv, void* rv, std::size_t n) {
    using Fn = void (*)(void*, const void*, const void*, std::size_t);
    const Fn fn = redop == comm::ReduceOp::Sum    ? static_cast<Fn>(&gloo::sum<T>)
                  : redop == comm::ReduceOp::Prod ? static_cast<Fn>(&gloo::product<T>)
                  : redop == comm::ReduceOp::Min  ? static_cast<Fn>(&gloo::min<T>)
                                                  : static_cast<Fn>(&gloo::max<T>);
    T* s = static_cast<T*>(sv);
    T* r = static_cast<T*>(rv);
    const std::size_t all = n * static_cast<std::size_t>(size_);
    ++tag_;
    if (op == "all_reduce") {
      gloo::AllreduceOptions o(context_);
      o.setInput(s, n);
      o.setOutput(r, n);
      o.setReduceFunction(fn);
      o.setTag(tag_);
      gloo::allreduce(o);
    } else if (op == "all_gather") {
      gloo::AllgatherOptions o(context_);
      o.setInput(s, n);
      o.setOutput(r, all);
      o.setTag(tag_);
      gloo::allgather(o);
    } else if (op == "broadcast") {
      gloo::BroadcastOptions o(context_);
      o.setOutput(r, n);
      o.setRoot(root);
      o.setTag(tag_);
      gloo::broadcast(o);
    } else if (op == "reduce") {
      gloo::ReduceOptions o(context_);
      o.setInput(s, n);
      o.setOutput(r, n);
      o.setRoot(root);
      o.setReduceFunction(fn);
      o.setTag(tag_);
      gloo::reduce(o);
    } else {
      gloo::AlltoallOptions o(context_);
      o.setInput(s, all);
      o.setOutput(r, all);
      o.setTag(tag_);
      gloo::alltoall(o);
    }
  }
  std::shared_ptr<gloo::Context> context_;
  int size_;
  // Tessera's own Gloo ops use the low tags; the baseline counts from the top down.
  std::uint32_t tag_ = 0x80000000u;
};
#endif

#if TESSERA_HAVE_NCCL
class NcclRaw final : public RawBaseline {
 public:
  explicit NcclRaw(comm::Communicator& c) : h_(comm::detail::nccl_handles(c)) {}
  void run(const std::string& op, DType dtype, comm::ReduceOp redop, int root, void* s, void* r,
           std::size_t n) override {
    const ncclDataType_t t = dtype == DType::Float32    ? ncclFloat32
                             : dtype == DType::Float64  ? ncclFloat64
                             : dtype == DType::Int32    ? ncclInt32
                             : dtype == DType::Int64    ? ncclInt64
                             : dtype == DType::BFloat16 ? ncclBfloat16
                                                        : ncclFloat16;
    const ncclRedOp_t o = redop == comm::ReduceOp::Sum    ? ncclSum
                          : redop == comm::ReduceOp::Prod ? ncclProd
                          : redop == comm::ReduceOp::Min  ? ncclMin
                          : redop == comm::ReduceOp::Max  ? ncclMax
                                                          : ncclAvg;
    if (op == "all_reduce")
      ncclAllReduce(s, r, n, t, o, h_.comm, h_.stream);
    else if (op == "all_gather")
      ncclAllGather(s, r, n, t, h_.comm, h_.stream);
    else if (op == "reduce_scatter")
      ncclReduceScatter(s, r, n, t, o, h_.comm, h_.stream);
    else if (op == "broadcast")
      ncclBroadcast(r, r, n, t, root, h_.comm, h_.stream);
    else
      ncclReduce(s, r, n, t, o, root, h_.comm, h_.stream);
    cudaStreamSynchronize(h_.stream);
  }

 private:
  comm::detail::NcclHandles h_;
};
#endif

}  // namespace

bool raw_supports(comm::Backend backend, const std::string& op, DType dtype, comm::ReduceOp redop) {
  // Half types and the average matter to the ops that reduce alone: the others move words.
  const bool reduces = op == "all_reduce" || op == "reduce_scatter" || op == "reduce";
  const bool half = reduces && (dtype == DType::BFloat16 || dtype == DType::Float16);
  const bool avg = reduces && redop == comm::ReduceOp::Avg;
  switch (backend) {
    case comm::Backend::Gloo:
      // Gloo has no reduce-scatter in its options API; half types are reduced in float32 by Tessera.
      return op != "reduce_scatter" && !avg && !half;
    case comm::Backend::Nccl:
      return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "broadcast" || op == "reduce";
    default:  // MPI has no half-precision reduction and no average (it moves half types as 16-bit words)
      return !half && !avg;
  }
}

std::unique_ptr<RawBaseline> RawBaseline::make(comm::Communicator& c, MPI_Comm world) {
  switch (c.backend()) {
#if TESSERA_HAVE_GLOO
    case comm::Backend::Gloo:
      return std::make_unique<GlooRaw>(c);
#endif
#if TESSERA_HAVE_NCCL
    case comm::Backend::Nccl:
      return std::make_unique<NcclRaw>(c);
#endif
    default:
      return std::make_unique<MpiRaw>(world);
  }
}

bool nccl_usable() { return comm::detail::nccl_one_gpu_per_rank(MPI_COMM_WORLD); }

void* allocate(std::size_t bytes, MemoryKind where) {
  bytes = std::max<std::size_t>(bytes, 64);
#if TESSERA_HAVE_NCCL
  if (where == MemoryKind::Device) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw Error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
#endif
  (void)where;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw Error("out of host memory for " + std::to_string(bytes) + " bytes");
  return p;
}

void release(void* ptr, MemoryKind where) {
#if TESSERA_HAVE_NCCL
  if (where == MemoryKind::Device) {
    cudaFree(ptr);
    return;
  }
#endif
  (void)where;
  std::free(ptr);
}

void copy(void* dst, const void* src, std::size_t bytes, MemoryKind dst_where, MemoryKind src_where) {
#if TESSERA_HAVE_NCCL
  if (dst_where == MemoryKind::Device || src_where == MemoryKind::Device) {
    cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    return;
  }
#endif
  (void)dst_where;
  (void)src_where;
  std::memcpy(dst, src, bytes);
}

}  // namespace tessera::perf
