#include <tessera/core/error.hpp>
#include <tessera/optim/optimizer.hpp>

#include <cmath>

#include "kernels/summing_loop.hpp"

namespace tessera::optim {
namespace {
void require_same_length(const View1D<float>& p, const View1D<float>& g, const char* who) {
  if (p.size() != g.size())
    throw Error(std::string(who) + ": " + std::to_string(p.size()) + " parameters but " + std::to_string(g.size()) +
                " gradients");
}
}  // namespace

SGD::SGD(View1D<float> params, View1D<float> grads, SGDOptions options)
    : params_(params), grads_(grads), options_(options) {
  require_same_length(params, grads, "SGD");
  if (options.lr < 0 || options.momentum < 0 || options.weight_decay < 0)
    throw ConfigError("SGD: lr, momentum and weight_decay must be >= 0");
  if (options.momentum > 0) momentum_ = View1D<float>("tessera::sgd::momentum", params.size());
}

void SGD::begin_step() { ++t_; }

double SGD::update(std::size_t offset, std::size_t count) {
  auto p = params_;
  auto g = grads_;
  auto b = momentum_;
  const float lr = options_.lr, mu = options_.momentum, wd = options_.weight_decay;
  const bool use_momentum = mu > 0, first = t_ == 1;
  return kernels::for_each_summing(
      "tessera::sgd", offset, offset + count, KOKKOS_LAMBDA(std::size_t i) {
        const float gi = g(i);
        float d = gi + wd * p(i);
        if (use_momentum) {
          d = first ? d : mu * b(i) + d;
          b(i) = d;
        }
        p(i) -= lr * d;
        return gi * gi;
      });
}

AdamW::AdamW(View1D<float> params, View1D<float> grads, AdamWOptions options)
    : params_(params), grads_(grads), options_(options) {
  require_same_length(params, grads, "AdamW");
  if (options.lr < 0 || options.eps <= 0 || options.weight_decay < 0 || options.beta1 < 0 || options.beta1 >= 1 ||
      options.beta2 < 0 || options.beta2 >= 1)
    throw ConfigError("AdamW: need lr >= 0, eps > 0, weight_decay >= 0 and betas in [0, 1)");
  m_ = View1D<float>("tessera::adamw::m", params.size());
  v_ = View1D<float>("tessera::adamw::v", params.size());
}

void AdamW::begin_step() {
  ++t_;
  const double c1 = 1.0 - std::pow(static_cast<double>(options_.beta1), static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(static_cast<double>(options_.beta2), static_cast<double>(t_));
  step_size_ = static_cast<float>(options_.lr / c1);
  inv_sqrt_c2_ = static_cast<float>(1.0 / std::sqrt(c2));
}

double AdamW::update(std::size_t offset, std::size_t count) {
  auto p = params_;
  auto g = grads_;
  auto m = m_;
  auto v = v_;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  const float decay = 1.0f - options_.lr * options_.weight_decay;
  const float step_size = step_size_, inv_sqrt_c2 = inv_sqrt_c2_;
  return kernels::for_each_summing(
      "tessera::adamw", offset, offset + count, KOKKOS_LAMBDA(std::size_t i) {
        const float gi = g(i);
        const float mi = b1 * m(i) + (1.0f - b1) * gi;
        const float vi = b2 * v(i) + (1.0f - b2) * gi * gi;
        m(i) = mi;
        v(i) = vi;
        p(i) = p(i) * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_c2 + eps);
        return gi * gi;
      });
}

}  // namespace tessera::optim
