#pragma once
/// \file
/// What this build of Tessera was compiled with, and the versions of the libraries it runs on.

#include <string>

namespace tessera {

struct BuildInfo {
  std::string tessera_version;
  std::string mpi_library;     ///< MPI_Get_library_version's first line
  std::string kokkos_version;  ///< e.g. "3.4.1"
  std::string hdf5_version;    ///< empty when HDF5 is not compiled in
  bool gloo = false;
  bool nccl = false;
  bool hdf5 = false;
};

/// Queries the libraries (needs MPI initialised for the MPI line; works without it too).
BuildInfo build_info();

}  // namespace tessera
