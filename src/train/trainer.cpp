#include <tessera/core/error.hpp>
#include <tessera/core/memory.hpp>
#include <tessera/train/trainer.hpp>

#include <algorithm>

#include "kernels/side_queue.hpp"

#include <chrono>
#include <cmath>
#include <sstream>

namespace tessera::train {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

void TrainConfig::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError(what);
  };
  require(layers >= 1, "--model.layers must be >= 1");
  require(dim >= 1, "--model.dim must be >= 1");
  require(steps >= 0, "--train.steps must be >= 0");
  require(global_batch >= 1, "--train.batch must be >= 1");
  require(accum >= 1, "--train.accum must be >= 1");
  require(global_batch % accum == 0, "--train.batch " + std::to_string(global_batch) + " does not split into " +
                                         std::to_string(accum) + " micro-steps (--train.accum); choose a multiple of " +
                                         std::to_string(accum));
  require(optimizer == "adamw" || optimizer == "sgd",
          "--optim.name '" + optimizer + "' is not an optimizer Tessera has; use adamw or sgd");
  require(!lr || *lr > 0, "--optim.lr must be > 0");
  require(momentum >= 0, "--optim.momentum must be >= 0");
  require(synthetic_samples >= 1, "--data.samples must be >= 1");
}

TrainConfig::MemoryEstimate TrainConfig::estimate_memory(int ranks) const {
  const double d = static_cast<double>(dim), L = static_cast<double>(layers), f = sizeof(float);
  MemoryEstimate e;
  const double params = L * (d * d + d);
  const double state = optimizer == "adamw" ? 2 : (momentum > 0 ? 1 : 0);
  e.model = params * f * (2 + state) + (ddp.grad_dtype == DType::BFloat16 ? params * 2 : 0);
  // Per micro-batch row: each Linear keeps its output and input gradient, each GELU three
  // buffers; the batch's inputs, targets and loss gradient.
  const double rows = static_cast<double>(global_batch) / std::max(1, ranks) / static_cast<double>(accum);
  e.activations = rows * d * f * (2 * L + 3 * (L - 1) + 3);
  if (data == "synthetic") {
    const double teacher = static_cast<double>(teacher_layers ? teacher_layers : layers);
    e.data = static_cast<double>(synthetic_samples) * d * f * 2 + teacher * (d * d + d) * f * 2 +
             256 * d * f * 5 * teacher;  // its samples, its parameters, its forward over 256 rows
  }
  return e;
}

