#pragma once
/// \file
/// Data parallelism: every rank holds the whole model; gradients are averaged across ranks
/// in buckets that start communicating during backward, as soon as they are complete.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include <tessera/comm/communicator.hpp>
#include <tessera/nn/module.hpp>
#include <tessera/nn/parameter.hpp>
#include <tessera/parallel/strategy.hpp>

namespace tessera::parallel {

/// When DDP starts a bucket's reduction.
enum class BackwardOverlap {
  /// On, except where gradients live in host memory and the rank has one core
  /// (Session::cores()): there the progress thread can only take turns with backward on
  /// that core, and the ranks' turns fall out of step (measured slower: docs/strategies.md).
  Auto,
  /// As soon as its gradients are ready, during the rest of backward (PyTorch DDP's way).
  On,
  /// After backward, one after another on the calling thread, each handed to the optimizer
  /// (begin_step's callback) before the next is reduced.
  Off,
};

/// "auto", "true" or "false".
const char* overlap_name(BackwardOverlap overlap) noexcept;

struct DDPOptions {
  double bucket_mb = 25.0;       ///< size cap of every bucket but the first (MiB of gradients)
  double first_bucket_mb = 1.0;  ///< the first bucket (the last layers) is small so it starts early
  /// Float32 or BFloat16 on the wire (reduced in float32). On one rank nothing is sent, so
  /// gradients are not rounded to bfloat16 there.
  DType grad_dtype = DType::Float32;
  /// True when the caller divided the loss gradient by the number of ranks before backward
  /// (the Trainer does): the reduction then only sums, and no pass over the gradients has to
  /// divide them (MPI and Gloo have no average of their own).
  bool loss_gradient_divided = false;
  BackwardOverlap overlap_backward = BackwardOverlap::Auto;
};

/// What `overlap` means on this rank: true where buckets are reduced during backward.
bool overlaps_backward(BackwardOverlap overlap);

/// A contiguous range of the flat gradient buffer, reduced as one all_reduce.
struct GradientBucket {
  std::size_t offset = 0;  ///< first element in the store
  std::size_t numel = 0;
  std::vector<std::string> parameters;  ///< in the order their gradients become ready
};

/// On a communicator of one rank there is nothing to average, and no bucket is sent.
class DistributedDataParallel final : public DataParallelStrategy {
 public:
  /// Buckets the store's gradients (allocating the store if it is not yet) and installs the
  /// model's gradient-ready and release hooks.
  DistributedDataParallel(nn::Module& model, nn::ParameterStore& store, comm::Communicator& comm,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  const char* name() const noexcept override { return "ddp"; }
  View1D<float> update_values() override { return store_.values(); }
  View1D<float> update_grads() override { return store_.grads(); }
  bool sharded_update() const noexcept override { return false; }
  /// Throws tessera::Error naming the first parameter whose value differs between ranks.
  void verify_replicas_identical() override;
  /// When false, backward leaves gradients local (gradient accumulation's early micro-steps).
  void set_sync(bool sync) noexcept override { sync_ = sync; }
  /// Call before the backward pass of a step that synchronises. `on_bucket(offset, count)`,
  /// if given, runs once for every bucket as soon as its gradients are final and backward no
  /// longer needs its parameters' values, so that an element-wise optimizer update there
  /// overlaps the rest of the step. With several ranks that is inside
  /// finish_gradient_sync(), as each bucket's reduction completes while later buckets still
  /// travel. On one rank, with nothing to reduce, it is during backward, as soon as the model
  /// has released the bucket's last parameter (Module::set_release_hook).
  void begin_step(BucketCallback on_bucket = {}) override;
  /// Launches any bucket not yet launched, waits for all, and leaves every gradient averaged
  /// across ranks; runs on_bucket for the buckets not yet handed to it. Only the time spent
  /// waiting, not in on_bucket, counts as exposed communication.
  void finish_gradient_sync() override;

  const std::vector<GradientBucket>& buckets() const noexcept { return buckets_; }
  /// True where buckets are reduced during backward (DDPOptions::overlap_backward resolved).
  bool overlaps_backward() const noexcept { return overlap_; }
  const SyncStats& last_sync() const noexcept override { return stats_; }
  /// The bfloat16 staging of the buckets (none for float32 gradients).
  std::size_t working_bytes() const noexcept override;

 private:
  void on_grad_ready(nn::Parameter& p);
  void on_released(nn::Parameter& p);
  /// Starts the bucket's reduction on the progress thread, or runs it on this one (`here`).
  void launch(std::size_t bucket, bool here = false);
  void hand_over(std::size_t bucket);

  nn::ParameterStore& store_;
  comm::Communicator& comm_;
  DDPOptions options_;
  std::vector<GradientBucket> buckets_;
  std::unordered_map<const nn::Parameter*, std::size_t> bucket_of_;
  std::vector<std::size_t> pending_;  // per bucket: gradients not yet ready this step
  std::vector<bool> launched_;
  std::vector<bool> handed_;             // on_bucket ran for it this step
  std::vector<std::size_t> unreleased_;  // per bucket: parameters backward may still read
  BucketCallback on_bucket_;
  std::vector<comm::Work> work_;
  std::vector<View1D<bfloat16>> wire_;  // bf16 staging per bucket
  std::size_t ready_ = 0;
  std::vector<std::size_t> completed_;  // buckets in the order backward completed them this step
  bool sync_ = true;
  bool in_step_ = false;
  bool overlap_ = true;
  SyncStats stats_;
};

}  // namespace tessera::parallel
