#pragma once
/// \file
/// Parameters: a logical name and global shape, a shard spec saying which part this rank
/// holds, and value/gradient views into one contiguous buffer per store.

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <tessera/core/memory.hpp>

namespace tessera::nn {

/// Which part of a parameter's global tensor this rank holds. Data parallelism holds the
/// whole tensor; later strategies add flat ranges (ZeRO), row/column blocks (tensor
/// parallelism) and nothing (a pipeline stage that does not own the layer).
struct ShardSpec {
  enum class Kind { Full };
  Kind kind = Kind::Full;
  static ShardSpec full() { return {}; }
};

/// How a parameter's initial values are drawn: each value depends only on (seed, name,
/// global element index), so every layout starts from the same numbers.
struct Init {
  enum class Kind { Zeros, Uniform };
  Kind kind = Kind::Zeros;
  float bound = 0;  ///< Uniform draws from [-bound, bound)
  static Init zeros() { return {}; }
  static Init uniform(float bound) { return {Kind::Uniform, bound}; }
};

struct Parameter {
  std::string name;                 ///< logical name, e.g. "layers.3.weight"
  std::vector<std::int64_t> shape;  ///< global shape, e.g. {1024, 1024}
  ShardSpec shard;
  Init init;
  std::size_t offset = 0;  ///< first element in the store's flat buffers
  std::size_t numel = 0;   ///< elements held on this rank
  View1D<float> value;     ///< this rank's elements (valid after ParameterStore::allocate)
  View1D<float> grad;
  /// Set by ParameterStore::zero_grad(): the gradient is zero but its memory was not written.
  bool grad_pending_zero = false;
  /// The factor for the old gradient when a module adds into it: 0 after zero_grad() (the
  /// next gradient is written, not added, and a GEMM with beta 0 reads no old value), else 1.
  /// Clears the mark; every module that writes a gradient uses it.
  float take_grad_beta() noexcept {
    const float beta = grad_pending_zero ? 0.0f : 1.0f;
    grad_pending_zero = false;
    return beta;
  }
  /// The value as a row-major matrix (2-D parameters).
  View2D<float> value2d() const;
  View2D<float> grad2d() const;
};

/// Owns every parameter of a model in one flat value buffer and one flat gradient buffer,
/// in registration order, so gradient buckets and optimizer shards are ranges of them.
class ParameterStore {
 public:
  /// Registers a parameter; only before allocate(). The returned reference stays valid.
  Parameter& add(const std::string& name, std::vector<std::int64_t> shape, Init init,
                 ShardSpec shard = ShardSpec::full());
  /// Creates the buffers and points every parameter's views into them.
  void allocate();
  /// Sets every value from (seed, name, global index) and zeroes the gradients.
  void initialize(std::uint64_t seed);
  /// Makes every gradient zero, lazily (as PyTorch's set_to_none): the backward pass that
  /// next produces a gradient writes it instead of adding to it (Parameter::take_grad_beta),
  /// which saves a pass over the gradient memory. Readers of grads() call settle_grads() first.
  void zero_grad();
  /// Writes zeros into the gradients that no backward pass produced since zero_grad().
  void settle_grads();

  bool allocated() const noexcept { return allocated_; }
  std::size_t numel() const noexcept { return numel_; }
  View1D<float> values() const { return values_; }
  View1D<float> grads() const { return grads_; }
  std::deque<Parameter>& parameters() noexcept { return params_; }
  const std::deque<Parameter>& parameters() const noexcept { return params_; }
  Parameter& find(const std::string& name);

 private:
  std::deque<Parameter> params_;
  std::size_t numel_ = 0;
  bool allocated_ = false;
  View1D<float> values_, grads_;
};

}  // namespace tessera::nn
