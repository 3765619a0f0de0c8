// Tensor parallelism proven against the whole model in one process: an MLP split over the
// ranks (column/row pairs) starts from exactly the blocks of the whole model's values, and
// computes the same outputs, the same gradients (block by block) and, over 10 SGD steps,
// the same parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <tessera/nn/layers.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using test::block_of;
using test::expect_blocks_match;
using test::host;
using test::world;

/// A model and its store: whole (tp nullptr) or split over `tp`.
struct Model {
  nn::ParameterStore store;
  std::unique_ptr<nn::MLP> mlp;
  Model(std::size_t layers, std::size_t dim, comm::Communicator* tp) {
    mlp = std::make_unique<nn::MLP>(store, layers, dim, "layers", tp);
    store.initialize(5);
  }
};

View2D<float> filled(std::size_t rows, std::size_t cols, std::uint64_t salt) {
  std::vector<float> v(rows * cols);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i + salt));
  return test::device_matrix(rows, cols, v);
}

constexpr std::size_t kDim = 12;  // divides by 1, 2, 3 and 4 ranks

TEST(TensorParallel, InitialValuesAreExactlyTheBlocksOfTheWholeModel) {
  for (std::size_t layers : {3u, 4u}) {
    Model whole(layers, kDim, nullptr), split(layers, kDim, &world());
    auto& ps = split.store.parameters();
    ASSERT_EQ(ps.size(), whole.store.parameters().size());
    std::size_t held = 0;
    for (auto& p : ps) {
      const auto want = block_of(p, host(whole.store.find(p.name).value));
      EXPECT_EQ(host(p.value), want) << p.name;
      held += p.numel;
    }
    if (world().size() > 1) {
      EXPECT_LT(held, whole.store.numel()) << "a split model holds less than the whole";
      EXPECT_EQ(ps.front().shard.parts, world().size());
    }
  }
}

TEST(TensorParallel, OutputsAndGradientsMatchTheWholeModel) {
  for (std::size_t layers : {1u, 2u, 3u, 4u}) {
    Model whole(layers, kDim, nullptr), split(layers, kDim, &world());
    const auto x = filled(6, kDim, 1), t = filled(6, kDim, 2);
    View2D<float> dy_whole, dy_split;
    const auto y_whole = whole.mlp->forward(x);
    const float loss_whole = nn::mse_loss(y_whole, t, dy_whole);
    whole.mlp->backward(dy_whole);
    const auto y_split = split.mlp->forward(x);
    const float loss_split = nn::mse_loss(y_split, t, dy_split);
    const auto dx_split = split.mlp->backward(dy_split);
    EXPECT_NEAR(loss_split, loss_whole, 1e-6 * std::fabs(loss_whole)) << layers << " layers";
    const auto a = test::host_copy(y_whole), b = test::host_copy(y_split);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.extent(0); ++i)
      for (std::size_t j = 0; j < a.extent(1); ++j) EXPECT_NEAR(b(i, j), a(i, j), 1e-5) << layers << " layers";
    for (auto& p : split.store.parameters())
      test::expect_same_parameters(block_of(p, host(whole.store.find(p.name).grad)), host(p.grad), 1e-5,
                                   std::to_string(layers) + " layers, gradient of " + p.name);
    EXPECT_EQ(dx_split.extent(1), kDim) << "the input gradient is whole on every rank";
  }
}

