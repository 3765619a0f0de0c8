// Built when TESSERA_ENABLE_GLOO=OFF: the factory explains how to get the backend.
#include "comm/backend.hpp"

namespace tessera::comm::detail {
std::unique_ptr<Backend> make_gloo_backend(MPI_Comm group, const CommOptions&) {
  MPI_Comm_free(&group);
  throw NotCompiledError("the gloo backend is not compiled in; rebuild with TESSERA_ENABLE_GLOO=ON");
}
}  // namespace tessera::comm::detail
