#pragma once
// Internal: copies between host and device memory, and grow-only staging buffers of either
// kind. Without CUDA in the build no device memory can exist: copies that involve it and
// device staging throw NotCompiledError, and host staging uses ordinary memory.

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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
/// The product name of CUDA device `device` ("NVIDIA H100 80GB HBM3"); empty without CUDA or
/// when it cannot be asked.
std::string device_name(int device) noexcept;
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
  std::size_t capacity() const noexcept { return capacity_; }
  MemoryKind kind() const noexcept { return kind_; }

 private:
  void release() noexcept;
  MemoryKind kind_;
  bool pinnable_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  bool pinned_ = false;  // how a host data_ was allocated
};

/// Staging buffers lent to one transfer at a time. A send or receive in flight borrows one and
/// the buffer comes back when the lease ends, so a steady stream of transfers (a pipeline's
/// activations over an MPI without CUDA support) allocates and page-locks its buffers once
/// rather than per transfer: page-locking host memory takes milliseconds for a large buffer,
/// and CUDA synchronizes the device's streams around it. At most `keep` idle buffers of each
/// kind are kept; every lease must end before the pool is destroyed.
class StagingPool {
 public:
  struct Return {
    StagingPool* pool = nullptr;
    void operator()(Staging* s) const noexcept;
  };
  using Lease = std::unique_ptr<Staging, Return>;

  explicit StagingPool(std::size_t keep = 8) : keep_(keep) {}
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  /// A buffer of `kind` with room for at least `bytes`: the smallest idle one that fits, else
  /// the largest idle one grown, else a new one.
  Lease take(MemoryKind kind, std::size_t bytes);
  /// Idle buffers of `kind` (tests and diagnostics).
  std::size_t idle(MemoryKind kind) const;

 private:
  void give_back(Staging* s) noexcept;
  std::size_t keep_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Staging>> idle_;
};

}  // namespace tessera::detail
