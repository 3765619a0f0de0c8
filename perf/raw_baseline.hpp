#pragma once
// The raw library calls that tessera-bench-collectives compares Tessera with, run on the
// same buffers: MPI collectives on a duplicate of the communicator's group, Gloo's
// algorithms on the communicator's own Gloo context, NCCL calls on its NCCL communicator.

#include <mpi.h>

#include <memory>
#include <string>

#include <tessera/comm/communicator.hpp>

namespace tessera::perf {

class RawBaseline {
 public:
  virtual ~RawBaseline() = default;
  /// The baseline for comm's backend.
  static std::unique_ptr<RawBaseline> make(comm::Communicator& comm, MPI_Comm world);
  /// One call of op with n elements per rank (the same meaning as Tessera's count); `root`
  /// for broadcast and reduce.
  virtual void run(const std::string& op, DType dtype, comm::ReduceOp redop, int root, void* send, void* recv,
                   std::size_t n) = 0;
};

/// Whether the backend's library has a call to compare op with (MPI has no bfloat16 reduction,
/// Gloo no reduce-scatter, NCCL no all-to-all); its rows show n/a where not.
bool raw_supports(comm::Backend backend, const std::string& op, DType dtype, comm::ReduceOp redop);
/// Collective: true when NCCL is compiled in and every rank has a GPU of its own.
bool nccl_usable();
/// Buffers for the benchmark: device memory for NCCL, host memory otherwise.
void* allocate(std::size_t bytes, MemoryKind where);
void release(void* ptr, MemoryKind where);
void copy(void* dst, const void* src, std::size_t bytes, MemoryKind dst_where, MemoryKind src_where);

}  // namespace tessera::perf
