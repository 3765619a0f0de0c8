#pragma once
/// \file
/// Linear, GELU and MLP modules.

#include <memory>
#include <string>
#include <vector>

#include <tessera/nn/module.hpp>

namespace tessera::nn {

/// y = x W^T + b, with W of shape [out, in] and optional b of shape [out]. Initialised like
/// PyTorch's nn.Linear: uniform in [-1/sqrt(in), 1/sqrt(in)).
class Linear final : public Module {
 public:
  Linear(ParameterStore& store, const std::string& name, std::size_t in, std::size_t out, bool bias = true);
  View2D<float> forward(const View2D<const float>& x) override;
  View2D<float> backward(const View2D<const float>& dy) override;
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 private:
  std::size_t in_, out_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  View2D<const float> x_;
  View2D<float> y_, dx_, ones_;
};

/// GELU in its exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)).
class GELU final : public Module {
 public:
  View2D<float> forward(const View2D<const float>& x) override;
  View2D<float> backward(const View2D<const float>& dy) override;

 private:
  View2D<const float> x_;
  View2D<float> y_, dx_, cdf_;
};

/// `layers` Linear(dim, dim) layers named "layers.<i>.weight"/"layers.<i>.bias", each
/// followed by GELU except the last. Backward runs the layers in reverse and reports each
/// layer's gradients as soon as they are final.
class MLP final : public Module {
 public:
  MLP(ParameterStore& store, std::size_t layers, std::size_t dim, const std::string& prefix = "layers");
  View2D<float> forward(const View2D<const float>& x) override;
  View2D<float> backward(const View2D<const float>& dy) override;
  void set_grad_ready_hook(GradReadyHook hook) override;
  void set_acquire_hook(AcquireHook hook) override;
  void set_release_hook(ReleaseHook hook) override;
  void set_input_grad(bool needed) override;
  std::size_t depth() const noexcept { return linears_.size(); }
  Linear& layer(std::size_t i) { return *linears_[i]; }

 private:
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
