#pragma once
// Internal: checks a CUDA runtime call and throws tessera::Error naming the call and place.

#include <cuda_runtime.h>

#include <string>

#include <tessera/core/error.hpp>

#define TESSERA_CHECK_CUDA(call)                                                                                   \
  do {                                                                                                             \
    const cudaError_t tessera_cuda_rc_ = (call);                                                                   \
    if (tessera_cuda_rc_ != cudaSuccess) {                                                                         \
      std::string tessera_call_(#call);                                                                            \
      throw ::tessera::Error(tessera_call_.substr(0, tessera_call_.find('(')) + " failed: " +                      \
                                 cudaGetErrorName(tessera_cuda_rc_) + ": " + cudaGetErrorString(tessera_cuda_rc_), \
                             __FILE__, __LINE__);                                                                  \
    }                                                                                                              \
  } while (0)
