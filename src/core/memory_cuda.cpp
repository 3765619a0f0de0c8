// Built when the CUDA toolkit is present: pointer queries, copies and pinned staging.
#include <tessera/core/memory.hpp>

#include "core/cuda_check.hpp"
#include "core/device_copy.hpp"

#include <cstdlib>
#include <string>

namespace tessera {
MemoryKind memory_kind_of(const void* ptr) noexcept {
  if (ptr == nullptr) return MemoryKind::Host;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // plain host pointers may report an error on old runtimes; clear it
    return MemoryKind::Host;
  }
  return attr.type == cudaMemoryTypeDevice ? MemoryKind::Device : MemoryKind::Host;
}

namespace detail {
int current_device() noexcept {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}
void set_device(int device) { TESSERA_CHECK_CUDA(cudaSetDevice(device)); }
void copy_device_to_host(void* host, const void* device, std::size_t bytes) {
  TESSERA_CHECK_CUDA(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}
void copy_host_to_device(void* device, const void* host, std::size_t bytes) {
  TESSERA_CHECK_CUDA(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

HostStaging::~HostStaging() {
  if (data_ == nullptr) return;
  if (is_pinned_)
    cudaFreeHost(data_);
  else
    std::free(data_);
}
void* HostStaging::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return data_;
  this->~HostStaging();
  data_ = nullptr;
  capacity_ = 0;
  is_pinned_ = false;
  // A CUDA build on a machine without a driver or GPU still runs host-only code.
  if (pinned_ && cudaMallocHost(&data_, bytes) == cudaSuccess) {
    is_pinned_ = true;
  } else {
    if (pinned_) cudaGetLastError();
    data_ = std::malloc(bytes);
    if (data_ == nullptr) throw Error("out of host memory for a " + std::to_string(bytes) + "-byte buffer");
  }
  capacity_ = bytes;
  return data_;
}
}  // namespace detail
}  // namespace tessera
