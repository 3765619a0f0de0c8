#pragma once
/// \file
/// ZeRO (Rajbhandari et al., 2020) on the data-parallel ranks: the model's flat buffer is cut
/// into one contiguous shard per rank, and each rank keeps optimizer state (stage 1), and
/// gradients (stage 2), and parameters (stage 3) only for its shard.

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <tessera/comm/communicator.hpp>
#include <tessera/nn/module.hpp>
#include <tessera/nn/parameter.hpp>
#include <tessera/parallel/strategy.hpp>

namespace tessera::parallel {

/// [0, total) cut into `ranks` contiguous shards whose sizes differ by at most one alignment
/// unit: the units are dealt out evenly, the last ranks taking one more where they do not
/// divide, and the last shard ends at `total`. A shard may be empty (fewer units than ranks).
struct FlatPartition {
  FlatPartition() = default;
  FlatPartition(std::size_t total, int ranks, std::size_t align);
  std::size_t begin(int r) const { return bounds[static_cast<std::size_t>(r)]; }
  std::size_t end(int r) const { return bounds[static_cast<std::size_t>(r) + 1]; }
  std::size_t size(int r) const { return end(r) - begin(r); }
  int ranks() const noexcept { return static_cast<int>(bounds.size()) - 1; }
  /// Every shard has the same size (so all_gather and reduce_scatter can move them).
  bool equal() const;
  std::vector<std::size_t> bounds;  ///< ranks + 1 entries, from 0 to total
};

struct ZeroOptions {
  int stage = 1;  ///< 1: optimizer state sharded; 2: and gradients; 3: and parameters
  /// Stage 3: layers whose gather starts before they are needed (0: gather on demand).
  int prefetch = 1;
  /// Stages 1 and 2: gradients are reduced in buckets of this many MiB (stage 3 reduces a
  /// layer at a time). Smaller than DDP's: stage 2 holds the buckets in flight in memory.
  double bucket_mb = 4.0;
  /// Float32 or BFloat16 on the wire (reduced in float32).
  DType grad_dtype = DType::Float32;
  /// As DDPOptions::loss_gradient_divided: the reduction then only sums.
  bool loss_gradient_divided = false;
  /// The shards' alignment unit, in elements (64 floats: 256 bytes).
  std::size_t align = 64;
};

/// A unit of ZeRO stage 3: the parameters of one module (those whose names share everything
/// before the last dot, e.g. "layers.3."), a contiguous range of the flat buffer. It is
/// gathered whole before the module's forward and backward and reduced whole after backward.
struct ZeroUnit {
  std::string name;  ///< e.g. "layers.3"
  std::size_t offset = 0, numel = 0;
  std::vector<nn::Parameter*> parameters;
};

/// ZeRO stages 1, 2 and 3. The constructor shards the (not yet allocated) store and allocates
/// what this rank keeps; then initialise it (ParameterStore::initialize).
///
/// Gradients: each bucket's range is reduced to the ranks that own parts of it (one `reduce`
/// per owner: contiguous shards do not split a bucket into equal blocks), in launch order, as
/// soon as backward has produced it. Stage 1 keeps the whole gradient buffer and communicates
/// on the last micro-step only, like DDP; stages 2 and 3 keep only the owned gradients, so they
/// reduce every micro-step and add the owned part into the gradient shard. Parameters: stages
/// 1 and 2 all-gather the updated shards after the optimizer (one all_gather when the shards
/// are equal, else one broadcast per owner); stage 3 gathers each unit when a module acquires
/// it and drops it once another unit is acquired: the unit a pass ends with is the one the
/// next pass starts with (forward's last layer is backward's first, backward's last the next
/// micro-step's first), so it is not gathered twice. Values change only in the optimizer, so
/// the kept unit is dropped at finish_gradient_sync() and at new_step(). On one rank nothing
/// is sent and nothing is copied.
class ZeroDataParallel final : public DataParallelStrategy {
 public:
  ZeroDataParallel(nn::Module& model, nn::ParameterStore& store, comm::Communicator& comm, ZeroOptions options);
  ~ZeroDataParallel() override;

