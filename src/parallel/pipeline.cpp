#include <tessera/core/error.hpp>
#include <tessera/core/trace.hpp>
#include <tessera/parallel/pipeline.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/clock.hpp"

namespace tessera::parallel {

StageRange stage_layers(std::size_t layers, int stages, int stage) {
  if (stages < 1 || static_cast<std::size_t>(stages) > layers)
    throw ConfigError("pipeline parallelism over " + std::to_string(stages) + " stages needs at least " +
                      std::to_string(stages) + " layers, one per stage, and the model has " + std::to_string(layers) +
                      "; raise --model.layers or lower --parallel.pp");
  const std::size_t n = static_cast<std::size_t>(stages), s = static_cast<std::size_t>(stage);
  const std::size_t base = layers / n, extra = layers % n;
  return {s * base + std::min(s, extra), base + (s < extra ? 1 : 0)};
}

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::GPipe;
  if (name == "1f1b") return Schedule::OneFOneB;
  throw ConfigError("pipeline schedule '" + name + "' is not one Tessera has; use gpipe or 1f1b");
}

const char* schedule_name(Schedule s) noexcept { return s == Schedule::GPipe ? "gpipe" : "1f1b"; }

int Pipeline::in_flight(Schedule schedule, int microbatches, int stages, int stage) {
  return schedule == Schedule::GPipe ? microbatches : std::min(microbatches, stages - stage);
}

Pipeline::Pipeline(comm::Communicator& group, std::vector<nn::Module*> replicas, Schedule schedule, int microbatches,
                   std::size_t rows, std::size_t in, std::size_t out)
    : group_(group),
      replicas_(std::move(replicas)),
      schedule_(schedule),
      microbatches_(microbatches),
      stage_(group.rank()),
      stages_(group.size()),
      rows_(rows),
      out_(out) {
  if (microbatches < 1) throw ConfigError("--parallel.microbatches must be >= 1");
  const int needed = in_flight(schedule, microbatches, stages_, stage_);
  if (static_cast<int>(replicas_.size()) < needed)
    throw Error("Pipeline: the " + std::string(schedule_name(schedule)) + " schedule keeps " + std::to_string(needed) +
                " micro-batches in flight on stage " + std::to_string(stage_) + ", and it was given " +
                std::to_string(replicas_.size()) + " replicas of the stage");
  replicas_.resize(static_cast<std::size_t>(needed));
  if (stage_ > 0)
    for (int r = 0; r < needed; ++r) inputs_.emplace_back("tessera::pipeline::input", rows, in);
  dy_.resize(static_cast<std::size_t>(needed));
  forward_sends_.resize(static_cast<std::size_t>(needed));
  backward_sends_.resize(static_cast<std::size_t>(needed));
  forward_sent_.resize(static_cast<std::size_t>(needed));
  backward_sent_.resize(static_cast<std::size_t>(needed));
}

namespace {
/// Keeps a buffer a transfer may still use until the process ends.
void keep_for_process(const View2D<float>& buffer) {
  static auto* kept = new std::vector<View2D<float>>;  // never freed: MPI may use them until the end
  static std::mutex kept_mutex;
  const std::lock_guard<std::mutex> lock(kept_mutex);
  kept->push_back(buffer);
}
/// True once `work` has completed or failed (a failed transfer no longer uses its buffer).
bool finished(comm::Work& work) {
  try {
    return work.test();
  } catch (...) {
    return true;
  }
}
}  // namespace

Pipeline::~Pipeline() {
  // The sends still reading the replicas' outputs and input gradients, which belong to the
  // caller: the next stage, where it is alive, posts their receives soon, so they are waited
  // for a while; one still pending then keeps its buffer for the process. The wait is short:
  // a peer that failed too is waiting for this rank at the end of the job (2 s).
  const auto until = Clock::now() + std::chrono::milliseconds(1500);
  for (auto [sends, sent] :
       {std::make_pair(&forward_sends_, &forward_sent_), std::make_pair(&backward_sends_, &backward_sent_)})
    for (std::size_t r = 0; r < sends->size(); ++r) {
      auto& w = (*sends)[r];
      while (!finished(w) && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!finished(w)) keep_for_process((*sent)[r]);
    }
  // The gradient receive, when posted ahead (1F1B) and the run ended before its backward:
  // the next stage may yet send, and the receive writes grad_in_ until it completes or the
  // communicator stops it. Rather than wait (its sender may be the rank that failed), its
  // buffer is kept for the process: one micro-batch's gradient, once per failed run.
  if (!finished(grad_recv_)) keep_for_process(grad_in_);
}

void Pipeline::wait(comm::Work& work, const char* what) {
  const auto t = Clock::now();
  work.wait();
  if (trace::enabled()) trace::record("step", what, "step", t, Clock::now());
}

