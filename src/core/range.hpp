#pragma once
// Internal: the index range of Tessera's own Kokkos kernels.

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace tessera {

/// A Kokkos range counted in 64 bits on every backend. Kokkos' RangePolicy without an index
/// type counts in its execution space's size_type, a 32-bit unsigned on CUDA, where a range
/// of more than 2^32 - 1 elements (4.3 G parameters updated in one launch, as one GPU does)
/// is cut modulo 2^32, and the kernel silently skips most of it.
using Range = Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace, Kokkos::IndexType<std::size_t>>;
static_assert(sizeof(Range::index_type) == 8, "Tessera's kernels count their elements in 64 bits");

/// The same on any execution space, for a kernel written for more than one (the GPU's in the
/// library, the host's too in the unit tests).
template <class Space>
using RangeOn = Kokkos::RangePolicy<Space, Kokkos::IndexType<std::size_t>>;

}  // namespace tessera
