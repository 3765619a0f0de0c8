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

/// Which part of a parameter's global tensor this rank holds and owns, in two steps.
///
/// The *block*: with tensor parallelism a rank's replica of the model holds one of `parts`
/// equal blocks of the tensor along `axis` (block `index`); otherwise the whole tensor
/// (parts 1). The *flat range*: what of that block the rank owns, i.e. updates, keeps
/// optimizer state for and (later) writes to a checkpoint: all of it (Full), or with ZeRO a
/// range of the flattened block (FlatRange, possibly empty). Pipeline stages that do not
/// hold a layer will follow.
struct ShardSpec {
  enum class Kind { Full, FlatRange };
  Kind kind = Kind::Full;
  std::size_t begin = 0;  ///< FlatRange: first owned element of the flattened block
  std::size_t end = 0;    ///< FlatRange: one past the last (begin == end: nothing owned)
  int axis = 0;           ///< the block's axis (when parts > 1)
  int index = 0;          ///< which block this replica holds
  int parts = 1;          ///< blocks the tensor is cut into (1: the whole tensor)
  static ShardSpec full() { return {}; }
  static ShardSpec flat_range(std::size_t begin, std::size_t end) { return {Kind::FlatRange, begin, end}; }
  /// Block `index` of `parts` equal blocks along `axis` (tensor parallelism).
  static ShardSpec block(int axis, int index, int parts) {
    ShardSpec s;
    s.axis = axis;
    s.index = index;
    s.parts = parts;
    return s;
  }
  /// Owned elements of a held block of `numel` elements.
  std::size_t owned(std::size_t numel) const noexcept { return kind == Kind::Full ? numel : end - begin; }
};

/// Which elements of a flat buffer a rank keeps in memory between steps: all of them, or
/// only its owned range (ZeRO stages 2 and 3 keep only the owned gradients, and backward
/// writes into memory the strategy lends it, see Module's acquire hook; stage 3 also keeps
/// only the owned values).
enum class Residency { Full, Owned };

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
  /// The block this replica holds (the whole tensor unless tensor-parallel) is the range
  /// [offset, offset + numel) of the replica's flat parameter and gradient buffers.
  std::size_t offset = 0;
  std::size_t numel = 0;  ///< elements of the held block
  /// The held block, while it is in memory: always when the store keeps full values; with
  /// values sharded (ZeRO stage 3) only between a strategy's acquire and release of it.
  View1D<float> value;
  /// Where backward writes the held block's gradient; with gradients not kept in full
  /// (ZeRO stages 2 and 3) only memory a strategy lends it during backward.
  View1D<float> grad;
  /// Set by ParameterStore::zero_grad(): the gradient is zero but its memory was not written.
  bool grad_pending_zero = false;
  /// Whether backward reads the value: false in the first layer of a model, which forms no
  /// input gradient (its backward only writes gradients); ZeRO stage 3 then gathers it for
  /// forward alone.
  bool backward_reads_value = true;
  /// The factor for the old gradient when a module adds into it: 0 after zero_grad() (the
  /// next gradient is written, not added, and a GEMM with beta 0 reads no old value), else 1.
  /// Clears the mark; every module that writes a gradient uses it.
  float take_grad_beta() noexcept {
    const float beta = grad_pending_zero ? 0.0f : 1.0f;
    grad_pending_zero = false;
    return beta;
  }
  /// The held block's shape: the global shape with the block's axis divided by its parts.
  std::vector<std::int64_t> held_shape() const;
  /// The held block as a row-major matrix (2-D parameters).
  View2D<float> value2d() const;
  View2D<float> grad2d() const;
};

/// Owns every parameter of a model in one flat value buffer and one flat gradient buffer,
/// in registration order, so gradient buckets and optimizer shards are ranges of them.
///
/// By default a rank owns and keeps everything. shard() gives it one contiguous range of the
/// flat buffer to own and says which buffers it keeps in full: every parameter's ShardSpec
/// becomes the part of that range it covers, and values()/grads() keep only what is resident.
class ParameterStore {
 public:
  /// Registers a parameter of global shape `shape`, of which this replica holds the block
  /// `shard` names (ConfigError when the axis does not split into its parts); only before
  /// allocate(). The returned reference stays valid.
  Parameter& add(const std::string& name, std::vector<std::int64_t> shape, Init init,
                 ShardSpec shard = ShardSpec::full());
  /// Makes this rank the owner of the flat range [begin, end), keeping values and gradients
  /// as `values` and `grads` say (Full: the whole flat buffer; Owned: the owned range). Only
  /// before allocate().
  void shard(std::size_t begin, std::size_t end, Residency values, Residency grads);
  /// Creates the resident buffers and points the views of every parameter kept in full into them.
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
  /// Elements of the whole model (every parameter's numel).
  std::size_t numel() const noexcept { return numel_; }
  /// The resident value buffer: the whole flat buffer (Residency::Full) or the owned range.
  View1D<float> values() const { return values_; }
  /// The resident gradient buffer: the whole flat buffer or the owned range.
  View1D<float> grads() const { return grads_; }
  Residency value_residency() const noexcept { return value_residency_; }
  Residency grad_residency() const noexcept { return grad_residency_; }
  std::size_t owned_begin() const noexcept { return owned_begin_; }
  std::size_t owned_end() const noexcept { return owned_end_; }
  /// The owned range of the values and of the gradients.
  View1D<float> owned_values() const;
  View1D<float> owned_grads() const;
  /// Bytes of the resident buffers, as allocated.
  std::size_t resident_bytes() const noexcept { return (values_.size() + grads_.size()) * sizeof(float); }
  std::deque<Parameter>& parameters() noexcept { return params_; }
  const std::deque<Parameter>& parameters() const noexcept { return params_; }
  Parameter& find(const std::string& name);

 private:
  std::deque<Parameter> params_;
  std::size_t numel_ = 0;
  bool allocated_ = false;
  bool sharded_ = false;
  std::size_t owned_begin_ = 0, owned_end_ = 0;
  Residency value_residency_ = Residency::Full, grad_residency_ = Residency::Full;
  View1D<float> values_, grads_;
};

}  // namespace tessera::nn
