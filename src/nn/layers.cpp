#include <tessera/comm/communicator.hpp>
#include <tessera/core/error.hpp>
#include <tessera/nn/layers.hpp>

#include <algorithm>
#include <cmath>

#include "core/range.hpp"
#include "kernels/gelu_kernels.hpp"
#include "kernels/gemm.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/summing_loop.hpp"

namespace tessera::nn {
using kernels::Trans;

namespace {
/// The elements of a row-major matrix as one flat range, so elementwise kernels index
/// them without a division (and vectorize). Every View2D here is unpadded.
template <class T>
Kokkos::View<T*, DeviceMemorySpace, Kokkos::MemoryUnmanaged> flat(const View2D<T>& m) {
  if (!m.span_is_contiguous())
    throw ConfigError("a " + std::to_string(m.extent(0)) + " x " + std::to_string(m.extent(1)) +
                      " matrix whose rows are not next to each other in memory (a slice of some columns?) was given to "
                      "an elementwise layer or loss (GELU, mse_loss); give it a whole matrix, or a copy of the slice");
  return Kokkos::View<T*, DeviceMemorySpace, Kokkos::MemoryUnmanaged>(m.data(), m.size());
}
/// Calls f(offset, count) for chunks of kernels::kHostLoopChunk elements that cover [0, n),
/// in parallel on the host.
template <class F>
void for_each_host_chunk(const char* label, std::size_t n, const F& f) {
  constexpr std::size_t chunk = kernels::kHostLoopChunk;
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, (n + chunk - 1) / chunk),
                       [=](std::size_t c) { f(c * chunk, std::min(chunk, n - c * chunk)); });
}
/// A Linear layer's features: with none, its init bound 1/sqrt(in) is infinite and its GEMMs
/// have nothing to multiply.
std::size_t features(std::size_t n, const std::string& name, const char* what) {
  if (n == 0)
    throw ConfigError("Linear '" + name + "' has 0 " + what + " features; a layer needs at least one input and one " +
                      "output");
  return n;
}
}  // namespace

Linear::Linear(ParameterStore& store, const std::string& name, std::size_t in, std::size_t out, bool bias)
    : in_(features(in, name, "input")), out_(features(out, name, "output")) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in));
  weight_ = &store.add(name + ".weight", {static_cast<std::int64_t>(out), static_cast<std::int64_t>(in)},
                       Init::uniform(bound));
  if (bias) bias_ = &store.add(name + ".bias", {static_cast<std::int64_t>(out)}, Init::uniform(bound));
}

Linear::Linear(ParameterStore& store, const std::string& name, std::size_t in, std::size_t out, TensorSplit split,
               comm::Communicator& tp, bool bias)
    : in_(features(in, name, "input")), out_(features(out, name, "output")), split_(split), tp_(&tp) {
  const int parts = tp.size(), index = tp.rank();
  const std::size_t cut = split == TensorSplit::Column ? out : in;
  if (split != TensorSplit::None && cut % static_cast<std::size_t>(parts) != 0)
    throw ConfigError("tensor parallelism over " + std::to_string(parts) + " ranks cuts layer '" + name + "' into " +
                      std::to_string(parts) + " blocks of its " + std::to_string(cut) + " " +
                      (split == TensorSplit::Column ? "output" : "input") + " features, and " + std::to_string(cut) +
                      " does not divide by " + std::to_string(parts) + "; choose a width divisible by " +
                      std::to_string(parts));
  const float bound = 1.0f / std::sqrt(static_cast<float>(in));  // the whole layer's fan-in
  const std::vector<std::int64_t> shape = {static_cast<std::int64_t>(out), static_cast<std::int64_t>(in)};
  switch (split) {
    case TensorSplit::None:
      weight_ = &store.add(name + ".weight", shape, Init::uniform(bound));
      if (bias) bias_ = &store.add(name + ".bias", {shape[0]}, Init::uniform(bound));
      break;
    case TensorSplit::Column:
      out_ = out / static_cast<std::size_t>(parts);
      weight_ = &store.add(name + ".weight", shape, Init::uniform(bound), ShardSpec::block(0, index, parts));
      if (bias) bias_ = &store.add(name + ".bias", {shape[0]}, Init::uniform(bound), ShardSpec::block(0, index, parts));
      break;
    case TensorSplit::Row:
      in_ = in / static_cast<std::size_t>(parts);
      weight_ = &store.add(name + ".weight", shape, Init::uniform(bound), ShardSpec::block(1, index, parts));
      if (bias) bias_ = &store.add(name + ".bias", {shape[0]}, Init::uniform(bound));
      break;
  }
}

