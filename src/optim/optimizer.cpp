#include <tessera/core/error.hpp>
#include <tessera/optim/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/summing_loop.hpp"

namespace tessera::optim {
namespace {
using SumView = Kokkos::View<double, DeviceMemorySpace>;

// The update kernels are free functions: nvcc does not allow a device lambda in a protected
// member function.
void sgd_kernel(const Kokkos::DefaultExecutionSpace& space, std::size_t begin, std::size_t end, const View1D<float>& p,
                const View1D<const float>& g, const View1D<float>& b, float lr, float mu, float wd, bool first,
                const SumView& grad_square) {
  const bool use_momentum = mu > 0;
  kernels::for_each_summing(
      "tessera::sgd", space, begin, end,
      KOKKOS_LAMBDA(std::size_t i) {
        const float gi = g(i);
        float d = gi + wd * p(i);
        if (use_momentum) {
          d = first ? d : mu * b(i) + d;
          b(i) = d;
        }
        p(i) -= lr * d;
        return gi * gi;
      },
      grad_square);
}

void adamw_kernel(const Kokkos::DefaultExecutionSpace& space, std::size_t begin, std::size_t end,
                  const View1D<float>& p, const View1D<const float>& g, const View1D<float>& m, const View1D<float>& v,
                  float b1, float b2, float eps, float decay, float step_size, float inv_sqrt_c2,
                  const SumView& grad_square) {
  kernels::for_each_summing(
      "tessera::adamw", space, begin, end,
      KOKKOS_LAMBDA(std::size_t i) {
        const float gi = g(i);
        const float mi = b1 * m(i) + (1.0f - b1) * gi;
        const float vi = b2 * v(i) + (1.0f - b2) * gi * gi;
        m(i) = mi;
        v(i) = vi;
        p(i) = p(i) * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_c2 + eps);
        return gi * gi;
      },
      grad_square);
}

void require_same_length(const View1D<float>& p, const View1D<float>& g, const char* who) {
  if (p.size() != g.size())
    throw Error(std::string(who) + ": " + std::to_string(p.size()) + " parameters but " + std::to_string(g.size()) +
                " gradients");
}
}  // namespace

void Optimizer::begin_step() {
  updates_ = 0;
  start_step();
}

void Optimizer::update(std::size_t offset, std::size_t count) {
  if (offset + count > size())
    throw Error(std::string(name()) + "::update: elements [" + std::to_string(offset) + ", " +
                std::to_string(offset + count) + ") outside its " + std::to_string(size()));
  if (updates_ == partials_.extent(0)) {
    // More ranges than ever before in a step (the first steps only): keep the sums so far.
    space_.fence();
    Kokkos::View<double*, DeviceMemorySpace> grown("tessera::optim::grad_square",
                                                   std::max<std::size_t>(64, 2 * updates_));
    if (updates_ > 0) Kokkos::deep_copy(Kokkos::subview(grown, std::make_pair(std::size_t(0), updates_)), partials_);
    partials_ = grown;
  }
  apply(offset, count, Kokkos::subview(partials_, updates_++));
}

double Optimizer::grad_square_sum() {
  space_.fence();
  if (updates_ == 0) return 0.0;
  const auto sums = Kokkos::create_mirror_view_and_copy(
      Kokkos::HostSpace(), Kokkos::subview(partials_, std::make_pair(std::size_t(0), updates_)));
  double total = 0;
  for (std::size_t k = 0; k < updates_; ++k) total += sums(k);
  return total;
}

SGD::SGD(View1D<float> params, View1D<float> grads, SGDOptions options)
    : params_(params), grads_(grads), options_(options) {
  require_same_length(params, grads, "SGD");
  if (options.lr < 0 || options.momentum < 0 || options.weight_decay < 0)
    throw ConfigError("SGD: lr, momentum and weight_decay must be >= 0");
  if (options.momentum > 0) momentum_ = View1D<float>("tessera::sgd::momentum", params.size());
}

void SGD::start_step() { ++t_; }

void SGD::apply(std::size_t offset, std::size_t count, const SumView& grad_square) {
  sgd_kernel(space_, offset, offset + count, params_, grads_, momentum_, options_.lr, options_.momentum,
             options_.weight_decay, t_ == 1, grad_square);
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

void AdamW::start_step() {
  ++t_;
  const double c1 = 1.0 - std::pow(static_cast<double>(options_.beta1), static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(static_cast<double>(options_.beta2), static_cast<double>(t_));
  step_size_ = static_cast<float>(options_.lr / c1);
  inv_sqrt_c2_ = static_cast<float>(1.0 / std::sqrt(c2));
}

void AdamW::apply(std::size_t offset, std::size_t count, const SumView& grad_square) {
  adamw_kernel(space_, offset, offset + count, params_, grads_, m_, v_, options_.beta1, options_.beta2, options_.eps,
               1.0f - options_.lr * options_.weight_decay, step_size_, inv_sqrt_c2_, grad_square);
}

}  // namespace tessera::optim
