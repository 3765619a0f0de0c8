#pragma once
// Internal: host <-> device copies and pinned host buffers. Without CUDA in the build the
// copies throw NotCompiledError (no device memory can exist then) and HostStaging uses
// ordinary memory.

#include <cstddef>

namespace tessera::detail {

/// The calling thread's CUDA device, or -1 when CUDA is absent or unusable.
int current_device() noexcept;
/// Makes `device` the calling thread's CUDA device (background threads start on device 0).
void set_device(int device);
void copy_device_to_host(void* host, const void* device, std::size_t bytes);
void copy_host_to_device(void* device, const void* host, std::size_t bytes);

/// A grow-only host buffer. With `pinned`, it is page-locked when a CUDA device is usable,
/// so device copies run at full speed; otherwise (or without CUDA) it is ordinary memory.
class HostStaging {
 public:
  explicit HostStaging(bool pinned = false) : pinned_(pinned) {}
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  /// At least `bytes` bytes; contents are not preserved across growth.
  void* reserve(std::size_t bytes);

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  bool pinned_ = false;
  bool is_pinned_ = false;  // how data_ was allocated
};

}  // namespace tessera::detail
