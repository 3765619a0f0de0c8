#pragma once
// Internal: the NCCL communicator and stream behind a Backend::Nccl communicator (for the
// benchmark's raw-library baseline).

#include <cuda_runtime.h>
#include <nccl.h>

#include <tessera/comm/communicator.hpp>

namespace tessera::comm::detail {
struct NcclHandles {
  ncclComm_t comm;
  cudaStream_t stream;
};
/// Throws ConfigError when comm does not use the nccl backend.
NcclHandles nccl_handles(Communicator& comm);
}  // namespace tessera::comm::detail
