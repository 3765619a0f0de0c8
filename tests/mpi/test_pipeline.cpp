// Pipeline parallelism proven against the whole model in one process: each rank holds one
// stage of a 5-layer MLP, a batch runs as M micro-batches under GPipe and 1F1B, and every
// stage ends with the whole model's gradients of its layers (the batch's mean loss).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <tessera/nn/layers.hpp>
#include <tessera/parallel/pipeline.hpp>
#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using test::expect_blocks_match;
using test::host;
using test::world;

constexpr std::size_t kLayers = 5, kDim = 8, kRows = 12;

View2D<float> filled(std::size_t rows, std::size_t cols, std::uint64_t salt) {
  std::vector<float> v(rows * cols);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.29f * static_cast<float>(i + salt));
  return test::device_matrix(rows, cols, v);
}

/// g *= s, through a host copy (the view may live on a GPU).
void scale(const View2D<float>& g, float s) {
  auto h = test::host_copy(g);
  for (std::size_t i = 0; i < h.extent(0); ++i)
    for (std::size_t j = 0; j < h.extent(1); ++j) h(i, j) *= s;
  Kokkos::deep_copy(g, h);
}

TEST(PipelineStages, AreContiguousBalancedAndCoverTheModel) {
  for (std::size_t layers : {1u, 2u, 5u, 8u, 9u})
    for (int stages = 1; stages <= static_cast<int>(std::min<std::size_t>(layers, 4)); ++stages) {
      std::size_t next = 0, lo = layers, hi = 0;
      for (int s = 0; s < stages; ++s) {
        const auto r = parallel::stage_layers(layers, stages, s);
        EXPECT_EQ(r.first, next);
        next = r.first + r.count;
        lo = std::min(lo, r.count);
        hi = std::max(hi, r.count);
      }
      EXPECT_EQ(next, layers);
      EXPECT_LE(hi - lo, 1u);
      EXPECT_GE(lo, 1u);
    }
  EXPECT_THROW_WITH(parallel::stage_layers(3, 4, 0), ConfigError, "needs at least 4 layers, one per stage");
}

/// GPipe keeps all M micro-batches alive, 1F1B P - s on stage s.
void expect_in_flight(std::size_t seen, parallel::Schedule schedule, int M, int P, int stage, const std::string& what) {
  EXPECT_EQ(seen, static_cast<std::size_t>(schedule == parallel::Schedule::GPipe ? M : std::min(M, P - stage))) << what;
}

TEST(Pipeline, EveryScheduleGivesTheWholeModelsLossAndGradients) {
  const int P = world().size(), stage = world().rank();
  const auto x = filled(kRows, kDim, 1), t = filled(kRows, kDim, 2);
  // The reference: the whole model, the whole batch, in this process.
  nn::ParameterStore whole_store;
  nn::MLP whole(whole_store, kLayers, kDim);
  whole_store.initialize(9);
  View2D<float> dy;
  const float whole_loss = nn::mse_loss(whole.forward(x), t, dy);
  whole.backward(dy);
  for (auto schedule : {parallel::Schedule::GPipe, parallel::Schedule::OneFOneB})
    for (int M : {1, 2, 3, 4, 6}) {
      const std::string what = std::string(parallel::schedule_name(schedule)) + ", " + std::to_string(M) +
                               " micro-batches, stage " + std::to_string(stage) + " of " + std::to_string(P);
      const auto range = parallel::stage_layers(kLayers, P, stage);
      nn::ParameterStore store;
      nn::MLP part(store, kLayers, kDim, "layers", nullptr, range.first, range.count);
      store.initialize(9);
      std::vector<std::unique_ptr<nn::MLP>> replicas;
      std::vector<nn::Module*> modules;
      for (int r = 0; r < parallel::Pipeline::in_flight(schedule, M, P, stage); ++r) {
        replicas.push_back(part.replica());
        modules.push_back(replicas.back().get());
      }
      const std::size_t rows = kRows / static_cast<std::size_t>(M);
      parallel::Pipeline pipe(world(), modules, schedule, M, rows, kDim, kDim);
      const auto slice = [&](const View2D<float>& v, int m) {
        return Kokkos::subview(v, std::make_pair(rows * static_cast<std::size_t>(m), rows * (m + 1ul)), Kokkos::ALL());
      };
      store.zero_grad();
      const double loss_sum = pipe.run([&](int m) -> View2D<const float> { return slice(x, m); },
                                       [&](int m, const View2D<const float>& y, View2D<float>& g) {
                                         const double l = nn::mse_loss(y, slice(t, m), g);
                                         scale(g, 1.0f / static_cast<float>(M));  // the mean over micro-batches
                                         return l;
                                       });
      store.settle_grads();
      if (stage == P - 1) {
        EXPECT_NEAR(loss_sum / M, whole_loss, 1e-6 * whole_loss) << what;
      }
      for (auto& p : store.parameters())
        test::expect_same_parameters(host(whole_store.find(p.name).grad), host(p.grad), 1e-5, what + ", " + p.name);
      const auto& s = pipe.last();
      expect_in_flight(s.max_in_flight, schedule, M, P, stage, what);
      EXPECT_GE(s.span_s, s.idle_s);
    }
}

