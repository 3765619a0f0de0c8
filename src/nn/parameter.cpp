#include <tessera/core/error.hpp>
#include <tessera/core/rng.hpp>
#include <tessera/nn/module.hpp>
#include <tessera/nn/parameter.hpp>

namespace tessera::nn {

View2D<float> Parameter::value2d() const {
  if (shape.size() != 2) throw Error("parameter '" + name + "' is not a matrix");
  return View2D<float>(value.data(), static_cast<std::size_t>(shape[0]), static_cast<std::size_t>(shape[1]));
}

View2D<float> Parameter::grad2d() const {
  if (shape.size() != 2) throw Error("parameter '" + name + "' is not a matrix");
  return View2D<float>(grad.data(), static_cast<std::size_t>(shape[0]), static_cast<std::size_t>(shape[1]));
}

Parameter& ParameterStore::add(const std::string& name, std::vector<std::int64_t> shape, Init init, ShardSpec shard) {
  if (allocated_) throw Error("ParameterStore::add('" + name + "') after allocate(); register every parameter first");
  for (const auto& p : params_)
    if (p.name == name) throw ConfigError("parameter name '" + name + "' is used twice");
  Parameter p;
  p.name = name;
  p.shape = std::move(shape);
  p.shard = shard;
  p.init = init;
  p.numel = 1;
  for (auto d : p.shape) p.numel *= static_cast<std::size_t>(d);
  p.offset = numel_;
  numel_ += p.numel;
  params_.push_back(std::move(p));
  return params_.back();
}

void ParameterStore::allocate() {
  values_ = View1D<float>("tessera::parameters", numel_);
  grads_ = View1D<float>("tessera::gradients", numel_);
  for (auto& p : params_) {
    p.value = View1D<float>(values_.data() + p.offset, p.numel);
    p.grad = View1D<float>(grads_.data() + p.offset, p.numel);
  }
  allocated_ = true;
}

void ParameterStore::initialize(std::uint64_t seed) {
  if (!allocated_) allocate();
  for (auto& p : params_) {
    auto v = p.value;
    if (p.init.kind == Init::Kind::Zeros) {
      Kokkos::deep_copy(v, 0.0f);
      continue;
    }
    const std::uint64_t key = stream_key(seed, p.name);
    const float bound = p.init.bound;
    // A full shard's local index is its global index; sharded layouts add their offset here.
    Kokkos::parallel_for(
        "tessera::init", Kokkos::RangePolicy<>(0, p.numel),
        KOKKOS_LAMBDA(std::size_t i) { v(i) = bound * (2.0f * uniform01(key, i) - 1.0f); });
  }
  zero_grad();
}

void ParameterStore::zero_grad() {
  for (auto& p : params_) p.grad_pending_zero = true;
}

void ParameterStore::settle_grads() {
  for (auto& p : params_) {
    if (!p.grad_pending_zero) continue;
    Kokkos::deep_copy(p.grad, 0.0f);
    p.grad_pending_zero = false;
  }
}

Parameter& ParameterStore::find(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return p;
  throw ConfigError("no parameter named '" + name + "'");
}

void ensure_shape(View2D<float>& buffer, std::size_t rows, std::size_t cols, const char* label) {
  if (buffer.extent(0) == rows && buffer.extent(1) == cols && buffer.data() != nullptr) return;
  buffer = View2D<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), rows, cols);
}

}  // namespace tessera::nn
