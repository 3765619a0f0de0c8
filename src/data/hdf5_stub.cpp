// Built when TESSERA_ENABLE_HDF5=OFF.
#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>

namespace tessera::data {
std::unique_ptr<Dataset> open_hdf5(const std::string& path) {
  throw NotCompiledError("cannot read '" + path + "': HDF5 is not compiled in; rebuild with TESSERA_ENABLE_HDF5=ON");
}
}  // namespace tessera::data