View2D<float> Linear::forward(const View2D<const float>& x) {
  if (x.extent(1) != in_)
    throw ConfigError("Linear '" + weight_->name + "': input has " + std::to_string(x.extent(1)) +
                      " features, expected " + std::to_string(in_));
  x_ = x;
  const std::size_t batch = x.extent(0);
  ensure_shape(y_, batch, out_, "tessera::linear::y");
  acquire(*weight_, Pass::Forward);
  if (bias_ != nullptr) acquire(*bias_, Pass::Forward);
  if (bias_ != nullptr && split_ != TensorSplit::Row) {
    kernels::gemm_bias(Trans::No, Trans::Yes, x, weight_->value2d(), bias_->value, y_);
  } else {
    kernels::gemm(Trans::No, Trans::Yes, 1.0f, x, weight_->value2d(), 0.0f, y_);
    // Row split: each rank multiplied its block of the input features; the output is their
    // sum, and the bias is added once, to the sum.
    if (split_ == TensorSplit::Row) tp_->all_reduce(y_, comm::ReduceOp::Sum);
    if (bias_ != nullptr) kernels::add_bias(y_, bias_->value);
  }
  released(*weight_, Pass::Forward);
  if (bias_ != nullptr) released(*bias_, Pass::Forward);
  return y_;
}

void Linear::weight_gradients(const View2D<const float>& dy) {
  const std::size_t batch = dy.extent(0);
  if (bias_ == nullptr) {
    // dW += dy^T x
    kernels::gemm(Trans::Yes, Trans::No, 1.0f, dy, x_, weight_->take_grad_beta(), weight_->grad2d());
    grad_ready(*weight_);
    return;
  }
  // dW += dy^T x and db += dy^T 1: on a GPU in one cuBLASLt call whose epilogue sums dy as the
  // GEMM reads it (where db is written, not added to), elsewhere a GEMV after the GEMM.
  // The ones the GEMV reads are kept for the largest batch seen and filled in the default
  // execution space's queue, ahead of the GEMM that reads them: a plain deep_copy would wait
  // for the whole device (the optimizer's side queue, reductions in flight) in the first
  // backward.
  if (ones_.extent(0) < batch) {
    ones_ = View1D<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "tessera::linear::ones"), batch);
    Kokkos::deep_copy(Kokkos::DefaultExecutionSpace(), ones_, 1.0f);
  }
  const float weight_beta = weight_->take_grad_beta(), bias_beta = bias_->take_grad_beta();
  kernels::gemm_bias_grad(Trans::Yes, Trans::No, dy, x_, weight_beta, weight_->grad2d(), bias_beta, bias_->grad, ones_);
  grad_ready(*weight_);
  grad_ready(*bias_);
}

void Linear::input_gradient(const View2D<const float>& dy) {
  ensure_shape(dx_, dy.extent(0), in_, "tessera::linear::dx");
  kernels::gemm(Trans::No, Trans::No, 1.0f, dy, weight_->value2d(), 0.0f, dx_);
}

void Linear::set_input_grad(bool needed) {
  Module::set_input_grad(needed);
  weight_->backward_reads_value = needed;
  if (bias_ != nullptr) bias_->backward_reads_value = needed;
}

