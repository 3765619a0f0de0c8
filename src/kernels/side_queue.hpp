#pragma once
// Internal: a second in-order queue of device work beside Kokkos' default one, for work
// that may run while the default queue is busy (the optimizer's updates while backward's
// GEMMs run). On a GPU it is a CUDA stream of its own; on the host, where kernels run where
// they are called, it is the default execution space itself.

#include <memory>

#include <tessera/core/memory.hpp>

namespace tessera::kernels {

class SideQueue {
 public:
  /// `urgent`: on a GPU, the stream has the device's highest priority, so that where the
  /// default queue's kernels have blocks waiting, a multiprocessor that frees up takes this
  /// queue's first (for updates beside backward on one GPU). Otherwise normal priority.
  explicit SideQueue(bool urgent = false);
  ~SideQueue();
  SideQueue(const SideQueue&) = delete;
  SideQueue& operator=(const SideQueue&) = delete;

  /// The execution space instance that queues work here.
  const Kokkos::DefaultExecutionSpace& space() const noexcept;
  /// Work queued here from now on starts after everything queued so far on the default
  /// queue (and on cuBLAS, which shares it). Returns at once.
  void follow_default();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::kernels
