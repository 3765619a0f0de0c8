// Built when the CUDA toolkit is present: pointer queries, copies and staging buffers.
#include <tessera/core/memory.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cuda_check.hpp"
#include "core/device_copy.hpp"

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

std::string device_pci_bus_id(int device) noexcept {
  char id[32] = {};
  if (device < 0 || cudaDeviceGetPCIBusId(id, sizeof id, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return id;
}

std::string device_name(int device) noexcept {
  cudaDeviceProp prop{};
  if (device < 0 || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return prop.name;
}

std::pair<double, int> device_free_bytes() noexcept {
  std::size_t free = 0, total = 0;
  int devices = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess || cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    return {0, 0};
  }
  return {static_cast<double>(free), devices};
}

namespace {
/// A stream of the process's own that waits for no other stream (never destroyed).
cudaStream_t new_independent_stream() {
  cudaStream_t s = nullptr;
  TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

/// Staging copies run beside the kernels queued on Kokkos' default stream (a blocking
/// stream, which a copy on the legacy default stream would wait for, and which would wait for
/// the copy: a bucket staged for MPI during backward would stall backward and wait for all of
/// it). Whoever wrote a device source has been waited for already (Communicator::submit
/// fences the default execution space before an op reads it).
cudaStream_t copy_stream() {
  static const cudaStream_t stream = new_independent_stream();
  return stream;
}

/// Device staging is allocated and freed in stream order on a stream of its own: cudaFree
/// would wait for every kernel on the device, among them NCCL receives that wait for a peer
/// (a deadlock), and cudaMalloc may too.
cudaStream_t staging_stream() {
  static const cudaStream_t stream = new_independent_stream();
  return stream;
}
}  // namespace

void copy_bytes(void* dst, MemoryKind to, const void* src, MemoryKind from, std::size_t bytes) {
  if (bytes == 0) return;
  if (to == MemoryKind::Host && from == MemoryKind::Host) {
    std::memmove(dst, src, bytes);
    return;
  }
  const cudaMemcpyKind kind = to == MemoryKind::Host     ? cudaMemcpyDeviceToHost
                              : from == MemoryKind::Host ? cudaMemcpyHostToDevice
                                                         : cudaMemcpyDeviceToDevice;
  // Complete when this returns, in either direction: the host reads what came back, and
  // NCCL's streams and Kokkos' are not ordered after this stream.
  TESSERA_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream()));
  TESSERA_CHECK_CUDA(cudaStreamSynchronize(copy_stream()));
}

void Staging::release() noexcept {
  if (data_ == nullptr) return;
  if (kind_ == MemoryKind::Device)
    cudaFreeAsync(data_, staging_stream());  // whoever used it has completed
  else if (pinned_)
    cudaFreeHost(data_);
  else
    std::free(data_);
  data_ = nullptr;
  capacity_ = 0;
}

void* Staging::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return data_;
  release();
  pinned_ = false;
  if (kind_ == MemoryKind::Device) {
    TESSERA_CHECK_CUDA(cudaMallocAsync(&data_, bytes, staging_stream()));
    TESSERA_CHECK_CUDA(cudaStreamSynchronize(staging_stream()));  // now usable on every stream
  } else if (pinnable_ && cudaMallocHost(&data_, bytes) == cudaSuccess) {
    pinned_ = true;
  } else {
    // A CUDA build on a machine without a driver or GPU still runs host-only code.
    if (pinnable_) cudaGetLastError();
    data_ = std::malloc(bytes);
    if (data_ == nullptr) throw Error("out of host memory for a " + std::to_string(bytes) + "-byte buffer");
  }
  capacity_ = bytes;
  return data_;
}
}  // namespace detail
}  // namespace tessera