/// A stage that passes its input on, into an output buffer the test can write.
class Echo final : public nn::Module {
 public:
  View2D<float> forward(const View2D<const float>& x) override {
    nn::ensure_shape(y, x.extent(0), x.extent(1), "echo::y");
    Kokkos::deep_copy(y, x);
    return y;
  }
  View2D<float> backward(const View2D<const float>& dy) override {
    nn::ensure_shape(dx, dy.extent(0), dy.extent(1), "echo::dx");
    Kokkos::deep_copy(dx, dy);
    return dx;
  }
  View2D<float> y, dx;
};

// A run that ends in an exception returns with sends still in flight; the caller may then
// write the replicas' buffers again. Destroying the pipeline waits for those sends (up to
// 1.5 s): the next stage, which posts its receive 0.3 s later, gets the values sent, not what
// was written after. 256 KiB per micro-batch goes by rendezvous, so the receiver reads the sender's
// buffer when it posts its receive.
TEST(Pipeline, DestroyingItAfterAFailedRunWaitsForTheSendsStillReadingItsReplicas) {
  if (world().size() != 2) GTEST_SKIP() << "run on 2 ranks";
  constexpr std::size_t rows = 256, cols = 256;
  constexpr int M = 3;
  std::vector<Echo> echoes(M);
  std::vector<nn::Module*> modules;
  for (auto& e : echoes) modules.push_back(&e);
  const auto x = filled(rows, cols, 3);
  auto pipe = std::make_unique<parallel::Pipeline>(world(), modules, parallel::Schedule::GPipe, M, rows, cols, cols);
  if (world().rank() == 0) {
    EXPECT_THROW_WITH(pipe->run(
                          [&](int m) -> View2D<const float> {
                            if (m == 2) throw std::runtime_error("no third micro-batch");
                            return x;
                          },
                          {}),
                      std::runtime_error, "no third micro-batch");
    pipe.reset();
    Kokkos::deep_copy(echoes[1].y, std::nanf(""));  // micro-batch 1's output, sent by the failed run
  } else {
    std::vector<float> received;
    EXPECT_THROW_WITH(pipe->run({},
                                [&](int m, const View2D<const float>& y, View2D<float>& dy) {
                                  if (m == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
                                  if (m == 1) {
                                    const auto h = test::host_copy(y);
                                    received.assign(h.data(), h.data() + h.size());
                                    throw std::runtime_error("stop after micro-batch 1");
                                  }
                                  nn::ensure_shape(dy, y.extent(0), y.extent(1), "dy");
                                  return 0.0;
                                }),
                      std::runtime_error, "stop after micro-batch 1");
    const auto sent = test::host_copy(x);
    ASSERT_EQ(received.size(), sent.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < received.size(); ++i) differ += received[i] != sent.data()[i];
    EXPECT_EQ(differ, 0u) << "micro-batch 1 arrived with " << differ << " of " << received.size()
                          << " values other than those sent (the sender's buffer was written after its run failed)";
  }
}
}  // namespace

