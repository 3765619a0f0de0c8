# Tessera tells device memory from host memory by whether host code may read it
# (memory_kind_of_space, include/tessera/core/memory.hpp): host loops and host MPI calls for
# the one, kernels and device or staged transfers for the other. A Kokkos whose CUDA memory
# space is CUDA managed memory (Kokkos_ENABLE_CUDA_UVM before Kokkos 4,
# Kokkos_ENABLE_IMPL_CUDA_UNIFIED_MEMORY since) lets host code read it, so Tessera would run
# host loops on GPU buffers while kernels still write them, and train to wrong numbers without
# an error. Refused here, before anything is built (memory.hpp refuses it again at compile
# time, for a program that builds against another Kokkos). Runs with `cmake -P` too (a test).
if(Kokkos_ENABLE_CUDA AND (Kokkos_ENABLE_CUDA_UVM OR Kokkos_ENABLE_IMPL_CUDA_UNIFIED_MEMORY))
  if(Kokkos_ENABLE_CUDA_UVM)
    set(_tessera_managed Kokkos_ENABLE_CUDA_UVM)
  else()
    set(_tessera_managed Kokkos_ENABLE_IMPL_CUDA_UNIFIED_MEMORY)
  endif()
  message(FATAL_ERROR "The Kokkos in '${Kokkos_DIR}' was built with ${_tessera_managed}: its CUDA memory is "
                      "managed memory that host code can read, so Tessera would take GPU buffers for host ones "
                      "and run host loops on them while GPU kernels still write them. Build Tessera against a "
                      "Kokkos built without it (-D${_tessera_managed}=OFF; from Spack, kokkos +cuda ~cuda_uvm).")
endif()
