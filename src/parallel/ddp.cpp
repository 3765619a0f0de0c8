#include <tessera/core/error.hpp>
#include <tessera/core/session.hpp>
#include <tessera/parallel/ddp.hpp>

#include <cmath>
#include <string>

#include "core/range.hpp"
#include "parallel/parameter_index.hpp"
#include "parallel/replicas.hpp"

namespace tessera::parallel {
namespace {
// Free functions: nvcc does not allow a device lambda in a private member function.
void to_bf16(const View1D<const float>& from, const View1D<bfloat16>& to) {
  Kokkos::parallel_for(
      "tessera::ddp::to_bf16", Range(0, from.size()), KOKKOS_LAMBDA(std::size_t i) { to(i) = bfloat16(from(i)); });
}
void from_bf16(const View1D<const bfloat16>& from, const View1D<float>& to) {
  Kokkos::parallel_for(
      "tessera::ddp::from_bf16", Range(0, from.size()),
      KOKKOS_LAMBDA(std::size_t i) { to(i) = static_cast<float>(from(i)); });
}
}  // namespace

const char* overlap_name(BackwardOverlap overlap) noexcept {
  switch (overlap) {
    case BackwardOverlap::On:
      return "true";
    case BackwardOverlap::Off:
      return "false";
    case BackwardOverlap::Auto:
      break;
  }
  return "auto";
}

bool overlaps_backward(BackwardOverlap overlap) {
  if (overlap != BackwardOverlap::Auto) return overlap == BackwardOverlap::On;
  // On a GPU the progress thread has the host to itself while the kernels run. On the host,
  // a rank of one core has nothing to overlap with: its reductions' copying and adding
  // would take turns with backward on that core.
  return memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device || Session::current().cores() >= 2;
}

DistributedDataParallel::DistributedDataParallel(nn::Module& model, nn::ParameterStore& store, comm::Communicator& comm,
                                                 DDPOptions options)
    : store_(store), comm_(comm), options_(options), overlap_(parallel::overlaps_backward(options.overlap_backward)) {
  if (!store.allocated()) store.allocate();
  if (store.value_residency() != nn::Residency::Full || store.grad_residency() != nn::Residency::Full)
    throw Error("DistributedDataParallel: every rank must keep the whole model; this store is sharded");
  // Written so that NaN and infinity fail too (they passed `<= 0`, and made the buckets' size
  // undefined).
  const auto size_ok = [](double mb) { return std::isfinite(mb) && mb > 0; };
  if (!size_ok(options.bucket_mb) || !size_ok(options.first_bucket_mb))
    throw ConfigError("DistributedDataParallel: bucket sizes must be finite and > 0 MiB (bucket_mb " +
                      std::to_string(options.bucket_mb) + ", first_bucket_mb " +
                      std::to_string(options.first_bucket_mb) + ")");
  if (options.grad_dtype != DType::Float32 && options.grad_dtype != DType::BFloat16)
    throw ConfigError(std::string("DistributedDataParallel: gradients travel as float32 or bfloat16, not ") +
                      dtype_name(options.grad_dtype));
  // Backward produces gradients from the last registered parameter to the first, and the
  // store lays them out in registration order: walking it backwards, each bucket is a
  // contiguous range that fills up in the order backward produces it.
  auto& params = store.parameters();
  const auto cap = [&](bool first) {
    return static_cast<std::size_t>((first ? options.first_bucket_mb : options.bucket_mb) * 1024 * 1024 /
                                    sizeof(float));
  };
  for (std::size_t k = params.size(); k-- > 0;) {
    auto& p = params[k];
    const bool full =
        !buckets_.empty() && buckets_.back().numel > 0 && buckets_.back().numel + p.numel > cap(buckets_.size() == 1);
    if (buckets_.empty() || full) buckets_.push_back({});
    auto& b = buckets_.back();
    b.offset = p.offset;  // walking down: each parameter starts the range anew
    b.numel += p.numel;
    b.parameters.push_back(p.name);
    bucket_of_[&p] = buckets_.size() - 1;
  }
  pending_.resize(buckets_.size());
  launched_.resize(buckets_.size());
  handed_.resize(buckets_.size());
  unreleased_.resize(buckets_.size());
  work_.resize(buckets_.size());
  if (options.grad_dtype == DType::BFloat16)
    for (const auto& b : buckets_) wire_.emplace_back("tessera::ddp::bf16", b.numel);
  model.set_grad_ready_hook([this](nn::Parameter& p) { on_grad_ready(p); });
  model.set_release_hook([this](nn::Parameter& p, nn::Pass pass) {
    if (nn::writes_gradients(pass)) on_released(p);  // a backward's last use of the parameter
  });
}

DistributedDataParallel::~DistributedDataParallel() {
  // Buffers of in-flight reductions must outlive them.
  for (auto& w : work_) {
    try {
      w.wait();
    } catch (...) {
    }
  }
}

std::size_t DistributedDataParallel::working_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& w : wire_) bytes += w.size() * sizeof(bfloat16);
  return bytes;
}