// Through the trainer: stages on the pp axis of a dp x tp x pp mesh, with DDP or ZeRO on the
// dp axis, against one process on the same global batch.
namespace {
struct Layout {
  int tp, pp, zero;
  const char* schedule;
};

/// The layouts this world size can run (the list where it fits).
std::vector<Layout> layouts() {
  switch (world().size()) {
    case 2:
      return {{1, 2, 0, "gpipe"}, {1, 2, 0, "1f1b"}, {1, 2, 1, "1f1b"}, {1, 2, 2, "1f1b"}, {1, 2, 3, "gpipe"}};
    case 3:
      return {{1, 3, 0, "1f1b"}, {1, 3, 2, "gpipe"}};
    case 4:
      return {{1, 4, 0, "1f1b"}, {1, 4, 0, "gpipe"}, {1, 2, 0, "1f1b"}, {1, 2, 2, "1f1b"},
              {1, 2, 3, "1f1b"}, {2, 2, 0, "1f1b"},  {2, 2, 3, "gpipe"}};
    case 8:
      return {{2, 2, 2, "1f1b"}};
    default:
      return {};
  }
}

train::TrainConfig pp_config() {
  auto c = test::small_run(4, 12, 13);
  c.microbatches = 3;
  return c;
}

std::string label(const Layout& l) {
  return "tp " + std::to_string(l.tp) + " x pp " + std::to_string(l.pp) + ", zero " + std::to_string(l.zero) + ", " +
         l.schedule;
}

train::TrainConfig with(train::TrainConfig c, const Layout& l) {
  c.tp = l.tp;
  c.pp = l.pp;
  c.zero_stage = l.zero;
  c.schedule = l.schedule;
  return c;
}

TEST(PipelineTraining, SGDMatchesTheSingleProcessRunOnEveryLayout) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout for " << world().size() << " ranks here";
  auto c = pp_config();
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.9f;
  train::Trainer reference(c, test::self());
  reference.run();
  for (const auto& l : layouts()) {
    train::Trainer run(with(c, l), world());
    run.run();
    expect_blocks_match(reference, run, label(l));
  }
}

TEST(PipelineTraining, AdamWPerStepLossesAndGradientNormsMatchTheSingleProcessRun) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout for " << world().size() << " ranks here";
  for (const auto& l : layouts()) {
    auto c = pp_config();
    train::Trainer reference(c, test::self());
    train::Trainer run(with(c, l), world());
    for (int s = 0; s < 10; ++s) {
      const auto a = reference.step(), b = run.step();
      EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << label(l) << ", step " << s + 1;
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << label(l) << ", step " << s + 1;
      const int stage = world().rank() / (world().size() / l.pp);
      expect_in_flight(b.microbatches_in_flight, parallel::parse_schedule(l.schedule), 3, l.pp, stage,
                       label(l) + " on rank " + std::to_string(world().rank()));
      EXPECT_GE(b.bubble_fraction, 0.0);
      EXPECT_LT(b.bubble_fraction, 1.0);
    }
  }
}

TEST(PipelineTraining, AccumulationAndPipelineMicroBatchesTogether) {
  if (world().size() != 2) GTEST_SKIP() << "run on 2 ranks";
  auto c = pp_config();
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.global_batch = 48;
  c.steps = 4;
  train::Trainer reference(c, test::self());
  reference.run();
  c.accum = 2;
  c.pp = 2;
  c.microbatches = 4;
  train::Trainer run(c, world());
  run.run();
  expect_blocks_match(reference, run, "accum 2 x 4 micro-batches");
}

