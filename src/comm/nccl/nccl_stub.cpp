// Built when NCCL or the CUDA toolkit is absent: the factory explains how to get the backend.
#include "comm/backend.hpp"

namespace tessera::comm::detail {
std::unique_ptr<Backend> make_nccl_backend(MPI_Comm group, const CommOptions&) {
  MPI_Comm_free(&group);
  throw NotCompiledError(
      "the nccl backend is not compiled in; rebuild with TESSERA_ENABLE_NCCL=ON "
      "and the CUDA toolkit and NCCL available");
}
bool nccl_usable() noexcept { return false; }
bool nccl_one_gpu_per_rank(MPI_Comm) { return false; }
}  // namespace tessera::comm::detail