void DistributedDataParallel::verify_replicas_identical() { verify_replicas(store_.parameters(), comm_); }

void DistributedDataParallel::begin_step(BucketCallback on_bucket) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = unreleased_[b] = buckets_[b].parameters.size();
    launched_[b] = false;
    handed_[b] = false;
  }
  on_bucket_ = std::move(on_bucket);
  ready_ = 0;
  completed_.clear();
  stats_ = {};
  in_step_ = true;
}

void DistributedDataParallel::on_grad_ready(nn::Parameter& p) {
  if (!sync_ || !in_step_) return;
  ++ready_;
  const std::size_t b = detail::index_of(bucket_of_, p, "DistributedDataParallel");
  if (pending_[b] == 0)
    throw Error("DistributedDataParallel: the gradient of '" + p.name +
                "' was reported twice in one backward pass (shared parameters are not supported yet)");
  // One replica's gradients are already the average: nothing to launch. Without overlap,
  // finish_gradient_sync() launches every bucket.
  if (--pending_[b] != 0) return;
  completed_.push_back(b);
  if (comm_.size() > 1 && overlap_) {
    launch(b);
    ++stats_.buckets_launched_during_backward;
  }
}

void DistributedDataParallel::on_released(nn::Parameter& p) {
  // One rank: once backward is done with every parameter of a bucket, its gradients are final
  // and its values may change, so the optimizer may update it beside the rest of backward.
  if (!sync_ || !in_step_ || comm_.size() > 1) return;
  const std::size_t b = detail::index_of(bucket_of_, p, "DistributedDataParallel");
  if (unreleased_[b] > 0 && --unreleased_[b] == 0 && pending_[b] == 0) hand_over(b);
}

void DistributedDataParallel::hand_over(std::size_t b) {
  handed_[b] = true;
  if (!on_bucket_) return;
  const auto t = std::chrono::steady_clock::now();
  on_bucket_(buckets_[b].offset, buckets_[b].numel);
  stats_.on_bucket_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void DistributedDataParallel::launch(std::size_t b, bool here) {
  launched_[b] = true;
  stats_.ready_at_launch.push_back(ready_);
  const auto& bucket = buckets_[b];
  View1D<float> grads(store_.grads().data() + bucket.offset, bucket.numel);
  // The communicator waits for the kernels that write the gradients before it reads them.
  const auto op = options_.loss_gradient_divided ? comm::ReduceOp::Sum : comm::ReduceOp::Avg;
  if (options_.grad_dtype == DType::BFloat16) to_bf16(grads, wire_[b]);
  if (here) {
    if (options_.grad_dtype == DType::BFloat16)
      comm_.all_reduce(wire_[b], op);
    else
      comm_.all_reduce(grads, op);
    work_[b] = {};
  } else {
    work_[b] = options_.grad_dtype == DType::BFloat16 ? comm_.all_reduce_async(wire_[b], op)
                                                      : comm_.all_reduce_async(grads, op);
  }
}

void DistributedDataParallel::finish_gradient_sync() {
  if (!in_step_)
    throw Error(
        "DistributedDataParallel::finish_gradient_sync without begin_step() before backward; the "
        "gradients would not be averaged");
  const auto start = std::chrono::steady_clock::now();
  const double before = stats_.on_bucket_s;
  store_.settle_grads();  // gradients of parameters this step's backward did not reach are zero
  if (comm_.size() == 1) {
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      if (!handed_[b]) hand_over(b);
  } else {
    // The buckets in the order backward completed them (not their numbers': a layer's weight
    // may complete a bucket before its bias completes a lower-numbered one), then those it did
    // not complete (parameters unused in this step's graph) by number. Every rank issues the
    // same reductions in the same order whether it overlaps or not: under auto, ranks with
    // different numbers of cores choose differently.
    std::vector<std::size_t> order = completed_;
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      if (pending_[b] != 0) order.push_back(b);
    if (overlap_)
      for (const std::size_t b : order)
        if (!launched_[b]) launch(b);
    for (const std::size_t b : order) {
      // Without overlap, each bucket is reduced here, on this thread, and updated before the
      // next is reduced: on one core, neither waits for the other's turn.
      if (!launched_[b]) launch(b, /*here=*/true);
      work_[b].wait();
      const auto& bucket = buckets_[b];
      if (options_.grad_dtype == DType::BFloat16)
        from_bf16(wire_[b], View1D<float>(store_.grads().data() + bucket.offset, bucket.numel));
      hand_over(b);
    }
  }
  on_bucket_ = nullptr;
  in_step_ = false;
  stats_.exposed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - (stats_.on_bucket_s - before);
}

}  // namespace tessera::parallel