// The model's own checks are TrainConfig::validate()'s; a Trainer names first a layout that
// does not divide its ranks (tests of tensor parallelism and app_train_layout_*).
TEST(PipelineTraining, LayoutsThatCannotRunAreConfigErrors) {
  auto c = pp_config();
  c.pp = 5;  // 4 layers
  EXPECT_THROW_WITH(c.validate(), ConfigError, "needs at least 5 layers, one per stage");
  c.pp = 2;
  c.microbatches = 5;  // 24 samples do not cut into 5 micro-batches
  if (world().size() % 2 == 0) {
    EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "pipeline micro-batches");
  }
  c.microbatches = 2;
  c.tp = 2;
  c.layers = 6;  // stages of 3 layers would cut a column-row pair
  // 6 layers in 2 stages of 3; 4 and 7 (stages of 4 and 3, the last ending with an odd layer) fit.
  EXPECT_THROW_WITH(c.validate(), ConfigError,
                    "stage 1 of 2 would start at layer 3 of 6, inside a pair; choose --model.layers 4 or 7");
  if (world().size() % 4 == 0)
    EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "stage 1 of 2 would start at layer 3 of 6");
  c.tp = 1;
  c.layers = 4;
  c.schedule = "zigzag";
  EXPECT_THROW_WITH(c.validate(), ConfigError, "use 1f1b or gpipe");
  if (world().size() % 2 == 0) EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "use 1f1b or gpipe");
  if (world().size() % 2 == 1) {
    c.schedule = "1f1b";
    EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "ranks per model replica does not divide");
  }
}
}  // namespace

namespace {
/// What one rank holds of layer i of an L-layer, d-wide MLP split over t tensor-parallel
/// ranks: a column layer its block of rows and of the bias, a row layer its block of columns
/// and the whole bias, an odd last layer everything.
std::size_t held_of_layer(std::size_t i, std::size_t layers, std::size_t d, std::size_t t) {
  if (t == 1 || (i % 2 == 0 && i + 1 == layers)) return d * d + d;
  return i % 2 == 0 ? (d * d + d) / t : d * d / t + d;
}

TEST(PipelineTraining, ModelStateBytesAreExactOnEveryLayoutAndZeroStage) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout for " << world().size() << " ranks here";
  auto c = pp_config();
  c.steps = 1;
  c.dim = 16;  // divisible by the tensor-parallel groups
  for (const Layout& l : layouts())
    for (int zero = 0; zero <= 3; ++zero) {
      auto lc = with(c, l);
      lc.zero_stage = zero;
      train::Trainer run(lc, world());
      const auto m = run.step();
      const int dp = world().size() / (l.tp * l.pp), stage = world().rank() / dp / l.tp;
      const auto range = parallel::stage_layers(c.layers, l.pp, stage);
      std::size_t held = 0;
      for (std::size_t i = range.first; i < range.first + range.count; ++i)
        held += held_of_layer(i, c.layers, c.dim, static_cast<std::size_t>(l.tp));
      EXPECT_EQ(run.parameters().numel(), held) << label(l);
      const std::size_t shard = parallel::FlatPartition(held, dp, c.zero.align).size(run.data_parallel().rank());
      // AdamW: values, gradients and two moments, 4 bytes each, whole or this rank's shard.
      const std::size_t expected = zero == 0   ? 16 * held
                                   : zero == 1 ? 8 * held + 8 * shard
                                   : zero == 2 ? 4 * held + 12 * shard
                                               : 16 * shard;
      EXPECT_EQ(m.model_state_bytes, expected) << label(l) << ", zero stage " << zero << ", rank " << world().rank();
    }
}