void Pipeline::post_gradient_recv(int m) {
  if (grad_in_.extent(0) != rows_ || grad_in_.extent(1) != out_)
    grad_in_ = View2D<float>("tessera::pipeline::grad", rows_, out_);
  grad_recv_ = group_.recv_async(grad_in_, stage_ + 1, microbatches_ + m);
  grad_recv_for_ = m;
}

void Pipeline::forward(int m, const Input& input, const Loss& loss, double& loss_sum, int then_backward) {
  const std::size_t r = static_cast<std::size_t>(m) % replicas_.size();
  View2D<const float> x;
  if (stage_ == 0) {
    x = input(m);
  } else {
    auto recv = group_.recv_async(inputs_[r], stage_ - 1, m);
    wait(recv, "wait for activations");
    x = inputs_[r];
  }
  forward_sends_[r].wait();  // the replica's output buffer is about to be written again
  const auto t = Clock::now();
  auto y = replicas_[r]->forward(x);
  if (stage_ + 1 == stages_) loss_sum += loss(m, y, dy_[r]);
  Kokkos::DefaultExecutionSpace().fence();
  stats_.forward_s += seconds_since(t);
  if (trace::enabled()) trace::record("step", "forward", "step", t, Clock::now());
  ++live_;
  stats_.max_in_flight = std::max(stats_.max_in_flight, live_);
  if (stage_ + 1 < stages_) {
    // The next stage sends the gradient of its backward before it receives this output:
    // post that receive first, so that the two stages' operations match in order (NCCL).
    // grad_in_ is free: the previous backward, its last reader, has completed.
    if (then_backward >= 0) post_gradient_recv(then_backward);
    forward_sends_[r] = group_.send_async(y, stage_ + 1, m);
    forward_sent_[r] = y;
  }
}

void Pipeline::backward(int m, const Around& before, const Around& after) {
  const std::size_t r = static_cast<std::size_t>(m) % replicas_.size();
  View2D<const float> dy;
  if (stage_ + 1 < stages_) {
    if (grad_recv_for_ != m) post_gradient_recv(m);
    wait(grad_recv_, "wait for gradients");
    grad_recv_for_ = -1;
    dy = grad_in_;
  } else {
    dy = dy_[r];
  }
  backward_sends_[r].wait();  // the replica's input-gradient buffer is about to be written again
  if (before) before(m);
  auto t = Clock::now();
  if (stage_ == 0) {  // nothing to send: one pass, in the order that overlaps data-parallel reductions best
    replicas_[r]->backward(dy);
    Kokkos::DefaultExecutionSpace().fence();
    stats_.backward_s += seconds_since(t);
    if (trace::enabled()) trace::record("step", "backward", "step", t, Clock::now());
  } else {
    // The previous stage waits for dL/dx alone: send it before the parameters' gradients,
    // which then delay nobody but this stage.
    auto dx = replicas_[r]->backward_input(dy);
    Kokkos::DefaultExecutionSpace().fence();
    stats_.backward_s += seconds_since(t);
    if (trace::enabled()) trace::record("step", "backward (input)", "step", t, Clock::now());
    backward_sends_[r] = group_.send_async(dx, stage_ - 1, microbatches_ + m);
    backward_sent_[r] = dx;
    t = Clock::now();
    replicas_[r]->backward_weights();
    Kokkos::DefaultExecutionSpace().fence();
    stats_.backward_s += seconds_since(t);
    if (trace::enabled()) trace::record("step", "backward (weights)", "step", t, Clock::now());
  }
  if (after) after(m);
  --live_;
}

double Pipeline::run(const Input& input, const Loss& loss, const Around& before_backward,
                     const Around& after_backward) {
  stats_ = {};
  live_ = 0;
  // The pipeline's span is common to its stages: from all of them starting together to the
  // last of them finishing. What a stage does not spend computing in it is its bubble.
  group_.barrier();
  const auto start = Clock::now();
  double loss_sum = 0;
  const int M = microbatches_;
  if (schedule_ == Schedule::GPipe) {
    for (int m = 0; m < M; ++m) forward(m, input, loss, loss_sum);
    for (int m = 0; m < M; ++m) backward(m, before_backward, after_backward);
  } else {
    // 1F1B: warm up with the forwards the later stages need, then one forward and one
    // backward in turn, then the remaining backwards.
    const int warmup = std::min(stages_ - stage_ - 1, M);
    for (int m = 0; m < warmup; ++m) forward(m, input, loss, loss_sum);
    for (int m = warmup; m < M; ++m) {
      forward(m, input, loss, loss_sum, m - warmup);
      backward(m - warmup, before_backward, after_backward);
    }
    for (int m = M - warmup; m < M; ++m) backward(m, before_backward, after_backward);
  }
  for (auto& w : forward_sends_) w.wait();
  for (auto& w : backward_sends_) w.wait();
  group_.barrier();
  stats_.span_s = seconds_since(start);
  stats_.idle_s = std::max(0.0, stats_.span_s - stats_.forward_s - stats_.backward_s);
  return loss_sum;
}

}  // namespace tessera::parallel
