#include <tessera/config.hpp>
#include <tessera/core/build_info.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#if TESSERA_HAVE_HDF5
#include <hdf5.h>

#include "core/hdf5_check.hpp"
#endif

namespace tessera {

BuildInfo build_info() {
  BuildInfo info;
  info.tessera_version = TESSERA_VERSION_STRING;
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(text, &len) == MPI_SUCCESS) {
    info.mpi_library.assign(text, static_cast<std::size_t>(len));
    info.mpi_library = info.mpi_library.substr(0, info.mpi_library.find_first_of("\n,"));
  }
  const int kv = KOKKOS_VERSION;
  info.kokkos_version =
      std::to_string(kv / 10000) + "." + std::to_string(kv / 100 % 100) + "." + std::to_string(kv % 100);
  info.kokkos_space = Kokkos::DefaultExecutionSpace::name();
#if TESSERA_HAVE_HDF5
  unsigned major = 0, minor = 0, release = 0;
  TESSERA_CHECK_HDF5(H5get_libversion(&major, &minor, &release));
  info.hdf5_version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
#endif
  info.gloo = TESSERA_HAVE_GLOO != 0;
  info.nccl = TESSERA_HAVE_NCCL != 0;
  info.hdf5 = TESSERA_HAVE_HDF5 != 0;
  return info;
}

std::string describe(const BuildInfo& info) {
  std::string line = "Tessera " + info.tessera_version + " | Kokkos " + info.kokkos_version + " (" + info.kokkos_space +
                     ") | " + (info.mpi_library.empty() ? "MPI" : info.mpi_library) + " | HDF5 " +
                     (info.hdf5 ? info.hdf5_version : "off") + " | backends mpi";
  if (info.gloo) line += ", gloo";
  if (info.nccl) line += ", nccl";
  return line;
}

}  // namespace tessera
