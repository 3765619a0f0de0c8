#pragma once
// Internal: checks an HDF5 call (negative herr_t/hid_t means failure) and throws
// tessera::CheckpointError naming the call and place.

#include <string>

#include <tessera/core/error.hpp>

#define TESSERA_CHECK_HDF5(call)                                                                                   \
  [&]() {                                                                                                          \
    auto tessera_h5_rc_ = (call);                                                                                  \
    if (tessera_h5_rc_ < 0) {                                                                                      \
      std::string tessera_call_(#call);                                                                            \
      throw ::tessera::CheckpointError(                                                                            \
          tessera_call_.substr(0, tessera_call_.find('(')) + " failed (see the HDF5 error stack above)", __FILE__, \
          __LINE__);                                                                                               \
    }                                                                                                              \
    return tessera_h5_rc_;                                                                                         \
  }()
