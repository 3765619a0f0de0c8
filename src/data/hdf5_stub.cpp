// Built when TESSERA_ENABLE_HDF5=OFF.
#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>

namespace tessera::data {
std::unique_ptr<Dataset> open_hdf5(const std::string& path) {
  throw NotCompiledError("cannot read '" + path + "': HDF5 is not compiled in; rebuild with TESSERA_ENABLE_HDF5=ON");
}
}  // namespace tessera::data

#include <tessera/checkpoint/model_file.hpp>

namespace tessera::checkpoint {
void save_model(const std::string& path, const nn::ParameterStore&, comm::Communicator&) {
  throw NotCompiledError("cannot write '" + path + "': HDF5 is not compiled in; rebuild with TESSERA_ENABLE_HDF5=ON");
}
void load_model(const std::string& path, nn::ParameterStore&) {
  throw NotCompiledError("cannot read '" + path + "': HDF5 is not compiled in; rebuild with TESSERA_ENABLE_HDF5=ON");
}
void load_model(const std::string& path, nn::ParameterStore&, comm::Communicator&) {
  throw NotCompiledError("cannot read '" + path + "': HDF5 is not compiled in; rebuild with TESSERA_ENABLE_HDF5=ON");
}
}  // namespace tessera::checkpoint
