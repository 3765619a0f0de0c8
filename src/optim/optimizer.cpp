#include <tessera/core/error.hpp>
#include <tessera/optim/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/range.hpp"
#include "kernels/summing_loop.hpp"

namespace tessera::optim {
namespace {
using SumView = Kokkos::View<double, DeviceMemorySpace>;

// The update kernels are free functions: nvcc does not allow a device lambda in a protected
// member function.
void sgd_kernel(const Kokkos::DefaultExecutionSpace& space, std::size_t begin, std::size_t end, const View1D<float>& p,
                const View1D<const float>& g, const View1D<float>& b, float lr, float mu, float wd, bool first,
                const SumView& grad_square, std::size_t threads) {
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
      grad_square, threads);
}

/// One element's AdamW update, the same arithmetic on every path; returns g * g.
struct AdamWRule {
  float b1, b2, eps, decay, step_size, inv_sqrt_c2;
  KOKKOS_INLINE_FUNCTION float operator()(float& p, float& m, float& v, float g) const {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    p = p * decay - step_size * m / (sqrtf(v) * inv_sqrt_c2 + eps);
    return g * g;
  }
};

#ifdef KOKKOS_ENABLE_CUDA
bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

/// On a GPU: each work item updates four consecutive elements, reading and writing each
/// array as one 16-byte float4 (the update is memory-bound: 28 bytes per parameter).
/// Elements before the first 16-byte boundary and after the last whole quad are updated one
/// per item. Needs the four arrays 16-byte aligned. With `threads` > 0 and fewer than the
/// items, that many threads each take every threads-th item.
void adamw_quads(const Kokkos::DefaultExecutionSpace& space, std::size_t begin, std::size_t end, float* p,
                 const float* g, float* m, float* v, AdamWRule rule, const SumView& grad_square, std::size_t threads) {
  const std::size_t a = std::min(end, (begin + 3) / 4 * 4);  // the first quad's first element
  const std::size_t quads = (end - a) / 4;
  const std::size_t b = a + 4 * quads;  // the first element after the quads
  const std::size_t head = a - begin, tail = end - b;
  const std::size_t items = head + quads + tail;
  const std::size_t stride = threads > 0 && threads < items ? threads : items;
  Kokkos::parallel_reduce(
      "tessera::adamw", Range(space, 0, stride),
      KOKKOS_LAMBDA(std::size_t first, double& acc) {
        for (std::size_t w = first; w < items; w += stride) {
          if (w >= head && w < head + quads) {
            const std::size_t i = a + 4 * (w - head);
            float4 pq = *reinterpret_cast<const float4*>(p + i);
            float4 mq = *reinterpret_cast<const float4*>(m + i);
            float4 vq = *reinterpret_cast<const float4*>(v + i);
            const float4 gq = *reinterpret_cast<const float4*>(g + i);
            acc += static_cast<double>(rule(pq.x, mq.x, vq.x, gq.x));
            acc += static_cast<double>(rule(pq.y, mq.y, vq.y, gq.y));
            acc += static_cast<double>(rule(pq.z, mq.z, vq.z, gq.z));
            acc += static_cast<double>(rule(pq.w, mq.w, vq.w, gq.w));
            *reinterpret_cast<float4*>(p + i) = pq;
            *reinterpret_cast<float4*>(m + i) = mq;
            *reinterpret_cast<float4*>(v + i) = vq;
          } else {
            const std::size_t i = w < head ? begin + w : b + (w - head - quads);
            acc += static_cast<double>(rule(p[i], m[i], v[i], g[i]));
          }
        }
      },
      grad_square);
}
#endif

void adamw_kernel(const Kokkos::DefaultExecutionSpace& space, std::size_t begin, std::size_t end,
                  const View1D<float>& p, const View1D<const float>& g, const View1D<float>& m, const View1D<float>& v,
                  const AdamWRule& rule, const SumView& grad_square, std::size_t threads) {
#ifdef KOKKOS_ENABLE_CUDA
  if (aligned16(p.data()) && aligned16(g.data()) && aligned16(m.data()) && aligned16(v.data())) {
    adamw_quads(space, begin, end, p.data(), g.data(), m.data(), v.data(), rule, grad_square, threads);
    return;
  }
#endif
  kernels::for_each_summing(
      "tessera::adamw", space, begin, end, KOKKOS_LAMBDA(std::size_t i) { return rule(p(i), m(i), v(i), g(i)); },
      grad_square, threads);
}

/// Throws ConfigError "<who>: <field> is <value>; it must be <wanted>" unless `ok`.
void require_setting(bool ok, const char* who, const char* field, float value, const char* wanted) {
  if (ok) return;
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
  throw ConfigError(std::string(who) + ": " + field + " is " + text + "; it must be " + wanted);
}
/// A finite number >= 0 (NaN fails every comparison, so `x < 0` let it through).
bool finite_non_negative(float x) { return std::isfinite(x) && x >= 0; }

void require_same_length(const View1D<float>& p, const View1D<float>& g, const char* who) {
  if (p.size() != g.size())
    throw Error(std::string(who) + ": " + std::to_string(p.size()) + " parameters but " + std::to_string(g.size()) +
                " gradients");
}
}  // namespace

