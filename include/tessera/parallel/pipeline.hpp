#pragma once
/// \file
/// Pipeline parallelism: the model's layers cut into P contiguous stages, one per rank of a
/// pipeline group, and a batch cut into M micro-batches that flow through them, forward
/// then backward, with activations and their gradients sent between neighbouring stages.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <tessera/comm/communicator.hpp>
#include <tessera/nn/module.hpp>

namespace tessera::parallel {

/// Which of `layers` layers stage `stage` of `stages` holds: contiguous, sizes differing by
/// at most one (the first stages take one more). ConfigError when stages > layers.
struct StageRange {
  std::size_t first = 0, count = 0;
};
StageRange stage_layers(std::size_t layers, int stages, int stage);

/// GPipe: every micro-batch's forward, then every backward (M micro-batches of activations
/// alive). 1F1B: after P - s - 1 forwards, stage s alternates one forward and one backward
/// (at most P - s alive).
enum class Schedule { GPipe, OneFOneB };
Schedule parse_schedule(const std::string& name);  ///< "gpipe" or "1f1b"
const char* schedule_name(Schedule s) noexcept;

/// What one run of the pipeline did on this rank.
struct PipelineStats {
  double span_s = 0;                     ///< from every stage starting together to the last one finishing
  double forward_s = 0, backward_s = 0;  ///< of which computing (forward includes the loss)
  double idle_s = 0;                     ///< the rest: waiting for a neighbour (the "bubble")
  double bubble_fraction() const { return span_s > 0 ? idle_s / span_s : 0; }
  std::size_t max_in_flight = 0;  ///< micro-batches forwarded and not yet backwarded, at most
};

/// Runs this rank's stage over M micro-batches. `replicas` are modules on the same
/// parameters with activations of their own (nn::MLP::replica), at least as many as the
/// schedule keeps in flight: M for GPipe, P - stage for 1F1B.
///
/// A stage after the first runs each backward in two halves (Module::backward_input, then
/// backward_weights) and sends dL/dx in between: the previous stage waits for the input
/// gradient alone. Every rank runs the same sequence of passes whatever the timing, so the
/// collectives of data- and tensor-parallel groups inside them line up.
///
/// Sends and receives are posted in orders that match from stage to stage, as NCCL needs:
/// it runs a communicator's operations one after another in the order each rank posted
/// them, and a send may wait for its receive. So in 1F1B's steady phase a stage posts the
/// receive of the gradient its next backward needs before it sends the forward's output
/// (the next stage sends that gradient before it receives the output).
class Pipeline {
 public:
  /// `rows` per micro-batch; `in` and `out` the stage's input and output widths.
  Pipeline(comm::Communicator& group, std::vector<nn::Module*> replicas, Schedule schedule, int microbatches,
           std::size_t rows, std::size_t in, std::size_t out);
  /// A run that ended in an exception can leave transfers in flight. The sends still reading
  /// the replicas' outputs and input gradients are waited for up to 1.5 s (the next stage,
  /// alive, posts their receives soon); one still pending after that keeps its buffer alive
  /// for the process, and the caller must not write that replica's buffers again: the peer
  /// may yet receive them. A gradient receive still posted keeps its buffer for the process.
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Replicas the schedule needs on stage `stage` of `stages`.
  static int in_flight(Schedule schedule, int microbatches, int stages, int stage);

  /// The first stage's input of micro-batch m.
  using Input = std::function<View2D<const float>(int m)>;
  /// The last stage's loss of micro-batch m from its output y; writes dL/dy into dy.
  using Loss = std::function<double(int m, const View2D<const float>& y, View2D<float>& dy)>;
  /// Called around each backward (e.g. to tell a data-parallel strategy which is the last).
  using Around = std::function<void(int m)>;

  /// One pass of every micro-batch forward and backward. Returns the sum of the last
  /// stage's micro-batch losses (0 on other stages).
  double run(const Input& input, const Loss& loss, const Around& before_backward = {},
             const Around& after_backward = {});
  const PipelineStats& last() const noexcept { return stats_; }
  int stage() const noexcept { return stage_; }
  int stages() const noexcept { return stages_; }

 private:
  /// Forward of micro-batch m; `then_backward` >= 0 is the backward that follows it (1F1B),
  /// whose gradient is received ahead of the output's send.
  void forward(int m, const Input& input, const Loss& loss, double& loss_sum, int then_backward = -1);
  void backward(int m, const Around& before, const Around& after);
  void post_gradient_recv(int m);
  void wait(comm::Work& work, const char* what);

  comm::Communicator& group_;
  std::vector<nn::Module*> replicas_;
  Schedule schedule_;
  int microbatches_, stage_, stages_;
  std::size_t rows_, out_;
  std::vector<View2D<float>> inputs_;                       // per replica: the activations received for its micro-batch
  View2D<float> grad_in_;                                   // the gradient received from the next stage
  comm::Work grad_recv_;                                    // its receive, once posted
  int grad_recv_for_ = -1;                                  // the micro-batch it is posted for (-1: none)
  std::vector<View2D<float>> dy_;                           // per replica (last stage): the loss gradient
  std::vector<comm::Work> forward_sends_, backward_sends_;  // per replica: its last send
  std::vector<View2D<float>> forward_sent_, backward_sent_;  // and the buffer it reads
  std::size_t live_ = 0;
  PipelineStats stats_;
};

}  // namespace tessera::parallel