void Linear::check_output_gradient(const View2D<const float>& dy, const char* call) const {
  if (x_.data() == nullptr)
    throw Error("Linear '" + weight_->name + "': " + call + " before any forward(); run forward first");
  if (dy.extent(0) != x_.extent(0) || dy.extent(1) != out_)
    throw ConfigError("Linear '" + weight_->name + "': " + call + " was given a gradient of " +
                      std::to_string(dy.extent(0)) + " x " + std::to_string(dy.extent(1)) +
                      ", and the last forward's output is " + std::to_string(x_.extent(0)) + " x " +
                      std::to_string(out_) + "; give the gradient of that output");
}

View2D<float> Linear::backward(const View2D<const float>& dy) {
  check_output_gradient(dy, "backward()");
  // Without an input gradient (a model's first layer) backward only writes gradients: a
  // ZeRO-3 rank gathers nothing for it.
  const Pass pass = input_grad_ ? Pass::Backward : Pass::WeightGradient;
  acquire(*weight_, pass);
  if (bias_ != nullptr) acquire(*bias_, pass);
  weight_gradients(dy);
  auto release = [&] {
    released(*weight_, pass);
    if (bias_ != nullptr) released(*bias_, pass);
  };
  if (!input_grad_) {
    release();
    return {};
  }
  // dx after the gradients are handed over, so that their communication overlaps it.
  input_gradient(dy);
  release();  // W is read by nothing after the GEMM just queued
  // Column split: the whole input fed every rank's block of outputs; its gradient is the sum.
  if (split_ == TensorSplit::Column) tp_->all_reduce(dx_, comm::ReduceOp::Sum);
  return dx_;
}

View2D<float> Linear::backward_input(const View2D<const float>& dy) {
  check_output_gradient(dy, "backward_input()");
  dy_ = dy;
  if (!input_grad_) return {};
  acquire(*weight_, Pass::InputGradient);
  input_gradient(dy);
  released(*weight_, Pass::InputGradient);
  if (split_ == TensorSplit::Column) tp_->all_reduce(dx_, comm::ReduceOp::Sum);
  return dx_;
}

void Linear::backward_weights() {
  if (dy_.data() == nullptr) throw Error("Linear::backward_weights() without backward_input() before it");
  acquire(*weight_, Pass::WeightGradient);
  if (bias_ != nullptr) acquire(*bias_, Pass::WeightGradient);
  weight_gradients(dy_);
  released(*weight_, Pass::WeightGradient);
  if (bias_ != nullptr) released(*bias_, Pass::WeightGradient);
  dy_ = {};
}

View2D<float> GELU::forward(const View2D<const float>& x) {
  x_ = x;
  ensure_shape(y_, x.extent(0), x.extent(1), "tessera::gelu::y");
  const auto in = flat(x);
  const auto y = flat(y_);
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Host) {
    // Phi(x) is kept for backward, which then needs no erf: on a CPU the erf costs more than
    // the memory. The widest vector loop this CPU runs (kernels/host_loops.hpp), a chunk per call.
    ensure_shape(cdf_, x.extent(0), x.extent(1), "tessera::gelu::cdf");
    const auto& loops = kernels::host_loops();
    const float* px = in.data();
    float *py = y.data(), *pc = cdf_.data();
    for_each_host_chunk("tessera::gelu", in.size(), [=](std::size_t at, std::size_t count) {
      loops.gelu_forward(px + at, py + at, pc + at, count);
    });
  } else {
    // On a GPU backward computes Phi(x) again instead of reading it: one activation buffer
    // less per GELU, at the same step time (measured on an H100, MLP 8 x 4096, batch 1024).
    kernels::gelu::forward(Kokkos::DefaultExecutionSpace(), in.data(), y.data(), in.size());
  }
  return y_;
}

