#pragma once
/// \file
/// tessera::train::Trainer: the training loop that ties configuration, communicator,
/// model, data-parallel strategy, optimizer and data together.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tessera/comm/communicator.hpp>
#include <tessera/comm/device_mesh.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/nn/layers.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/parallel/ddp.hpp>
#include <tessera/parallel/pipeline.hpp>
#include <tessera/parallel/zero.hpp>

namespace tessera::kernels {
class SideQueue;
}

namespace tessera::train {

/// Everything a run needs; apps fill it from flags and config files.
struct TrainConfig {
  std::size_t layers = 8;
  std::size_t dim = 1024;
  std::int64_t steps = 100;
  std::int64_t global_batch = 128;  ///< samples per optimizer step, over all ranks and micro-steps
  std::int64_t accum = 1;           ///< micro-steps per optimizer step
  std::uint64_t seed = 0;
  std::string optimizer = "adamw";  ///< adamw or sgd
  std::optional<float> lr;          ///< default: 1e-3 (adamw), 0.01 (sgd)
  float momentum = 0.0f;            ///< sgd only
  float weight_decay = -1;          ///< < 0: the optimizer's default (adamw 0.01, sgd 0)
  std::string data = "synthetic";   ///< "synthetic" or a path to an HDF5 file
  std::int64_t synthetic_samples = 4096;
  std::size_t teacher_layers = 0;  ///< synthetic task's teacher depth; 0: as deep as the model
  parallel::DDPOptions ddp;
  /// 0: DDP (every rank keeps the whole model); 1, 2, 3: ZeRO stage (see parallel::ZeroOptions;
  /// its grad_dtype follows ddp.grad_dtype).
  int zero_stage = 0;
  parallel::ZeroOptions zero;
  /// Tensor-parallel group size: the ranks form a dp x tp mesh (dp = ranks / tp), and the
  /// MLP's layers are split over each tp group (nn::MLP). Strategies run on the dp axis.
  int tp = 1;
  /// Pipeline stages: the layers are cut into pp contiguous stages over the pp axis of a
  /// dp x tp x pp mesh, and each micro-step's batch runs as `microbatches` micro-batches
  /// under `schedule` ("1f1b" or "gpipe").
  int pp = 1;
  int microbatches = 1;
  std::string schedule = "1f1b";
  /// Memory a rank may use, in bytes (0: what the node or GPU has, see memory_budget()). A
  /// run whose estimate exceeds it is refused before anything is allocated.
  double max_rank_bytes = 0;
  /// Update each gradient bucket's parameters as soon as its reduction completes, overlapping
  /// the optimizer with the remaining communication (off: one update after all of it). One
  /// data-parallel rank has no reductions to overlap: DDP updates each bucket as backward
  /// completes it, on a CPU and on one GPU alone (beside the rest of backward, on a share of
  /// the GPU); ZeRO, a pipeline stage, and tensor-parallel ranks on GPUs update after backward.
  bool overlap_optimizer = true;

  /// Throws ConfigError for values no run can use (before any communication); given the
  /// job's `ranks`, also for a tp x pp layout that does not divide them.
  void validate(int ranks = 0) const;

