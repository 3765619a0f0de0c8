#pragma once
// Internal: copies between host and device memory, and grow-only staging buffers of either
// kind. Without CUDA in the build no device memory can exist: copies that involve it and
// device staging throw NotCompiledError, and host staging uses ordinary memory.

#include <cstddef>
#include <string>
#include <utility>

#include <tessera/core/memory.hpp>

namespace tessera::detail {

/// The calling thread's CUDA device, or -1 when CUDA is absent or unusable.
int current_device() noexcept;
/// Makes `device` the calling thread's CUDA device (background threads start on device 0).
void set_device(int device);
/// Free bytes on the calling thread's GPU and the number of GPUs, or {0, 0} without CUDA.
std::pair<double, int> device_free_bytes() noexcept;
/// The PCI bus id of CUDA device `device` ("0000:41:00.0"): one physical GPU has one,
/// whatever CUDA_VISIBLE_DEVICES numbers it. Empty without CUDA or when it cannot be asked.
std::string device_pci_bus_id(int device) noexcept;
/// Copies `bytes` from `src` (in memory `from`) to `dst` (in memory `to`); returns when done.
/// The copy waits for no kernel: whatever wrote `src` must have been waited for (a device
/// buffer an op reads is, in Communicator::submit).
void copy_bytes(void* dst, MemoryKind to, const void* src, MemoryKind from, std::size_t bytes);

/// The other kind of memory.
constexpr MemoryKind other(MemoryKind m) { return m == MemoryKind::Host ? MemoryKind::Device : MemoryKind::Host; }

/// A grow-only buffer in host or device memory. Host buffers for device copies (`pinnable`)
/// are page-locked when a CUDA device is usable, so those copies run at full speed;
/// otherwise (or without CUDA) they are ordinary memory.
class Staging {
 public:
  explicit Staging(MemoryKind kind = MemoryKind::Host, bool pinnable = true) : kind_(kind), pinnable_(pinnable) {}
  ~Staging() { release(); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  /// At least `bytes` bytes; contents are not preserved across growth.
  void* reserve(std::size_t bytes);
  void* data() const noexcept { return data_; }
  MemoryKind kind() const noexcept { return kind_; }

 private:
  void release() noexcept;
  MemoryKind kind_;
  bool pinnable_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  bool pinned_ = false;  // how a host data_ was allocated
};

}  // namespace tessera::detail