TEST(TensorParallel, TenSGDStepsEndWithTheWholeModelsParameters) {
  for (std::size_t layers : {3u, 4u}) {
    Model whole(layers, kDim, nullptr), split(layers, kDim, &world());
    optim::SGD sgd_whole(whole.store.values(), whole.store.grads(), {0.1f, 0.9f, 0.0f});
    optim::SGD sgd_split(split.store.values(), split.store.grads(), {0.1f, 0.9f, 0.0f});
    const auto t = filled(8, kDim, 3);
    for (int step = 0; step < 10; ++step) {
      const auto x = filled(8, kDim, 10 + static_cast<std::uint64_t>(step));
      for (Model* m : {&whole, &split}) {
        View2D<float> dy;
        m->store.zero_grad();
        nn::mse_loss(m->mlp->forward(x), t, dy);
        m->mlp->backward(dy);
        m->store.settle_grads();
      }
      sgd_whole.step();
      sgd_split.step();
    }
    Model start(layers, kDim, nullptr);
    double moved = 0;
    const auto before = host(start.store.values()), after = host(whole.store.values());
    for (std::size_t i = 0; i < before.size(); ++i) moved = std::max(moved, std::fabs(double(before[i]) - after[i]));
    EXPECT_GT(moved, 1e-3) << "the steps must change the parameters, or the comparison proves nothing";
    for (auto& p : split.store.parameters())
      test::expect_same_parameters(block_of(p, host(whole.store.find(p.name).value)), host(p.value), 1e-5,
                                   std::to_string(layers) + " layers, " + p.name);
  }
}

TEST(TensorParallel, AWidthTheRanksDoNotDivideIsAConfigError) {
  const int t = world().size();
  if (t == 1) GTEST_SKIP() << "one rank splits nothing";
  nn::ParameterStore store;
  EXPECT_THROW_WITH(nn::MLP(store, 2, static_cast<std::size_t>(2 * t + 1), "layers", &world()), ConfigError,
                    "does not divide by " + std::to_string(t));
}
}  // namespace