// The memory check sizes the rank that needs the most, whichever stage it is in. Under
// tensor parallelism the last stage holds the model's odd last layer whole, which can be more
// than the first stage's column-row pairs cut tp ways (3 layers of 64, tp 4, pp 2: 66.6 kB of
// AdamW state against 34.0). Each stage's DDP model state (16 bytes a parameter, AdamW) is
// checked against what held_of_layer (checked against the ranks' stores above) says it holds,
// for every layout that validates, and the run's estimate is its largest stage's.
/// Floats per batch row that layer i keeps for backward, from the layers' shapes: a Linear
/// its output and its input gradient (a column layer's output a tp-th of the width, a row
/// layer's input gradient too, an odd last layer whole), the GELU after it (none after the
/// model's last layer) `gelu_buffers` of the Linear's output width.
double activations_of_layer(std::size_t i, std::size_t layers, std::size_t d, std::size_t t, double gelu_buffers) {
  const bool whole = t == 1 || (i % 2 == 0 && i + 1 == layers);
  const double in = whole || i % 2 == 0 ? double(d) : double(d) / double(t);
  const double out = whole || i % 2 == 1 ? double(d) : double(d) / double(t);
  return out + in + (i + 1 < layers ? gelu_buffers * out : 0);
}

TEST(PipelineTraining, MemoryEstimateSizesEveryStage) {
  auto c = pp_config();
  c.dim = 24;  // divisible by every tp below
  std::set<std::string> checked;
  for (int tp : {1, 2, 3, 4})
    for (int pp : {1, 2, 3})
      for (std::size_t layers = 1; layers <= 7; ++layers) {
        auto lc = c;
        lc.tp = tp;
        lc.pp = pp;
        lc.layers = layers;
        try {
          lc.validate();
        } catch (const ConfigError&) {
          continue;  // a layout no run can take
        }
        const std::string what =
            "tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + ", " + std::to_string(layers) + " layers";
        checked.insert(what);
        double largest = 0;
        for (int stage = 0; stage < pp; ++stage) {
          const auto range = parallel::stage_layers(layers, pp, stage);
          std::size_t held = 0;
          for (std::size_t i = range.first; i < range.first + range.count; ++i)
            held += held_of_layer(i, layers, lc.dim, static_cast<std::size_t>(tp));
          const auto e = lc.estimate_memory(tp * pp, stage);
          EXPECT_EQ(e.model, 16.0 * static_cast<double>(held)) << what << ", stage " << stage;
          // Activations: the stage's layers, and the batch's inputs, targets and loss
          // gradient, for the rows of one micro-step (one data-parallel rank here) and the
          // micro-batches in flight. At tp 4 they were counted at full width, 1.8x over.
          const double gelu_buffers = memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Host ? 3 : 2;
          double per_row = 3.0 * double(lc.dim);
          for (std::size_t i = range.first; i < range.first + range.count; ++i)
            per_row += activations_of_layer(i, layers, lc.dim, static_cast<std::size_t>(tp), gelu_buffers);
          const double in_flight =
              pp > 1 && lc.schedule == "1f1b" ? std::min(lc.microbatches, pp - stage) / double(lc.microbatches) : 1.0;
          const double rows = double(lc.global_batch) / double(lc.accum);
          EXPECT_DOUBLE_EQ(e.activations, rows * in_flight * 4.0 * per_row) << what << ", stage " << stage;
          largest = std::max(largest, e.total());
        }
        EXPECT_EQ(lc.estimate_memory(tp * pp).total(), largest) << what;
      }
  // Layouts a run can take must not have been skipped as invalid: one stage, a pipeline of
  // whole layers, a column-row pair per stage, and an odd last layer kept whole.
  for (const char* layout :
       {"tp 1 x pp 1, 1 layers", "tp 1 x pp 3, 7 layers", "tp 2 x pp 2, 4 layers", "tp 4 x pp 1, 3 layers"})
    EXPECT_EQ(checked.count(layout), 1u) << layout << " was not checked";
}
}  // namespace