Trainer::Trainer(TrainConfig config, comm::Communicator& comm) : config_(std::move(config)), comm_(comm) {
  config_.validate();
  const std::int64_t ranks = comm.size();
  if (config_.global_batch % (ranks * config_.accum) != 0)
    throw ConfigError("--train.batch " + std::to_string(config_.global_batch) + " does not divide across " +
                      std::to_string(ranks) + " ranks x " + std::to_string(config_.accum) +
                      " micro-steps; choose a multiple of " + std::to_string(ranks * config_.accum));
  // Refuse, before allocating anything, a run that cannot fit (rather than meet the kernel's
  // out-of-memory killer, which ends a process with no message).
  const auto need = config_.estimate_memory(comm.size());
  const auto have = memory_budget();
  if (have.bytes > 0 && need.total() > have.bytes) {
    const auto gb = [](double b) {
      std::ostringstream s;
      s.precision(b >= 1e10 ? 0 : 1);
      s << std::fixed << b / 1e9 << " GB";
      return s.str();
    };
    throw ConfigError("this run needs about " + gb(need.total()) + " per rank (parameters, gradients and " +
                      config_.optimizer + " state of " + std::to_string(config_.layers) + " layers of " +
                      std::to_string(config_.dim) + " x " + std::to_string(config_.dim) + ": " + gb(need.model) +
                      "; activations: " + gb(need.activations) +
                      (need.data > 0 ? "; synthetic data and its teacher: " + gb(need.data) : std::string()) +
                      "), and a rank has about " + gb(have.bytes) + " (" + have.source +
                      "); lower --model.dim, --model.layers, --train.batch or --data.samples, or run fewer ranks "
                      "per node");
  }
  dataset_ =
      config_.data == "synthetic"
          ? data::make_teacher_student(config_.synthetic_samples, config_.dim,
                                       config_.teacher_layers ? config_.teacher_layers : config_.layers, config_.seed)
          : data::open_hdf5(config_.data);
  if (dataset_->input_dim() != config_.dim)
    throw ConfigError(dataset_->describe() + ": its " + std::to_string(dataset_->input_dim()) +
                      " input features do not match --model.dim " + std::to_string(config_.dim) + "; set --model.dim " +
                      std::to_string(dataset_->input_dim()));
  if (!dataset_->has_labels() && dataset_->target_dim() != config_.dim)
    throw ConfigError(dataset_->describe() + ": the model's " + std::to_string(config_.dim) +
                      " outputs cannot fit targets of width " + std::to_string(dataset_->target_dim()));
  if (dataset_->has_labels() && dataset_->classes() > static_cast<std::int64_t>(config_.dim))
    throw ConfigError(dataset_->describe() + ": more classes than the model's " + std::to_string(config_.dim) +
                      " outputs; raise --model.dim");

  model_ = std::make_unique<nn::MLP>(store_, config_.layers, config_.dim);
  model_->set_input_grad(false);  // the input is data: no gradient for it
  store_.initialize(config_.seed);
  sampler_ = std::make_unique<data::DistributedSampler>(dataset_->size(), config_.global_batch, comm.rank(),
                                                        comm.size(), config_.seed);
  parallel::DDPOptions ddp = config_.ddp;
  ddp.loss_gradient_divided = true;  // step() divides the loss gradient by the ranks
  ddp_ = std::make_unique<parallel::DistributedDataParallel>(*model_, store_, comm, ddp);
  ddp_->verify_replicas_identical();
  side_ = std::make_unique<kernels::SideQueue>();

  if (config_.optimizer == "sgd") {
    optim::SGDOptions o;
    o.lr = config_.lr.value_or(o.lr);
    o.momentum = config_.momentum;
    if (config_.weight_decay >= 0) o.weight_decay = config_.weight_decay;
    optimizer_ = std::make_unique<optim::SGD>(store_.values(), store_.grads(), o);
  } else {
    optim::AdamWOptions o;
    o.lr = config_.lr.value_or(o.lr);
    if (config_.weight_decay >= 0) o.weight_decay = config_.weight_decay;
    optimizer_ = std::make_unique<optim::AdamW>(store_.values(), store_.grads(), o);
  }
  optimizer_->run_on(side_->space());

  const auto micro = static_cast<std::size_t>(config_.global_batch / (ranks * config_.accum));
  inputs_ = View2D<float>("tessera::inputs", micro, config_.dim);
  if (dataset_->has_labels())
    labels_ = View1D<std::int64_t>("tessera::labels", micro);
  else
    targets_ = View2D<float>("tessera::targets", micro, config_.dim);
  micro_indices_.resize(micro);
}

Trainer::~Trainer() = default;

