#pragma once
/// \file
/// What the training loop asks of a data-parallel strategy (DDP, ZeRO stages 1-3): which
/// parameters this rank updates, and when gradients and parameters are made consistent.

#include <cstddef>
#include <functional>
#include <vector>

#include <tessera/core/memory.hpp>

namespace tessera::parallel {

/// Called with a range [offset, offset + count) of the strategy's update views (see
/// DataParallelStrategy::update_values) once its gradients are final.
using BucketCallback = std::function<void(std::size_t offset, std::size_t count)>;

/// What happened to the gradients and parameters of one step (for metrics and tests).
struct SyncStats {
  /// Time the step waited for communication: in finish_gradient_sync() and finish_step(),
  /// and, for ZeRO stage 3, for gathers during forward and backward (included here).
  double exposed_s = 0;
  double on_bucket_s = 0;           ///< time spent in on_bucket callbacks so far this step
  double waited_in_forward_s = 0;   ///< of exposed_s, the part spent inside forward
  double waited_in_backward_s = 0;  ///< of exposed_s, the part spent inside backward
  /// For each bucket, in launch order: how many of the model's gradients were ready when it
  /// was launched (fewer than all means it overlapped the rest of backward).
  std::vector<std::size_t> ready_at_launch;
  std::size_t buckets_launched_during_backward = 0;
  /// ZeRO stage 3: layers gathered this step, and how many of them before they were needed.
  std::size_t gathers = 0;
  std::size_t gathers_prefetched = 0;
};

/// The training loop drives a strategy so, for each optimizer step:
///
///     new_step();
///     for each micro-step: forward; set_sync(last); if last: begin_step(on_bucket);
///                          backward; end_backward();
///     finish_gradient_sync();     // the gradients of update_grads() are final
///     optimizer over update_values()/update_grads(); wait for it
///     finish_step();              // the parameters are whole again where they must be
class DataParallelStrategy {
 public:
  virtual ~DataParallelStrategy() = default;
  /// "ddp", "zero-1", "zero-2" or "zero-3".
  virtual const char* name() const noexcept = 0;
  /// The parameters this rank updates (the whole model for DDP, its shard for ZeRO) and their
  /// gradients, as views the optimizer keeps.
  virtual View1D<float> update_values() = 0;
  virtual View1D<float> update_grads() = 0;
  /// True when ranks update disjoint shards: a sum over update_grads() (the squared gradient
  /// norm) must then be summed over the ranks.
  virtual bool sharded_update() const noexcept = 0;
  /// Throws tessera::Error naming the first parameter whose replicated value differs between
  /// ranks (collective).
  virtual void verify_replicas_identical() = 0;
  virtual void new_step() {}
  /// When false, backward leaves gradients local (gradient accumulation's early micro-steps),
  /// where the strategy keeps whole gradients between micro-steps.
  virtual void set_sync(bool sync) noexcept = 0;
  /// Before the backward pass of the step's last micro-step. `on_bucket(offset, count)`, if
  /// given, runs once for every range of the update views as soon as its gradients are final
  /// and backward no longer needs its values.
  virtual void begin_step(BucketCallback on_bucket = {}) = 0;
  /// After each micro-step's backward.
  virtual void end_backward() {}
  /// Waits for the gradients' communication; afterwards update_grads() holds the gradients
  /// averaged over the ranks and every range was handed to on_bucket.
  virtual void finish_gradient_sync() = 0;
  /// After the optimizer's updates are complete (ZeRO stages 1 and 2 all-gather the updated
  /// parameters here).
  virtual void finish_step() {}
  virtual const SyncStats& last_sync() const noexcept = 0;
  /// High-water mark of the strategy's transient buffers (buckets, gathered layers), in bytes.
  virtual std::size_t working_bytes() const noexcept = 0;
};

}  // namespace tessera::parallel