void Optimizer::begin_step() {
  updates_ = 0;
  begun_ = true;
  start_step();
}

void Optimizer::update(std::size_t offset, std::size_t count) {
  if (!begun_)
    throw Error(std::string(name()) +
                "::update: no step has begun; call begin_step() once per step before its "
                "update()s, or step() for all the parameters at once");
  if (offset > size() || count > size() - offset)  // offset + count could wrap around
    throw Error(std::string(name()) + "::update: " + std::to_string(count) + " elements from element " +
                std::to_string(offset) + ", outside its " + std::to_string(size()));
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
  require_setting(finite_non_negative(options.lr), "SGD", "lr", options.lr, "a finite number >= 0");
  require_setting(finite_non_negative(options.momentum), "SGD", "momentum", options.momentum,
                  "a finite number >= 0 (0.9 is usual, 0 is none)");
  require_setting(finite_non_negative(options.weight_decay), "SGD", "weight_decay", options.weight_decay,
                  "a finite number >= 0");
  if (options.momentum > 0) momentum_ = View1D<float>("tessera::sgd::momentum", params.size());
}

void SGD::set_lr(float lr) {
  require_setting(finite_non_negative(lr), "SGD::set_lr", "lr", lr, "a finite number >= 0");
  options_.lr = lr;
}

void SGD::start_step() { ++t_; }

void SGD::apply(std::size_t offset, std::size_t count, const SumView& grad_square) {
  sgd_kernel(space_, offset, offset + count, params_, grads_, momentum_, options_.lr, options_.momentum,
             options_.weight_decay, t_ == 1, grad_square, threads_);
}

AdamW::AdamW(View1D<float> params, View1D<float> grads, AdamWOptions options)
    : params_(params), grads_(grads), options_(options) {
  require_same_length(params, grads, "AdamW");
  require_setting(finite_non_negative(options.lr), "AdamW", "lr", options.lr, "a finite number >= 0");
  require_setting(options.beta1 >= 0 && options.beta1 < 1, "AdamW", "beta1", options.beta1, "in [0, 1) (0.9 is usual)");
  require_setting(options.beta2 >= 0 && options.beta2 < 1, "AdamW", "beta2", options.beta2,
                  "in [0, 1) (0.999 is usual)");
  require_setting(std::isfinite(options.eps) && options.eps > 0, "AdamW", "eps", options.eps,
                  "a finite number > 0 (1e-8 is usual)");
  require_setting(finite_non_negative(options.weight_decay), "AdamW", "weight_decay", options.weight_decay,
                  "a finite number >= 0");
  m_ = View1D<float>("tessera::adamw::m", params.size());
  v_ = View1D<float>("tessera::adamw::v", params.size());
}

void AdamW::set_lr(float lr) {
  require_setting(finite_non_negative(lr), "AdamW::set_lr", "lr", lr, "a finite number >= 0");
  options_.lr = lr;
}

void AdamW::start_step() {
  ++t_;
  const double c1 = 1.0 - std::pow(static_cast<double>(options_.beta1), static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(static_cast<double>(options_.beta2), static_cast<double>(t_));
  step_size_ = static_cast<float>(options_.lr / c1);
  inv_sqrt_c2_ = static_cast<float>(1.0 / std::sqrt(c2));
}

void AdamW::apply(std::size_t offset, std::size_t count, const SumView& grad_square) {
  const AdamWRule rule{options_.beta1, options_.beta2, options_.eps, 1.0f - options_.lr * options_.weight_decay,
                       step_size_,     inv_sqrt_c2_};
  adamw_kernel(space_, offset, offset + count, params_, grads_, m_, v_, rule, grad_square, threads_);
}

}  // namespace tessera::optim
