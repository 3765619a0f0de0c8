// The model layer on one process: counter-based initialisation, GEMM, modules' backward
// passes against finite differences, losses, and the optimizers against their published
// update rules written out in scalar double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <tessera/core/rng.hpp>
#include <tessera/nn/layers.hpp>
#include <tessera/optim/optimizer.hpp>

#include "kernels/fast_math.hpp"
#include "kernels/gemm.hpp"
#include "test_support.hpp"

namespace {
using namespace tessera;

TEST(Philox, MatchesRandom123KnownAnswers) {
  auto a = Philox4x32::generate(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  auto b = Philox4x32::generate(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  auto c = Philox4x32::generate(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
}

std::vector<float> host(const View1D<float>& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  return std::vector<float>(h.data(), h.data() + h.size());
}

TEST(Init, ValuesDependOnlyOnSeedNameAndIndex) {
  nn::ParameterStore a, b;
  a.add("layers.0.weight", {16, 8}, nn::Init::uniform(0.5f));
  b.add("other", {3}, nn::Init::uniform(1.0f));  // shifts every offset in b
  b.add("layers.0.weight", {16, 8}, nn::Init::uniform(0.5f));
  a.initialize(42);
  b.initialize(42);
  const auto va = host(a.find("layers.0.weight").value), vb = host(b.find("layers.0.weight").value);
  EXPECT_EQ(va, vb);
  double mean = 0;
  for (float x : va) {
    EXPECT_GE(x, -0.5f);
    EXPECT_LT(x, 0.5f);
    mean += x;
  }
  EXPECT_LT(std::fabs(mean / static_cast<double>(va.size())), 0.1);
  nn::ParameterStore c;
  c.add("layers.0.weight", {16, 8}, nn::Init::uniform(0.5f));
  c.initialize(43);
  EXPECT_NE(host(c.find("layers.0.weight").value), va) << "another seed must give other values";
  EXPECT_NE(stream_key(42, "layers.0.weight"), stream_key(42, "layers.1.weight"));
}

View2D<float> random_matrix(std::size_t r, std::size_t c, unsigned seed, float scale = 1.0f) {
  View2D<float> m("m", r, c);
  auto h = Kokkos::create_mirror_view(m);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) h(i, j) = d(gen);
  Kokkos::deep_copy(m, h);
  return m;
}

TEST(Gemm, AllTransposeCombinationsMatchANaiveLoop) {
  using kernels::Trans;
  for (Trans ta : {Trans::No, Trans::Yes}) {
    for (Trans tb : {Trans::No, Trans::Yes}) {
      const std::size_t m = 5, n = 7, k = 3;
      auto a = ta == Trans::No ? random_matrix(m, k, 1) : random_matrix(k, m, 1);
      auto b = tb == Trans::No ? random_matrix(k, n, 2) : random_matrix(n, k, 2);
      auto c = random_matrix(m, n, 3);
      auto c0 = Kokkos::create_mirror(c);
      Kokkos::deep_copy(c0, c);
      kernels::gemm(ta, tb, 2.0f, a, b, 0.5f, c);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::size_t l = 0; l < k; ++l)
            s += static_cast<double>(ta == Trans::No ? a(i, l) : a(l, i)) * (tb == Trans::No ? b(l, j) : b(j, l));
          EXPECT_NEAR(c(i, j), 2.0 * s + 0.5 * c0(i, j), 1e-5);
        }
      }
    }
  }
  View2D<float> wrong("w", 2, 2), x("x", 3, 3), y("y", 2, 3);
  EXPECT_THROW_WITH(kernels::gemm(kernels::Trans::No, kernels::Trans::No, 1, wrong, x, 0, y), Error,
                    "shapes do not match");
}