View2D<float> GELU::backward(const View2D<const float>& dy) {
  if (dy.extent(0) != x_.extent(0) || dy.extent(1) != x_.extent(1))
    throw ConfigError("GELU::backward: gradient is " + std::to_string(dy.extent(0)) + "x" +
                      std::to_string(dy.extent(1)) + " but forward saw " + std::to_string(x_.extent(0)) + "x" +
                      std::to_string(x_.extent(1)));
  if (!input_grad_) return {};
  ensure_shape(dx_, x_.extent(0), x_.extent(1), "tessera::gelu::dx");
  const auto dx = flat(dx_);
  const auto x = flat(x_);
  const auto g = flat(dy);
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Host) {
    const auto& loops = kernels::host_loops();
    const float *px = x.data(), *pc = cdf_.data(), *pg = g.data();
    float* pdx = dx.data();
    for_each_host_chunk("tessera::gelu::backward", x.size(), [=](std::size_t at, std::size_t count) {
      loops.gelu_backward(px + at, pc + at, pg + at, pdx + at, count);
    });
  } else {
    kernels::gelu::backward(Kokkos::DefaultExecutionSpace(), x.data(), g.data(), dx.data(), x.size());
  }
  return dx_;
}

MLP::MLP(ParameterStore& store, std::size_t layers, std::size_t dim, const std::string& prefix, comm::Communicator* tp)
    : MLP(store, layers, dim, prefix, tp, 0, layers) {}

MLP::MLP(ParameterStore& store, std::size_t layers, std::size_t dim, const std::string& prefix, comm::Communicator* tp,
         std::size_t first, std::size_t count) {
  if (layers == 0 || dim == 0) throw ConfigError("MLP needs at least one layer and a dimension >= 1");
  if (count == 0 || first + count > layers)
    throw ConfigError("MLP: layers [" + std::to_string(first) + ", " + std::to_string(first + count) +
                      ") are not a non-empty range of its " + std::to_string(layers));
  const bool split = tp != nullptr && tp->size() > 1;
  if (split && first % 2 == 1)
    throw ConfigError("a model part that starts at layer " + std::to_string(first) +
                      " would cut a column-row pair of tensor-parallel layers; start parts at even layers");
  for (std::size_t i = first; i < first + count; ++i) {
    const std::string name = prefix + "." + std::to_string(i);
    // Column then row; an odd last layer stays whole.
    const TensorSplit how = !split           ? TensorSplit::None
                            : i % 2 == 1     ? TensorSplit::Row
                            : i + 1 < layers ? TensorSplit::Column
                                             : TensorSplit::None;
    if (split)
      linears_.push_back(std::make_unique<Linear>(store, name, dim, dim, how, *tp));
    else
      linears_.push_back(std::make_unique<Linear>(store, name, dim, dim));
    if (i + 1 < layers) gelus_.push_back(std::make_unique<GELU>());
  }
}

std::unique_ptr<Linear> Linear::replica() const {
  std::unique_ptr<Linear> r(new Linear(*this));  // the parameters, the split, the hooks
  r->x_ = {};                                    // and activations of its own
  r->y_ = {};
  r->dx_ = {};
  r->dy_ = {};
  r->ones_ = {};
  return r;
}

std::unique_ptr<MLP> MLP::replica() const {
  std::unique_ptr<MLP> r(new MLP());
  for (const auto& l : linears_) r->linears_.push_back(l->replica());
  for (std::size_t i = 0; i < gelus_.size(); ++i) r->gelus_.push_back(std::make_unique<GELU>());
  r->hook_ = hook_;
  r->acquire_hook_ = acquire_hook_;
  r->release_hook_ = release_hook_;
  r->input_grad_ = input_grad_;
  return r;
}

void MLP::set_input_grad(bool needed) {
  input_grad_ = needed;
  linears_.front()->set_input_grad(needed);
}

void MLP::set_acquire_hook(AcquireHook hook) {
  acquire_hook_ = hook;
  for (auto& l : linears_) l->set_acquire_hook(hook);
}

void MLP::set_release_hook(ReleaseHook hook) {
  release_hook_ = hook;
  for (auto& l : linears_) l->set_release_hook(hook);
}

void MLP::set_grad_ready_hook(GradReadyHook hook) {
  hook_ = hook;
  for (auto& l : linears_) l->set_grad_ready_hook(hook);
}

View2D<float> MLP::forward(const View2D<const float>& x) {
  View2D<float> h;
  View2D<const float> in = x;
  for (std::size_t i = 0; i < linears_.size(); ++i) {
    h = linears_[i]->forward(in);
    if (i < gelus_.size()) h = gelus_[i]->forward(h);
    in = h;
  }
  return h;
}

