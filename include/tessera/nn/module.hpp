#pragma once
/// \file
/// Modules with explicit forward and backward passes over row-major [batch, features] views.

#include <functional>

#include <tessera/core/memory.hpp>
#include <tessera/nn/parameter.hpp>

namespace tessera::nn {

/// The pass a module is in when it calls a hook.
enum class Pass {
  Forward,         ///< reads the values
  Backward,        ///< reads the values and writes the gradients (Module::backward)
  InputGradient,   ///< reads the values, writes no gradient (Module::backward_input)
  WeightGradient,  ///< writes the gradients, reads no value (Module::backward_weights)
};
/// Whether a pass reads parameter values (a strategy that shards them gathers them for it).
constexpr bool reads_values(Pass pass) noexcept { return pass != Pass::WeightGradient; }
/// Whether a pass writes parameter gradients (a strategy that shards them lends the memory).
constexpr bool writes_gradients(Pass pass) noexcept { return pass == Pass::Backward || pass == Pass::WeightGradient; }

/// Called during backward as soon as a parameter's gradient is final (used by DDP to start
/// communicating a bucket while the rest of backward runs).
using GradReadyHook = std::function<void(Parameter&)>;
/// Called before a pass reads a parameter's value or writes its gradient (see Pass). A
/// module acquires all the parameters it uses, together, before its first kernel. A
/// strategy that keeps parameters sharded gathers the value here (ZeRO stage 3) and lends
/// the gradient memory (stages 2 and 3): Parameter::value and ::grad are valid only from
/// here until the release.
using AcquireHook = std::function<void(Parameter&, Pass)>;
/// Called once a pass will neither read a parameter's value nor write its gradient again:
/// the work that uses it is queued. Its value may then change (the optimizer may update it
/// while the rest of backward runs) or its gathered copy be dropped (ZeRO stage 3).
using ReleaseHook = std::function<void(Parameter&, Pass)>;

class Module {
 public:
  virtual ~Module() = default;
  /// Computes the output for x ([batch, in]). The returned view belongs to the module and
  /// stays valid until the next forward; x must stay valid until backward.
  virtual View2D<float> forward(const View2D<const float>& x) = 0;
  /// Given dL/dy for the last forward, adds dL/dparam into the parameters' gradients
  /// (gradients accumulate until zeroed; see Parameter::take_grad_beta) and returns dL/dx
  /// (owned by the module), or an empty view when the input gradient is switched off.
  virtual View2D<float> backward(const View2D<const float>& dy) = 0;
  /// backward() in two halves, for a pipeline stage that sends dL/dx to the previous stage
  /// before it computes its parameters' gradients: backward_input(dy) returns dL/dx, and
  /// backward_weights() then adds dL/dparam (grad-ready hooks fire there). dy must stay
  /// unchanged until backward_weights() returns. A module that does not split runs all of
  /// backward in the first half.
  virtual View2D<float> backward_input(const View2D<const float>& dy) { return backward(dy); }
  virtual void backward_weights() {}
  virtual void set_grad_ready_hook(GradReadyHook hook) { hook_ = std::move(hook); }
  virtual void set_acquire_hook(AcquireHook hook) { acquire_hook_ = std::move(hook); }
  virtual void set_release_hook(ReleaseHook hook) { release_hook_ = std::move(hook); }
  /// Whether backward() computes dL/dx (default true). A model whose input is data, not an
  /// activation, switches it off and saves the first layer's input-gradient GEMM.
  virtual void set_input_grad(bool needed) { input_grad_ = needed; }
  bool input_grad() const noexcept { return input_grad_; }

 protected:
  void grad_ready(Parameter& p) const {
    if (hook_) hook_(p);
  }
  void acquire(Parameter& p, Pass pass) const {
    if (acquire_hook_) acquire_hook_(p, pass);
  }
  void released(Parameter& p, Pass pass) const {
    if (release_hook_) release_hook_(p, pass);
  }
  GradReadyHook hook_;
  AcquireHook acquire_hook_;
  ReleaseHook release_hook_;
  bool input_grad_ = true;
};

/// Resizes `buffer` to [rows, cols] only when its shape differs (no allocation in steady state).
void ensure_shape(View2D<float>& buffer, std::size_t rows, std::size_t cols, const char* label);

}  // namespace tessera::nn