/// loss(out) = sum(w * out): dL/dout = w. Checks a module's backward against central
/// differences of that loss with respect to its input and every parameter.
void check_gradients(nn::Module& module, nn::ParameterStore& store, View2D<float> x, std::size_t out_cols) {
  auto w = random_matrix(x.extent(0), out_cols, 99);
  auto loss = [&]() {
    auto y = module.forward(x);
    double s = 0;
    for (std::size_t i = 0; i < y.extent(0); ++i)
      for (std::size_t j = 0; j < y.extent(1); ++j) s += static_cast<double>(w(i, j)) * y(i, j);
    return s;
  };
  store.zero_grad();
  module.forward(x);
  auto dx = module.backward(w);
  View2D<float> dx_copy("dx", dx.extent(0), dx.extent(1));
  Kokkos::deep_copy(dx_copy, dx);
  const float h = 1e-2f;
  auto compare = [&](float* value, double analytic, const std::string& what) {
    const float saved = *value;
    *value = saved + h;
    const double up = loss();
    *value = saved - h;
    const double down = loss();
    *value = saved;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << what;
  };
  for (std::size_t i = 0; i < x.extent(0); ++i)
    for (std::size_t j = 0; j < x.extent(1); ++j)
      compare(&x(i, j), dx_copy(i, j), "d/dx(" + std::to_string(i) + "," + std::to_string(j) + ")");
  for (auto& p : store.parameters())
    for (std::size_t i = 0; i < p.numel; ++i) compare(&p.value(i), p.grad(i), p.name + "[" + std::to_string(i) + "]");
}

TEST(GradientCheck, Linear) {
  nn::ParameterStore store;
  nn::Linear lin(store, "fc", 4, 3);
  store.initialize(1);
  check_gradients(lin, store, random_matrix(5, 4, 7), 3);
}

TEST(GradientCheck, GELU) {
  nn::ParameterStore store;
  nn::GELU gelu;
  check_gradients(gelu, store, random_matrix(4, 6, 8, 3.0f), 6);
}