  /// Parameters a rank of pipeline stage `stage` holds (the whole model, or its stage's
  /// layers, or their tensor-parallel blocks).
  double held_parameters(int stage = 0) const;
  /// Bytes a run of this configuration takes on each of `ranks` ranks, by part.
  struct MemoryEstimate {
    double model = 0;        ///< parameters, gradients and optimizer state kept between steps
    double working = 0;      ///< the strategy's transient buffers (buckets, gathered layers)
    double activations = 0;  ///< what forward keeps for backward, and the batch
    double data = 0;         ///< the synthetic task's samples and its teacher (0 for HDF5, read per batch)
    int stage = 0;           ///< the pipeline stage it is for
    double total() const { return model + working + activations + data; }
  };
  /// The estimate for a rank of pipeline stage `stage`.
  MemoryEstimate estimate_memory(int ranks, int stage) const;
  /// The estimate for the rank that needs the most (pipeline stages differ).
  MemoryEstimate estimate_memory(int ranks) const;
};

/// One optimizer step's figures (loss averaged over every rank and micro-step).
struct StepMetrics {
  std::int64_t step = 0;  ///< 1-based
  double loss = 0;
  double grad_norm = 0;  ///< L2 norm of the averaged gradients the optimizer applied
  double step_time_s = 0;
  double samples_per_s = 0;
  double forward_s = 0;
  double backward_s = 0;      ///< including the overlapped communication
  double comm_exposed_s = 0;  ///< time the step waited on gradient communication
  double optimizer_s = 0;
  double data_s = 0;  ///< loading the batch (every micro-step's)
  /// Pipeline parallelism: time this stage spent inside the pipeline not computing (waiting
  /// for its neighbours, the bubble); 0 without --parallel.pp.
  double pipeline_idle_s = 0;
  /// Bytes this rank keeps between steps for parameters, gradients and optimizer state, as
  /// allocated.
  std::size_t model_state_bytes = 0;
  /// High-water mark of the strategy's transient buffers (buckets, gathered layers).
  std::size_t working_bytes = 0;
  /// Bytes this rank sent for the step's gradients and parameters (over the data-parallel
  /// ranks), as the communicator models them (Communicator::bytes_sent).
  double comm_bytes = 0;
  /// Bytes this rank sent within its tensor-parallel group (activations and their gradients).
  double tp_comm_bytes = 0;
  /// Bytes this rank sent to its pipeline neighbours (activations forward, gradients back).
  double pp_comm_bytes = 0;
  /// Pipeline parallelism: the share of the pipeline's span this stage waited for a
  /// neighbour (the "bubble"), and the micro-batches it held in flight at most.
  double bubble_fraction = 0;
  std::size_t microbatches_in_flight = 0;
};

class Trainer {
 public:
  /// Builds the model and data on every rank of `comm` (collective; checks that replicas
  /// start identical).
  Trainer(TrainConfig config, comm::Communicator& comm);
  ~Trainer();
  /// One optimizer step. Throws NonFiniteError, on every rank alike, when the loss or the
  /// gradient norm is NaN or infinite (the parameters are then no longer usable). A step that
  /// threw leaves the parameters, gradients and optimizer state partway through it, so every
  /// later step() throws an Error that names the failed step: build a new Trainer instead.
  StepMetrics step();
  /// config.steps steps; calls on_step after each.
  void run(const std::function<void(const StepMetrics&)>& on_step = {});

  nn::ParameterStore& parameters() noexcept { return store_; }
  const data::Dataset& dataset() const noexcept { return *dataset_; }
  /// The ranks the data-parallel strategy runs over (all of them without tensor parallelism).
  comm::Communicator& data_parallel() noexcept { return *dp_; }
  /// "dp 2 x tp 2: tensor-parallel groups {0,1} {2,3}; data-parallel groups {0,2} {1,3}".
  std::string layout() const;
  /// The data-parallel strategy: DDP or ZeRO.
  parallel::DataParallelStrategy& strategy() noexcept { return *strategy_; }
  /// The DDP strategy; throws when a ZeRO stage runs.
  parallel::DistributedDataParallel& ddp();
  /// The ZeRO strategy; throws when DDP runs.
  parallel::ZeroDataParallel& zero();
  const TrainConfig& config() const noexcept { return config_; }
  /// Whether each bucket is updated as soon as it is ready (TrainConfig::overlap_optimizer,
  /// where this run does so): with several data-parallel ranks as its reduction completes,
  /// with one as backward completes it.
  bool overlaps_updates() const noexcept { return overlap_updates_; }
  /// Steps completed; a step that threw does not count.
  std::int64_t steps_done() const noexcept { return steps_done_; }

 private:
  StepMetrics step_once();
  TrainConfig config_;
  comm::Communicator& comm_;
  std::unique_ptr<comm::DeviceMesh> mesh_;  // with tensor or pipeline parallelism
  comm::Communicator* dp_ = nullptr;
  double replicated_grad_square() const;  // over parameters every tp rank holds whole
  nn::ParameterStore store_;
  std::unique_ptr<nn::MLP> model_;
  std::unique_ptr<data::Dataset> dataset_;
  std::unique_ptr<data::DistributedSampler> sampler_;
  std::unique_ptr<parallel::DataParallelStrategy> strategy_;
  std::vector<std::unique_ptr<nn::MLP>> replicas_;  // pipeline: one more per micro-batch in flight
  std::unique_ptr<parallel::Pipeline> pipeline_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<kernels::SideQueue> side_;  // where the optimizer's kernels run
  bool overlap_updates_ = true;               // each bucket's update as it is ready (TrainConfig::overlap_optimizer)
  std::size_t side_threads_ = 0;              // GPU threads of an update queued beside backward (0: no limit)
  bool in_backward_ = false;                  // the step's last backward is being queued (BackwardMark)
  std::size_t handed_ = 0;                    // elements handed to the optimizer so far this step
  View2D<float> inputs_, targets_, dy_;
  View1D<std::int64_t> labels_;
  std::vector<std::int64_t> micro_indices_;
  std::int64_t steps_done_ = 0;
  double last_finite_loss_ = 0;
  bool failed_ = false;     // a step threw: every later step() refuses
  std::string why_failed_;  // what it threw, as every later step() names it
};

}  // namespace tessera::train
