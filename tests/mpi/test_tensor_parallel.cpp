// Tensor parallelism proven against the whole model in one process: an MLP split over the
// ranks (column/row pairs) starts from exactly the blocks of the whole model's values, and
// computes the same outputs, the same gradients (block by block) and, over 10 SGD steps,
// the same parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <tessera/nn/layers.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/tessera.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using test::world;

std::vector<float> host(const View1D<float>& v) {
  const auto h = test::host_copy(v);
  return std::vector<float>(h.data(), h.data() + h.size());
}

/// The block `p` holds, cut out of the whole tensor's values `whole` (row-major, p.shape).
std::vector<float> block_of(const nn::Parameter& p, const std::vector<float>& whole) {
  if (p.shard.parts == 1) return whole;
  const auto held = p.held_shape();
  std::vector<float> out;
  if (p.shape.size() == 1) {
    const auto n = static_cast<std::size_t>(held[0]), at = n * static_cast<std::size_t>(p.shard.index);
    return std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(at),
                              whole.begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  const auto rows = static_cast<std::size_t>(held[0]), cols = static_cast<std::size_t>(held[1]);
  const auto all_cols = static_cast<std::size_t>(p.shape[1]);
  const std::size_t r0 = p.shard.axis == 0 ? rows * static_cast<std::size_t>(p.shard.index) : 0;
  const std::size_t c0 = p.shard.axis == 1 ? cols * static_cast<std::size_t>(p.shard.index) : 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out.push_back(whole[(r0 + r) * all_cols + c0 + c]);
  return out;
}

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

void expect_close(const std::vector<float>& want, const std::vector<float>& got, double rel, const std::string& what) {
  test::expect_same_parameters(want, got, rel, what);
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
      expect_close(block_of(p, host(whole.store.find(p.name).grad)), host(p.grad), 1e-5,
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
      expect_close(block_of(p, host(whole.store.find(p.name).value)), host(p.value), 1e-5,
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