// Through the trainer: a dp x tp mesh, with DDP or ZeRO on the dp axis, against one process.
namespace {
train::TrainConfig tp_config(std::size_t layers) { return test::small_run(layers, kDim, 3); }

/// Tensor-parallel group sizes this world can form (besides 1).
std::vector<int> tp_sizes() {
  std::vector<int> out;
  for (int t : {2, 4})
    if (world().size() % t == 0) out.push_back(t);
  return out;
}

std::string label(std::size_t layers, int t, int stage) {
  return std::to_string(layers) + " layers, tp " + std::to_string(t) + ", zero " + std::to_string(stage);
}

TEST(TensorParallelTraining, SGDMatchesTheSingleProcessRunWithDDPAndEveryZeROStage) {
  if (tp_sizes().empty()) GTEST_SKIP() << "no tensor-parallel group divides " << world().size() << " ranks";
  for (std::size_t layers : {3u, 4u}) {
    auto c = tp_config(layers);
    c.optimizer = "sgd";
    c.lr = 0.05f;
    c.momentum = 0.9f;
    train::Trainer reference(c, test::self());
    reference.run();
    for (int t : tp_sizes())
      for (int stage = 0; stage <= 3; ++stage) {
        auto run_config = c;
        run_config.tp = t;
        run_config.zero_stage = stage;
        train::Trainer run(run_config, world());
        run.run();
        expect_blocks_match(reference, run, label(layers, t, stage));
      }
  }
}

TEST(TensorParallelTraining, AdamWPerStepLossesAndGradientNormsMatchTheSingleProcessRun) {
  if (tp_sizes().empty()) GTEST_SKIP() << "no tensor-parallel group divides " << world().size() << " ranks";
  for (std::size_t layers : {3u, 4u})
    for (int t : tp_sizes())
      for (int stage : {0, 3}) {
        auto c = tp_config(layers);
        train::Trainer reference(c, test::self());
        c.tp = t;
        c.zero_stage = stage;
        train::Trainer run(c, world());
        for (int s = 0; s < 10; ++s) {
          const auto a = reference.step(), b = run.step();
          EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << label(layers, t, stage) << ", step " << s + 1;
          // Parameters every rank of a group holds whole (the row layers' biases, an odd last
          // layer) count once in the norm.
          EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << label(layers, t, stage) << ", step " << s + 1;
          if (t > 1) {
            EXPECT_GT(b.tp_comm_bytes, 0.0);
          }
        }
      }
}

TEST(TensorParallelTraining, ModelStateBytesAreThoseOfTheHeldBlocks) {
  if (tp_sizes().empty()) GTEST_SKIP() << "no tensor-parallel group divides " << world().size() << " ranks";
  for (int t : tp_sizes()) {
    auto c = tp_config(3);  // one column-row pair and a whole last layer
    c.tp = t;
    c.steps = 1;
    const std::size_t d = kDim, held = (d * d + d) / t + d * d / t + d + (d * d + d);
    for (int stage : {0, 3}) {
      c.zero_stage = stage;
      train::Trainer run(c, world());
      const auto m = run.step();
      EXPECT_EQ(run.parameters().numel(), held);
      const int dp = world().size() / t;
      const std::size_t shard = parallel::FlatPartition(held, dp, c.zero.align).size(run.data_parallel().rank());
      EXPECT_EQ(m.model_state_bytes, stage == 0 ? 16 * held : 16 * shard) << "tp " << t << ", zero " << stage;
    }
  }
}

TEST(TensorParallelTraining, LayoutsThatCannotRunAreConfigErrors) {
  auto c = tp_config(2);
  c.tp = world().size() + 1;
  c.dim = kDim * static_cast<std::size_t>(c.tp);  // a width the group would divide
  EXPECT_THROW_WITH(
      train::Trainer(c, world()), ConfigError,
      "does not divide the " + std::to_string(world().size()) + (world().size() == 1 ? " rank into" : " ranks into"));
  // Where both are wrong, the ranks are said first: a width the group divides would not help.
  c.dim = 10 * static_cast<std::size_t>(c.tp) + 1;
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "does not divide the " + std::to_string(world().size()));
  c.tp = 4;
  c.dim = 10;
  EXPECT_THROW_WITH(c.validate(), ConfigError, "10 does not divide by 4; choose --model.dim divisible by 4");
  // The sizes that would fit, the ranks' too where they are known; with a data file, whose
  // width --model.dim must be, the way to change the width (it advised --model.dim 12, and
  // then the file's 10).
  EXPECT_THROW_WITH(c.validate(), ConfigError, "divisible by 4, or a --parallel.tp that divides 10: 2, 5, 10");
  c.data = "digits.h5";
  EXPECT_THROW_WITH(c.validate(8), ConfigError,
                    "--parallel.tp 4 cuts every layer's 10 features into equal blocks, and 10 does not divide by 4; "
                    "choose --model.dim divisible by 4 (padding the data file's columns with zeros), or a "
                    "--parallel.tp that divides 10 and the 8 ranks: 2");
  c.data = "synthetic";
  if (world().size() % 4 == 0)
    EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError,
                      "10 does not divide by 4; choose --model.dim divisible by 4");
  // Sizes that fit the ranks a pipeline leaves each stage: 12 ranks over 2 stages take tp 2,
  // not 4 (which divides 12, and was advised).
  c.tp = 3;
  c.pp = 2;
  c.layers = 4;
  c.dim = 20;
  try {
    c.validate(12);
    ADD_FAILURE() << "a width of 20 was taken with --parallel.tp 3";
  } catch (const ConfigError& e) {
    const std::string want = "or a --parallel.tp that divides 20 and the 12 ranks over --parallel.pp 2: 2";
    EXPECT_EQ(e.message().substr(e.message().size() - std::min(e.message().size(), want.size())), want) << e.message();
  }
}

TEST(TensorParallelTraining, TheLayoutNamesEachGroupsRanks) {
  if (world().size() != 4) GTEST_SKIP() << "the layout checked is that of 4 ranks";
  auto c = tp_config(2);
  c.tp = 2;
  train::Trainer run(c, world());
  EXPECT_EQ(run.layout(), "dp 2 x tp 2: tensor-parallel groups {0,1} {2,3}; data-parallel groups {0,2} {1,3}");
  EXPECT_EQ(run.data_parallel().size(), 2);
}
}  // namespace