// GELU's exp and erf are written out so that they vectorize; they must still be the
// functions they claim to be, to float accuracy, everywhere (not just where GELU lives).
TEST(FastMath, ExpIsWithinAFewUlpsOfTheDoubleFunction) {
  double worst = 0;
  for (float x = -87.3f; x < 88.7f; x += 7.1e-4f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(kernels::fast_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // 2.5 ulp at 2^-23
  EXPECT_EQ(kernels::fast_exp(0.0f), 1.0f);
  EXPECT_EQ(kernels::fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(kernels::fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(kernels::fast_exp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(kernels::fast_exp(std::nanf(""))));
}

TEST(FastMath, ErfIsWithinFloatAccuracyOfTheDoubleFunction) {
  double worst_abs = 0, worst_rel_near_zero = 0;
  for (float x = -9.0f; x < 9.0f; x += 3.3e-4f) {
    const double want = std::erf(static_cast<double>(x));
    const double err = std::fabs(kernels::fast_erf(x) - want);
    worst_abs = std::max(worst_abs, err);
    if (std::fabs(x) < 0.5f && x != 0.0f) worst_rel_near_zero = std::max(worst_rel_near_zero, err / std::fabs(want));
  }
  EXPECT_LT(worst_abs, 5e-7);
  EXPECT_LT(worst_rel_near_zero, 1e-6);
  EXPECT_EQ(kernels::fast_erf(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(kernels::fast_erf(1e-20f), 1.1283792e-20f);  // no cancellation near zero
  EXPECT_EQ(kernels::fast_erf(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(kernels::fast_erf(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(kernels::fast_erf(std::nanf(""))));
}

TEST(GELU, ForwardIsXTimesTheNormalCdfInDouble) {
  const std::size_t rows = 37, cols = 129;  // lengths that leave a vector remainder
  auto x = random_matrix(rows, cols, 11, 6.0f);
  nn::GELU gelu;
  auto y = gelu.forward(x);
  auto hx = Kokkos::create_mirror_view(x);
  auto hy = Kokkos::create_mirror_view(y);
  Kokkos::deep_copy(hx, x);
  Kokkos::deep_copy(hy, y);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      const double v = hx(i, j);
      const double want = v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
      ASSERT_NEAR(hy(i, j), want, 1e-6 * std::max(1.0, std::fabs(v))) << "at x = " << v;
    }
}

TEST(GELU, BackwardRejectsAGradientOfAnotherShape) {
  nn::GELU gelu;
  gelu.forward(random_matrix(4, 6, 1));
  EXPECT_THROW_WITH(gelu.backward(random_matrix(4, 5, 2)), ConfigError, "but forward saw 4x6");
}

TEST(GradientCheck, MLPWithThreeLayers) {
  nn::ParameterStore store;
  nn::MLP mlp(store, 3, 4);
  store.initialize(5);
  EXPECT_EQ(store.parameters().size(), 6u);
  EXPECT_EQ(store.parameters().back().name, "layers.2.bias");
  check_gradients(mlp, store, random_matrix(3, 4, 9), 4);
}

TEST(GradientCheck, MLPReportsGradientsInReverseLayerOrder) {
  nn::ParameterStore store;
  nn::MLP mlp(store, 3, 4);
  store.initialize(5);
  std::vector<std::string> order;
  mlp.set_grad_ready_hook([&](nn::Parameter& p) { order.push_back(p.name); });
  auto x = random_matrix(2, 4, 1);
  mlp.forward(x);
  mlp.backward(random_matrix(2, 4, 2));
  EXPECT_EQ(order, (std::vector<std::string>{"layers.2.weight", "layers.2.bias", "layers.1.weight", "layers.1.bias",
                                             "layers.0.weight", "layers.0.bias"}));
}

/// Central differences of a loss with respect to its input.
template <class LossFn>
void check_loss(LossFn fn, View2D<float> y) {
  View2D<float> dy;
  fn(y, dy);
  View2D<float> analytic("a", dy.extent(0), dy.extent(1));
  Kokkos::deep_copy(analytic, dy);
  const float h = 1e-2f;
  for (std::size_t i = 0; i < y.extent(0); ++i) {
    for (std::size_t j = 0; j < y.extent(1); ++j) {
      const float saved = y(i, j);
      View2D<float> scratch;
      y(i, j) = saved + h;
      const double up = fn(y, scratch);
      y(i, j) = saved - h;
      const double down = fn(y, scratch);
      y(i, j) = saved;
      EXPECT_NEAR(analytic(i, j), (up - down) / (2 * h), 2e-3);
    }
  }
}

TEST(Loss, MeanSquaredErrorValueAndGradient) {
  View2D<float> y("y", 1, 2), t("t", 1, 2), dy;
  y(0, 0) = 1;
  y(0, 1) = 3;
  t(0, 0) = 0;
  t(0, 1) = 1;
  EXPECT_FLOAT_EQ(nn::mse_loss(y, t, dy), (1.0f + 4.0f) / 2.0f);
  EXPECT_FLOAT_EQ(dy(0, 1), 2.0f * 2.0f / 2.0f);
  auto target = random_matrix(3, 4, 4);
  check_loss([&](View2D<float> v, View2D<float>& g) { return nn::mse_loss(v, target, g); }, random_matrix(3, 4, 5));
}

TEST(Loss, CrossEntropyValueGradientAndBadLabels) {
  View2D<float> logits("l", 2, 4), dy;
  View1D<std::int64_t> labels("labels", 2);
  labels(0) = 1;
  labels(1) = 3;
  EXPECT_NEAR(nn::cross_entropy_loss(logits, labels, dy), std::log(4.0), 1e-6);  // uniform logits
  check_loss([&](View2D<float> v, View2D<float>& g) { return nn::cross_entropy_loss(v, labels, g); },
             random_matrix(2, 4, 6, 2.0f));
  labels(1) = 4;
  EXPECT_THROW_WITH(nn::cross_entropy_loss(logits, labels, dy), ConfigError, "1 label(s) outside [0, 4)");
}

TEST(Optimizers, SGDWithMomentumFollowsTorchRule) {
  View1D<float> p("p", 3), g("g", 3);
  const double p0[3] = {1.0, -2.0, 0.5}, grads[3][3] = {{0.1, -0.2, 0.3}, {0.05, 0.0, -0.1}, {-0.3, 0.2, 0.1}};
  for (int i = 0; i < 3; ++i) p(i) = static_cast<float>(p0[i]);
  optim::SGD sgd(p, g, {0.1f, 0.9f, 0.01f});
  double ref[3] = {p0[0], p0[1], p0[2]}, buf[3] = {0, 0, 0};
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 3; ++i) g(i) = static_cast<float>(grads[t][i]);
    sgd.step();
    for (int i = 0; i < 3; ++i) {
      const double d = grads[t][i] + 0.01 * ref[i];
      buf[i] = t == 0 ? d : 0.9 * buf[i] + d;
      ref[i] -= 0.1 * buf[i];
      EXPECT_NEAR(p(i), ref[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(sgd.state_bytes(), 3 * sizeof(float));
}

TEST(Optimizers, AdamWFollowsTorchRuleAndDefaults) {
  View1D<float> p("p", 2), g("g", 2);
  p(0) = 1.0f;
  p(1) = -0.5f;
  optim::AdamW adam(p, g);  // PyTorch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01
  double ref[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  const double grads[4][2] = {{0.5, -1.0}, {0.1, 0.2}, {-0.3, 0.0}, {2.0, -0.01}};
  for (int t = 1; t <= 4; ++t) {
    g(0) = static_cast<float>(grads[t - 1][0]);
    g(1) = static_cast<float>(grads[t - 1][1]);
    adam.step();
    for (int i = 0; i < 2; ++i) {
      ref[i] *= 1 - 1e-3 * 0.01;
      m[i] = 0.9 * m[i] + 0.1 * grads[t - 1][i];
      v[i] = 0.999 * v[i] + 0.001 * grads[t - 1][i] * grads[t - 1][i];
      const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= 1e-3 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(p(i), ref[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(adam.state_bytes(), 2 * 2 * sizeof(float));
  EXPECT_THROW_WITH(optim::AdamW(p, g, {1e-3f, 1.0f, 0.999f, 1e-8f, 0.01f}), ConfigError, "betas in [0, 1)");
}
TEST(Optimizers, UpdatingRangesInAnyOrderEqualsOneWholeStep) {
  const std::size_t n = 1000;
  for (int which = 0; which < 2; ++which) {
    View1D<float> p1("p1", n), g("g", n), p2("p2", n);
    for (std::size_t i = 0; i < n; ++i) {
      p1(i) = p2(i) = std::sin(static_cast<float>(i));
      g(i) = std::cos(static_cast<float>(i) * 0.7f);
    }
    std::unique_ptr<optim::Optimizer> whole, ranged;
    if (which == 0) {
      whole = std::make_unique<optim::AdamW>(p1, g);
      ranged = std::make_unique<optim::AdamW>(p2, g);
    } else {
      whole = std::make_unique<optim::SGD>(p1, g, optim::SGDOptions{0.1f, 0.9f, 0.0f});
      ranged = std::make_unique<optim::SGD>(p2, g, optim::SGDOptions{0.1f, 0.9f, 0.0f});
    }
    for (int step = 0; step < 3; ++step) {
      whole->step();
      ranged->begin_step();
      ranged->update(700, 300);  // reverse order, uneven ranges, like gradient buckets
      ranged->update(100, 600);
      ranged->update(0, 100);
    }
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(p1(i), p2(i)) << ranged->name() << " element " << i;
  }
}
}  // namespace
