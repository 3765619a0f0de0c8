#pragma once
/// \file
/// Memory spaces and Kokkos view aliases used across Tessera.

#include <Kokkos_Core.hpp>

#include <string>

namespace tessera {

/// Where a buffer lives; it picks the communication path (host memory or device memory).
enum class MemoryKind { Host, Device };

/// Memory of the default execution space (device memory in a CUDA build, host otherwise).
using DeviceMemorySpace = Kokkos::DefaultExecutionSpace::memory_space;
using HostMemorySpace = Kokkos::HostSpace;

#if defined(KOKKOS_ENABLE_CUDA)
// Tessera takes memory the host can read for host memory (memory_kind_of_space below), and
// would run host loops on it while kernels still write it (cmake/TesseraKokkosMemory.cmake).
static_assert(!Kokkos::SpaceAccessibility<Kokkos::HostSpace, DeviceMemorySpace>::accessible,
              "Tessera needs a Kokkos whose CUDA memory the host cannot read: this one keeps it in CUDA managed "
              "memory (Kokkos_ENABLE_CUDA_UVM or Kokkos_ENABLE_IMPL_CUDA_UNIFIED_MEMORY); use one built without it");
#endif

/// A 1-D array in the default execution space's memory.
template <class T>
using View1D = Kokkos::View<T*, DeviceMemorySpace>;
/// A row-major matrix in the default execution space's memory ([rows, cols]).
template <class T>
using View2D = Kokkos::View<T**, Kokkos::LayoutRight, DeviceMemorySpace>;
/// A 1-D array in host memory.
template <class T>
using HostView1D = Kokkos::View<T*, HostMemorySpace>;

/// Host when memory in MemSpace can be read by host code, Device otherwise.
template <class MemSpace>
constexpr MemoryKind memory_kind_of_space() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible ? MemoryKind::Host : MemoryKind::Device;
}

/// Asks the CUDA runtime whether ptr is device memory (Host when CUDA is not compiled in).
MemoryKind memory_kind_of(const void* ptr) noexcept;

/// Memory this rank may still take in the default memory space, and where the figure comes
/// from. On the host: the node's available memory (MemAvailable, or what the cgroup's limit
/// leaves when that is lower) shared by the job's ranks on the node; on a GPU: its free
/// memory shared by the ranks that use it. `bytes` is 0 when it cannot be told.
struct MemoryBudget {
  double bytes = 0;
  std::string source;  ///< e.g. "23.1 GB available on this node, shared by 2 ranks"
};
/// Needs a live Session (for the ranks on the node).
MemoryBudget memory_budget();
/// The same for host memory, in any build: the node's available memory shared by the job's
/// ranks on the node.
MemoryBudget host_memory_budget();

}  // namespace tessera
