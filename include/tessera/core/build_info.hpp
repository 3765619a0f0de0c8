#pragma once
/// \file
/// What this build of Tessera was compiled with, and the versions of the libraries it runs on.

#include <string>

namespace tessera {

struct BuildInfo {
  std::string tessera_version;
  std::string mpi_library;     ///< MPI_Get_library_version's first line
  std::string kokkos_version;  ///< e.g. "3.4.1"
  std::string kokkos_space;    ///< where kernels run: Kokkos' default execution space ("OpenMP", "Cuda", ...)
  std::string hdf5_version;    ///< empty when HDF5 is not compiled in
  bool gloo = false;
  bool nccl = false;
  bool hdf5 = false;
};

/// Queries the libraries (works before MPI and Kokkos are initialised).
BuildInfo build_info();

/// One line for --version and logs: "Tessera 0.1.0 | Kokkos 3.4.1 (OpenMP) | Open MPI v4.1.4 |
/// HDF5 1.10.8 | backends mpi, gloo, nccl".
std::string describe(const BuildInfo& info);

}  // namespace tessera
