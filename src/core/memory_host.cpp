// Built when CUDA is not: no device memory exists, so every pointer is host memory.
#include <tessera/core/error.hpp>
#include <tessera/core/memory.hpp>

#include <cstdlib>

#include "core/device_copy.hpp"

namespace tessera {
MemoryKind memory_kind_of(const void*) noexcept { return MemoryKind::Host; }

namespace detail {
int current_device() noexcept { return -1; }
void set_device(int) {}
void copy_device_to_host(void*, const void*, std::size_t) {
  throw NotCompiledError(
      "device memory needs CUDA, which is not compiled in; rebuild with "
      "the CUDA toolkit available (TESSERA_ENABLE_NCCL=ON)");
}
void copy_host_to_device(void* d, const void* h, std::size_t b) { copy_device_to_host(d, h, b); }

HostStaging::~HostStaging() { std::free(data_); }
void* HostStaging::reserve(std::size_t bytes) {
  if (bytes > capacity_) {
    std::free(data_);
    data_ = std::malloc(bytes);
    if (data_ == nullptr) throw Error("out of host memory for a " + std::to_string(bytes) + "-byte buffer");
    capacity_ = bytes;
  }
  return data_;
}
}  // namespace detail
}  // namespace tessera