StepMetrics Trainer::step() {
  StepMetrics m;
  const auto start = Clock::now();
  store_.zero_grad();
  const std::vector<std::int64_t>& local = sampler_->next();
  const std::size_t micro = micro_indices_.size();
  double loss_sum = 0;
  for (std::int64_t k = 0; k < config_.accum; ++k) {
    std::copy(local.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k) * micro),
              local.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k + 1) * micro),
              micro_indices_.begin());
    dataset_->load(micro_indices_, inputs_, targets_, labels_);
    auto t = Clock::now();
    auto y = model_->forward(inputs_);
    loss_sum += dataset_->has_labels() ? nn::cross_entropy_loss(y, labels_, dy_) : nn::mse_loss(y, targets_, dy_);
    if (config_.accum * comm_.size() > 1) {
      // Each micro-step's loss is a mean over its micro-batch; the step's is their mean over
      // the micro-steps and the ranks, so its gradient is divided by both here, on the
      // small loss gradient, and DDP only sums (DDPOptions::loss_gradient_divided).
      const Kokkos::View<float*, DeviceMemorySpace, Kokkos::MemoryUnmanaged> dy(dy_.data(), dy_.size());
      const float scale = 1.0f / static_cast<float>(config_.accum * comm_.size());
      Kokkos::parallel_for(
          "tessera::scale_dy", Kokkos::RangePolicy<>(0, dy.size()), KOKKOS_LAMBDA(std::size_t i) { dy(i) *= scale; });
    }
    Kokkos::DefaultExecutionSpace().fence();
    m.forward_s += since(t);
    const bool last = k + 1 == config_.accum;
    ddp_->set_sync(last);  // accumulate locally; communicate on the last micro-step only
    if (last && config_.overlap_optimizer) {
      // Each bucket is updated as soon as its gradients are final: with several ranks when
      // its reduction completes, while later buckets travel; on one rank during backward,
      // on a queue of its own beside backward's (a second CUDA stream on a GPU).
      optimizer_->begin_step();
      ddp_->begin_step([this](std::size_t offset, std::size_t count) {
        side_->follow_default();
        optimizer_->update(offset, count);
        // With several ranks the update is timed as the optimizer's (on a GPU the reductions
        // of later buckets run meanwhile on their own streams); on one rank it only queues.
        if (comm_.size() > 1) side_->space().fence();
      });
    } else if (last) {
      ddp_->begin_step();
    }
    t = Clock::now();
    model_->backward(dy_);
    Kokkos::DefaultExecutionSpace().fence();
    // Updates run inside backward (one rank) count as the optimizer's time.
    m.backward_s += since(t) - (last ? ddp_->last_sync().on_bucket_s : 0.0);
  }
  ddp_->finish_gradient_sync();
  const auto t = Clock::now();
  if (!config_.overlap_optimizer) {
    side_->follow_default();
    optimizer_->begin_step();
    optimizer_->update(0, optimizer_->size());
  }
  const double grad_sq = optimizer_->grad_square_sum();  // summed by the updates as they read the gradients
  m.optimizer_s = ddp_->last_sync().on_bucket_s + since(t);
  m.comm_exposed_s = ddp_->last_sync().exposed_s;

  double loss = loss_sum / static_cast<double>(config_.accum);
  comm_.all_reduce({&loss, 1}, comm::ReduceOp::Avg);
  m.step = ++steps_done_;
  m.loss = loss;
  // Every replica applied the same averaged gradients, so every rank sees the same norm and
  // the same loss, and stops alike.
  m.grad_norm = std::sqrt(grad_sq);
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    const auto text = [](double v) { return std::isnan(v) ? std::string("nan") : v > 0 ? "inf" : "-inf"; };
    std::ostringstream what;
    what << "training diverged at step " << m.step << ": ";
    if (!std::isfinite(m.loss)) what << "the loss is " << text(m.loss) << (std::isfinite(m.grad_norm) ? "" : " and ");
    if (!std::isfinite(m.grad_norm)) what << "the gradient norm is " << text(m.grad_norm);
    if (m.step > 1) what << " (step " << m.step - 1 << "'s loss was " << last_finite_loss_ << ")";
    what << ". The parameters are no longer usable, so the run stops here; lower the learning rate (--optim.lr, "
         << "now " << optimizer_->lr() << ") or look for NaN or infinite values in the data";
    throw NonFiniteError(what.str());
  }
  last_finite_loss_ = m.loss;
  m.step_time_s = since(start);
  m.samples_per_s = static_cast<double>(config_.global_batch) / m.step_time_s;
  m.model_state_bytes = 2 * store_.numel() * sizeof(float) + optimizer_->state_bytes();
  return m;
}

void Trainer::run(const std::function<void(const StepMetrics&)>& on_step) {
  while (steps_done_ < config_.steps) {
    const StepMetrics m = step();
    if (on_step) on_step(m);
  }
}

}  // namespace tessera::train
