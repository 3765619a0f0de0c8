#pragma once
/// \file
/// Optimizers over a flat range of parameters and gradients (the whole store for DDP, a
/// shard of it for ZeRO), with PyTorch's update rules and defaults.

#include <cstdint>
#include <memory>
#include <string>

#include <tessera/core/memory.hpp>

namespace tessera::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of `params` from `grads` (views of equal length given at construction).
  /// Returns the sum of the squared gradients (see grad_square_sum()).
  double step() {
    begin_step();
    update(0, size());
    return grad_square_sum();
  }
  /// Starts a step (advances step counters); then update() must cover every element once.
  void begin_step();
  /// Applies the current step to elements [offset, offset + count). The rules are
  /// element-wise, so ranges may be updated in any order, e.g. each gradient bucket as soon
  /// as its reduction completes. On a GPU it only queues the kernels and returns. Throws
  /// before the first begin_step() (AdamW would apply only the weight decay, every step).
  void update(std::size_t offset, std::size_t count);
  /// Waits for this step's updates and returns the sum of the squares of the gradients they
  /// read: the squared gradient norm, computed in the updates' own pass over memory.
  double grad_square_sum();
  /// Queues later updates on this execution space instance (e.g. a CUDA stream beside the
  /// one backward runs on, so that they overlap it). Default: the default instance.
  void run_on(const Kokkos::DefaultExecutionSpace& space) { space_ = space; }
  /// On a GPU, runs each later update on at most `threads` threads (0, the default: as many
  /// as its range fills), each stepping through the range's work items (groups of four
  /// elements where aligned) by that many. An update queued beside other kernels (backward's
  /// GEMMs) then holds only that many threads' share of the GPU for its whole run and leaves
  /// the rest to them, instead of taking every multiprocessor they free. No effect on the
  /// host.
  void limit_threads(std::size_t threads) noexcept { threads_ = threads; }
  virtual std::size_t size() const noexcept = 0;
  virtual float lr() const noexcept = 0;
  /// Sets the learning rate (AdamW's bias-corrected step size takes it at the next
  /// begin_step(), as a schedule sets it between steps); throws ConfigError unless it is a
  /// finite number >= 0 (a schedule that divides by a warm-up of 0 steps gives NaN).
  virtual void set_lr(float lr) = 0;
  /// Bytes of optimizer state this rank holds.
  virtual std::size_t state_bytes() const noexcept = 0;
  virtual const char* name() const noexcept = 0;

 protected:
  /// Advances the step counters.
  virtual void start_step() = 0;
  /// Queues the update of [offset, offset + count) on space_; writes its gradients' sum of
  /// squares into `grad_square`.
  virtual void apply(std::size_t offset, std::size_t count,
                     const Kokkos::View<double, DeviceMemorySpace>& grad_square) = 0;
  Kokkos::DefaultExecutionSpace space_;
  std::size_t threads_ = 0;  // limit_threads()

 private:
  Kokkos::View<double*, DeviceMemorySpace> partials_;  // one sum of squares per update() of the step
  std::size_t updates_ = 0;
  bool begun_ = false;  // begin_step() was called
};

struct SGDOptions {
  float lr = 0.01f;
  float momentum = 0.0f;      ///< 0 disables the momentum buffer
  float weight_decay = 0.0f;  ///< L2, added to the gradient as in torch.optim.SGD
};

/// torch.optim.SGD (dampening 0, no Nesterov): g += wd p; b = momentum b + g (b = g at the
/// first step); p -= lr b.
class SGD final : public Optimizer {
 public:
  SGD(View1D<float> params, View1D<float> grads, SGDOptions options = {});
  std::size_t size() const noexcept override { return params_.size(); }
  float lr() const noexcept override { return options_.lr; }
  void set_lr(float lr) override;
  std::size_t state_bytes() const noexcept override { return momentum_.size() * sizeof(float); }
  const char* name() const noexcept override { return "sgd"; }

 protected:
  void start_step() override;
  void apply(std::size_t offset, std::size_t count,
             const Kokkos::View<double, DeviceMemorySpace>& grad_square) override;

 private:
  View1D<float> params_, grads_, momentum_;
  SGDOptions options_;
  std::int64_t t_ = 0;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

/// torch.optim.AdamW: p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
class AdamW final : public Optimizer {
 public:
  AdamW(View1D<float> params, View1D<float> grads, AdamWOptions options = {});
  std::size_t size() const noexcept override { return params_.size(); }
  float lr() const noexcept override { return options_.lr; }
  void set_lr(float lr) override;
  std::size_t state_bytes() const noexcept override { return 2 * m_.size() * sizeof(float); }
  const char* name() const noexcept override { return "adamw"; }
  std::int64_t steps() const noexcept { return t_; }

 protected:
  void start_step() override;
  void apply(std::size_t offset, std::size_t count,
             const Kokkos::View<double, DeviceMemorySpace>& grad_square) override;

 private:
  View1D<float> params_, grads_, m_, v_;
  AdamWOptions options_;
  std::int64_t t_ = 0;
  float step_size_ = 0, inv_sqrt_c2_ = 1;  // bias corrections of the current step
};

}  // namespace tessera::optim
