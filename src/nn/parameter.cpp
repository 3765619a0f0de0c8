#include <tessera/core/error.hpp>
#include <tessera/core/rng.hpp>
#include <tessera/nn/module.hpp>
#include <tessera/nn/parameter.hpp>

#include <algorithm>

#include "core/range.hpp"

namespace tessera::nn {

std::vector<std::int64_t> Parameter::held_shape() const {
  std::vector<std::int64_t> held = shape;
  if (shard.parts > 1) held[static_cast<std::size_t>(shard.axis)] /= shard.parts;
  return held;
}

View2D<float> Parameter::value2d() const {
  if (shape.size() != 2) throw Error("parameter '" + name + "' is not a matrix");
  const auto held = held_shape();
  return View2D<float>(value.data(), static_cast<std::size_t>(held[0]), static_cast<std::size_t>(held[1]));
}

View2D<float> Parameter::grad2d() const {
  if (shape.size() != 2) throw Error("parameter '" + name + "' is not a matrix");
  const auto held = held_shape();
  return View2D<float>(grad.data(), static_cast<std::size_t>(held[0]), static_cast<std::size_t>(held[1]));
}

Parameter& ParameterStore::add(const std::string& name, std::vector<std::int64_t> shape, Init init, ShardSpec shard) {
  if (allocated_) throw Error("ParameterStore::add('" + name + "') after allocate(); register every parameter first");
  // After shard(): the new parameter would lie outside the owned range that was cut, and
  // initialize() wrote past the buffer.
  if (sharded_)
    throw Error("ParameterStore::add('" + name +
                "') after shard(); register every parameter before the strategy "
                "(ZeRO) shards the store");
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 0)
      throw ConfigError("parameter '" + name + "': dimension " + std::to_string(d) + " is " + std::to_string(shape[d]) +
                        "; a shape's dimensions are 0 or more");
  for (const auto& p : params_)
    if (p.name == name) throw ConfigError("parameter name '" + name + "' is used twice");
  Parameter p;
  p.name = name;
  p.shape = std::move(shape);
  if (shard.parts < 1 || shard.index < 0 || shard.index >= shard.parts)
    throw Error("parameter '" + name + "': block " + std::to_string(shard.index) + " of " +
                std::to_string(shard.parts) + " does not exist");
  if (shard.parts > 1) {
    if (shard.axis < 0 || static_cast<std::size_t>(shard.axis) >= p.shape.size())
      throw Error("parameter '" + name + "' has no axis " + std::to_string(shard.axis) + " to cut into blocks");
    const std::int64_t extent = p.shape[static_cast<std::size_t>(shard.axis)];
    if (extent % shard.parts != 0)
      throw ConfigError("parameter '" + name + "': its " + std::to_string(extent) +
                        (shard.axis == 0 ? " rows" : " columns") + " do not split into " + std::to_string(shard.parts) +
                        " equal blocks");
  }
  p.shard = shard;
  p.init = init;
  p.numel = 1;
  for (auto d : p.held_shape()) p.numel *= static_cast<std::size_t>(d);
  p.offset = numel_;
  numel_ += p.numel;
  params_.push_back(std::move(p));
  return params_.back();
}

void ParameterStore::shard(std::size_t begin, std::size_t end, Residency values, Residency grads) {
  if (allocated_) throw Error("ParameterStore::shard after allocate(); shard the store before allocating it");
  if (begin > end || end > numel_)
    throw Error("ParameterStore::shard: [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") is not a range of the " + std::to_string(numel_) + " elements");
  sharded_ = true;
  owned_begin_ = begin;
  owned_end_ = end;
  value_residency_ = values;
  grad_residency_ = grads;
  for (auto& p : params_) {
    const std::size_t b = std::clamp(begin, p.offset, p.offset + p.numel);
    const std::size_t e = std::clamp(end, p.offset, p.offset + p.numel);
    p.shard.kind = ShardSpec::Kind::FlatRange;  // within the held block, which stays as it is
    p.shard.begin = b - p.offset;
    p.shard.end = e - p.offset;
  }
}

void ParameterStore::allocate() {
  if (!sharded_) owned_end_ = numel_;
  const std::size_t owned = owned_end_ - owned_begin_;
  const auto size = [&](Residency r) { return r == Residency::Full ? numel_ : owned; };
  values_ = View1D<float>("tessera::parameters", size(value_residency_));
  grads_ = View1D<float>("tessera::gradients", size(grad_residency_));
  for (auto& p : params_) {
    p.value = value_residency_ == Residency::Full ? View1D<float>(values_.data() + p.offset, p.numel) : View1D<float>();
    p.grad = grad_residency_ == Residency::Full ? View1D<float>(grads_.data() + p.offset, p.numel) : View1D<float>();
  }
  allocated_ = true;
}

View1D<float> ParameterStore::owned_values() const {
  if (value_residency_ == Residency::Owned) return values_;
  return View1D<float>(values_.data() + owned_begin_, owned_end_ - owned_begin_);
}

View1D<float> ParameterStore::owned_grads() const {
  if (grad_residency_ == Residency::Owned) return grads_;
  return View1D<float>(grads_.data() + owned_begin_, owned_end_ - owned_begin_);
}

void ParameterStore::initialize(std::uint64_t seed) {
  if (!allocated_) allocate();
  for (auto& p : params_) {
    // The elements this rank keeps: the whole tensor, or the owned part of it (the tensor's
    // flat indices [first, first + count)).
    const bool full = value_residency_ == Residency::Full;
    const std::size_t first = full ? 0 : p.shard.begin;
    const std::size_t count = full ? p.numel : p.shard.owned(p.numel);
    if (count == 0) continue;
    const View1D<float> v(values_.data() + (full ? p.offset : p.offset + first - owned_begin_), count);
    if (p.init.kind == Init::Kind::Zeros) {
      Kokkos::deep_copy(v, 0.0f);
      continue;
    }
    const std::uint64_t key = stream_key(seed, p.name);
    const float bound = p.init.bound;
    // Each value is a function of its flat index in the global tensor alone, so every layout
    // draws the same. Element h of a block cut along axis a (P of the axis' A entries, `inner`
    // elements per entry) sits at (h / (P inner)) A inner + index P inner + h % (P inner).
    std::size_t inner = 1, block = p.numel, whole = p.numel, start = 0;
    if (p.shard.parts > 1) {
      for (std::size_t d = static_cast<std::size_t>(p.shard.axis) + 1; d < p.shape.size(); ++d)
        inner *= static_cast<std::size_t>(p.shape[d]);
      const auto extent = static_cast<std::size_t>(p.shape[static_cast<std::size_t>(p.shard.axis)]);
      block = extent / static_cast<std::size_t>(p.shard.parts) * inner;
      whole = extent * inner;
      start = static_cast<std::size_t>(p.shard.index) * block;
    }
    Kokkos::parallel_for(
        "tessera::init", Range(0, count), KOKKOS_LAMBDA(std::size_t i) {
          const std::size_t h = first + i;
          const std::size_t global = h / block * whole + start + h % block;
          v(i) = bound * (2.0f * uniform01(key, global) - 1.0f);
        });
  }
  zero_grad();
}

void ParameterStore::zero_grad() {
  for (auto& p : params_) p.grad_pending_zero = true;
}

void ParameterStore::settle_grads() {
  for (auto& p : params_) {
    if (!p.grad_pending_zero) continue;
    // In order on the default execution space (not a wait for the whole device, reductions
    // in flight included): what reads these gradients next is queued after it there.
    Kokkos::deep_copy(Kokkos::DefaultExecutionSpace(), p.grad, 0.0f);
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
