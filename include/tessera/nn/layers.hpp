#pragma once
/// \file
/// Linear, GELU and MLP modules.

#include <memory>
#include <string>
#include <vector>

#include <tessera/nn/module.hpp>

namespace tessera::comm {
class Communicator;
}

namespace tessera::nn {

/// How a Linear layer is split over a tensor-parallel group of T ranks (Megatron's pair).
enum class TensorSplit {
  None,    ///< every rank holds the whole layer
  Column,  ///< W's rows (output features) and b are cut in T blocks: from the whole input,
           ///< each rank computes its block of the output. Forward sends nothing; backward
           ///< sums the input gradient over the group (all_reduce).
  Row,     ///< W's columns (input features) are cut in T blocks and b is whole: each rank
           ///< multiplies its block of the input, and forward sums the products over the
           ///< group (all_reduce) before adding b. Backward sends nothing.
};

/// y = x W^T + b, with W of shape [out, in] and optional b of shape [out]. Initialised like
/// PyTorch's nn.Linear: uniform in [-1/sqrt(in), 1/sqrt(in)), by global index, so a split
/// layer holds exactly the blocks of the whole one.
class Linear final : public Module {
 public:
  Linear(ParameterStore& store, const std::string& name, std::size_t in, std::size_t out, bool bias = true);
  /// A layer split over the tensor-parallel group `tp` (ConfigError when T does not divide
  /// the split dimension). With a Column split the input is whole and the output is this
  /// rank's block of features; with a Row split the input is this rank's block and the
  /// output is whole.
  Linear(ParameterStore& store, const std::string& name, std::size_t in, std::size_t out, TensorSplit split,
         comm::Communicator& tp, bool bias = true);
  View2D<float> forward(const View2D<const float>& x) override;
  View2D<float> backward(const View2D<const float>& dy) override;
  View2D<float> backward_input(const View2D<const float>& dy) override;
  void backward_weights() override;
  /// Without an input gradient backward reads no value: the parameters say so
  /// (Parameter::backward_reads_value), and backward acquires them as a weight-gradient pass.
  void set_input_grad(bool needed) override;
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  /// A layer on the same parameters (and hooks) with activations of its own: one per
  /// micro-batch a pipeline keeps in flight.
  std::unique_ptr<Linear> replica() const;

 private:
  Linear(const Linear&) = default;
  void weight_gradients(const View2D<const float>& dy);  // dW and db, each reported ready
  void input_gradient(const View2D<const float>& dy);    // dx = dy W
  // Throws unless dy is the gradient of the last forward's output (its shape): before any forward,
  // or of another shape, the GEMM's own message named neither the layer nor dy.
  void check_output_gradient(const View2D<const float>& dy, const char* call) const;
  std::size_t in_, out_;  // as this rank's block sees them
  TensorSplit split_ = TensorSplit::None;
  comm::Communicator* tp_ = nullptr;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  View2D<const float> x_, dy_;  // dy_: from backward_input until backward_weights
  View2D<float> y_, dx_;
  View1D<float> ones_;  // for the bias gradient's GEMV where the GEMM's epilogue cannot sum it
};

/// GELU in its exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)).
class GELU final : public Module {
 public:
  View2D<float> forward(const View2D<const float>& x) override;
  View2D<float> backward(const View2D<const float>& dy) override;

 private:
  View2D<const float> x_;
  View2D<float> y_, dx_;
  View2D<float> cdf_;  // Phi(x) from forward, for backward; host builds only (a GPU computes it again)
};

/// `layers` Linear(dim, dim) layers named "layers.<i>.weight"/"layers.<i>.bias", each
/// followed by GELU except the last. Backward runs the layers in reverse and reports each
/// layer's gradients as soon as they are final.
///
/// Given a tensor-parallel group of T > 1 ranks, the layers are split in pairs: layer 2k by
/// columns, layer 2k+1 by rows, with GELU between them on each rank's block of features, so
/// each pair costs one all_reduce in forward and one in backward. With an odd number of
/// layers the last one is whole on every rank (its input and output are whole, and every
/// rank computes the same gradients). The model's input and output are whole on every rank.
///
/// A pipeline stage builds only layers [first, first + count) of the `layers`-layer model
/// (names and GELUs as in the whole model).
class MLP final : public Module {
 public:
  MLP(ParameterStore& store, std::size_t layers, std::size_t dim, const std::string& prefix = "layers",
      comm::Communicator* tp = nullptr);
  MLP(ParameterStore& store, std::size_t layers, std::size_t dim, const std::string& prefix, comm::Communicator* tp,
      std::size_t first, std::size_t count);
  /// A model on the same parameters (and hooks) with activations of its own: one per
  /// micro-batch a pipeline keeps in flight.
  std::unique_ptr<MLP> replica() const;
  View2D<float> forward(const View2D<const float>& x) override;
  View2D<float> backward(const View2D<const float>& dy) override;
  /// Every layer's input gradient, last layer first, then (backward_weights) every layer's
  /// parameter gradients in the same order.
  View2D<float> backward_input(const View2D<const float>& dy) override;
  void backward_weights() override;
  void set_grad_ready_hook(GradReadyHook hook) override;
  void set_acquire_hook(AcquireHook hook) override;
  void set_release_hook(ReleaseHook hook) override;
  void set_input_grad(bool needed) override;
  std::size_t depth() const noexcept { return linears_.size(); }
  Linear& layer(std::size_t i) { return *linears_[i]; }

 private:
  MLP() = default;
  std::vector<std::unique_ptr<Linear>> linears_;
  std::vector<std::unique_ptr<GELU>> gelus_;
};

/// Mean squared error over every element: L = mean((y - t)^2). Writes dL/dy into dy
/// (resized as needed) and returns L.
float mse_loss(const View2D<const float>& y, const View2D<const float>& target, View2D<float>& dy);

/// Softmax cross-entropy against integer labels, averaged over the batch. Writes dL/dy
/// into dy and returns L. Labels outside [0, classes) are a ConfigError.
float cross_entropy_loss(const View2D<const float>& logits, const View1D<const std::int64_t>& labels,
                         View2D<float>& dy);

}  // namespace tessera::nn
