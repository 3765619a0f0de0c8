// Built when CUDA is not: no device memory exists, so every pointer is host memory.
#include <tessera/core/error.hpp>
#include <tessera/core/memory.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/device_copy.hpp"

namespace tessera {
MemoryKind memory_kind_of(const void*) noexcept { return MemoryKind::Host; }

namespace detail {
namespace {
[[noreturn]] void no_device() {
  throw NotCompiledError(
      "device memory needs CUDA, which is not compiled in; rebuild with the CUDA toolkit available "
      "(TESSERA_ENABLE_NCCL=ON) and a Kokkos with its CUDA backend");
}
}  // namespace

int current_device() noexcept { return -1; }
std::pair<double, int> device_free_bytes() noexcept { return {0, 0}; }
std::string device_pci_bus_id(int) noexcept { return {}; }
std::string device_name(int) noexcept { return {}; }
void set_device(int) {}
void copy_bytes(void* dst, MemoryKind to, const void* src, MemoryKind from, std::size_t bytes) {
  if (to == MemoryKind::Device || from == MemoryKind::Device) no_device();
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void Staging::release() noexcept { std::free(data_); }
void* Staging::reserve(std::size_t bytes) {
  if (kind_ == MemoryKind::Device) no_device();
  if (bytes > capacity_) {
    std::free(data_);
    data_ = std::malloc(bytes);
    capacity_ = data_ != nullptr ? bytes : 0;
    if (data_ == nullptr) throw Error("out of host memory for a " + std::to_string(bytes) + "-byte buffer");
  }
  return data_;
}
}  // namespace detail
}  // namespace tessera