View2D<float> MLP::backward_input(const View2D<const float>& dy) {
  View2D<float> g;
  View2D<const float> in = dy;
  for (std::size_t i = linears_.size(); i-- > 0;) {
    if (i < gelus_.size()) {
      g = gelus_[i]->backward(in);  // kept by the GELU until its next backward: layer i's dy
      in = g;
    }
    g = linears_[i]->backward_input(in);
    in = g;
  }
  return g;
}

void MLP::backward_weights() {
  for (std::size_t i = linears_.size(); i-- > 0;) linears_[i]->backward_weights();
}

View2D<float> MLP::backward(const View2D<const float>& dy) {
  View2D<float> g;
  View2D<const float> in = dy;
  for (std::size_t i = linears_.size(); i-- > 0;) {
    if (i < gelus_.size()) {
      g = gelus_[i]->backward(in);
      in = g;
    }
    g = linears_[i]->backward(in);
    in = g;
  }
  return g;
}

float mse_loss(const View2D<const float>& y, const View2D<const float>& target, View2D<float>& dy) {
  if (y.extent(0) != target.extent(0) || y.extent(1) != target.extent(1))
    throw ConfigError("mse_loss: output is " + std::to_string(y.extent(0)) + "x" + std::to_string(y.extent(1)) +
                      " but target is " + std::to_string(target.extent(0)) + "x" + std::to_string(target.extent(1)));
  ensure_shape(dy, y.extent(0), y.extent(1), "tessera::mse::dy");
  const auto out = flat(y), want = flat(target);
  const auto g = flat(dy);
  const std::size_t n = out.size();
  const float scale = n > 0 ? 2.0f / static_cast<float>(n) : 0.0f;
  const double sum = kernels::for_each_summing(
      "tessera::mse", 0, n, KOKKOS_LAMBDA(std::size_t k) {
        const float d = out(k) - want(k);
        g(k) = scale * d;
        return static_cast<double>(d) * d;
      });
  return n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
}

float cross_entropy_loss(const View2D<const float>& logits, const View1D<const std::int64_t>& labels,
                         View2D<float>& dy) {
  const std::size_t batch = logits.extent(0), classes = logits.extent(1);
  if (labels.extent(0) != batch)
    throw ConfigError("cross_entropy_loss: " + std::to_string(batch) + " rows of logits but " +
                      std::to_string(labels.extent(0)) + " labels");
  ensure_shape(dy, batch, classes, "tessera::ce::dy");
  auto g = dy;
  const float inv_batch = batch > 0 ? 1.0f / static_cast<float>(batch) : 0.0f;
  double sum = 0;
  long long bad = 0;
  Kokkos::parallel_reduce(
      "tessera::cross_entropy", Range(0, batch),
      KOKKOS_LAMBDA(std::size_t i, double& acc, long long& invalid) {
        const std::int64_t label = labels(i);
        if (label < 0 || label >= static_cast<std::int64_t>(classes)) {
          ++invalid;
          return;
        }
        float m = logits(i, 0);
        for (std::size_t j = 1; j < classes; ++j) m = logits(i, j) > m ? logits(i, j) : m;
        float s = 0;
        for (std::size_t j = 0; j < classes; ++j) s += expf(logits(i, j) - m);
        const float log_s = logf(s);
        for (std::size_t j = 0; j < classes; ++j) {
          const float p = expf(logits(i, j) - m - log_s);
          g(i, j) = (p - (static_cast<std::int64_t>(j) == label ? 1.0f : 0.0f)) * inv_batch;
        }
        acc += static_cast<double>(log_s + m - logits(i, static_cast<std::size_t>(label)));
      },
      sum, bad);
  if (bad > 0)
    throw ConfigError("cross_entropy_loss: " + std::to_string(bad) + " label(s) outside [0, " +
                      std::to_string(classes) + ")");
  return batch > 0 ? static_cast<float>(sum / static_cast<double>(batch)) : 0.0f;
}

}  // namespace tessera::nn