  const char* name() const noexcept override;
  View1D<float> update_values() override { return store_.owned_values(); }
  View1D<float> update_grads() override { return store_.owned_grads(); }
  bool sharded_update() const noexcept override { return comm_.size() > 1; }
  void verify_replicas_identical() override;
  /// Starts an optimizer step: required before each step's first backward (without it the
  /// last step's gradients would be added to this one's), and, at stages 1 and 2, only after
  /// the last step's finish_step(); throws otherwise.
  void new_step() override;
  void set_sync(bool sync) noexcept override { sync_ = sync; }
  void begin_step(BucketCallback on_bucket = {}) override;
  void end_backward() override;
  void finish_gradient_sync() override;
  void finish_step() override;
  const SyncStats& last_sync() const noexcept override { return stats_; }
  std::size_t working_bytes() const noexcept override { return working_high_; }

  const FlatPartition& partition() const noexcept { return partition_; }
  /// Gradient buckets (stages 1 and 2) or units (stage 3), from the last parameter down.
  struct Bucket {
    std::size_t offset = 0, numel = 0;
    std::vector<nn::Parameter*> parameters;
  };
  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  const std::vector<ZeroUnit>& units() const noexcept { return units_; }

 private:
  struct Slot;
  struct Gathered;
  void on_acquire(nn::Parameter& p, nn::Pass pass);
  void on_release(nn::Parameter& p, nn::Pass pass);
  void on_grad_ready(nn::Parameter& p);
  Slot& slot_for(std::size_t bucket);
  void launch(std::size_t bucket);
  void harvest(std::size_t bucket);
  void hand_over(std::size_t bucket);
  void free_slot(std::size_t bucket);
  void reset_micro_step();
  void require_new_step(const char* where) const;  // throws where new_step() was left out
  void gather(std::size_t unit);
  void wait_gathered(std::size_t unit, nn::Pass pass);
  void drop(std::size_t unit);
  void drop_kept();
  void prefetch_after(std::size_t unit, nn::Pass pass);
  void wait(std::vector<comm::Work>& works, double* also);
  void track(std::ptrdiff_t bytes);

  nn::ParameterStore& store_;
  comm::Communicator& comm_;
  ZeroOptions options_;
  FlatPartition partition_;
  int rank_ = 0;
  bool alone_ = false;  // one rank: nothing to send, every view points at the store

  std::vector<Bucket> buckets_;
  std::unordered_map<const nn::Parameter*, std::size_t> bucket_of_;
  std::vector<std::size_t> pending_;                   // per bucket: gradients not yet ready this micro-step
  std::vector<int> slot_of_;                           // per bucket: its slot, or -1
  std::size_t largest_bucket_ = 0, largest_unit_ = 0;  // the lent buffers' capacities
  std::vector<std::vector<comm::Work>> work_;
  std::vector<std::uint8_t> launched_, harvested_, handed_, accumulated_;
  std::vector<std::size_t> launch_order_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int> free_slots_;

  std::vector<ZeroUnit> units_;
  std::unordered_map<const nn::Parameter*, std::size_t> unit_of_;
  std::vector<std::unique_ptr<Gathered>> gathered_;          // per unit
  std::vector<std::unique_ptr<View1D<float>>> gather_pool_;  // free gather buffers
  int gathers_live_ = 0;      // units gathered or in flight (the same count on every rank)
  std::ptrdiff_t kept_ = -1;  // the unit the last pass released last, still gathered, or -1

  BucketCallback on_bucket_;
  bool sync_ = true;
  bool last_micro_ = false;
  bool in_finish_ = false;  // waits are timed by finish_gradient_sync or end_backward
  // The order of a step's calls (DataParallelStrategy): finish_gradient_sync() done, and no
  // new_step() since; stages 1 and 2: finish_step() still to share the updated shards.
  bool synced_ = false;
  bool unshared_ = false;
  std::size_t ready_ = 0;
  std::size_t working_now_ = 0, working_high_ = 0;
  SyncStats stats_;
};

/// The whole model's values in host memory, whatever the store keeps (collective when values
/// are sharded): on every rank, or with `root` (a rank of `comm`) on that rank alone, the
/// others then holding nothing more than their shards and returning an empty vector. For
/// tests, and for writing a model file (rank 0's).
std::vector<float> gather_values(const nn::ParameterStore& store, comm::Communicator& comm, int root = -1);

}  // namespace tessera::parallel
