// The model layer on one process: counter-based initialisation, GEMM, modules' backward
// passes against finite differences, losses, and the optimizers against their published
// update rules written out in scalar double precision. Every view is read and written
// through host copies, so the same tests check a CUDA build's kernels on its GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tessera/core/rng.hpp>
#include <tessera/nn/layers.hpp>
#include <tessera/optim/optimizer.hpp>

#include "kernels/fast_math.hpp"
#include "kernels/gelu_kernels.hpp"
#include "kernels/gemm.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/side_queue.hpp"
#include "test_support.hpp"

namespace {
using namespace tessera;
using test::device_array;
using test::device_matrix;
using test::host;
using test::host_copy;

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
      const auto ha = host_copy(a), hb = host_copy(b), c0 = host_copy(c);
      kernels::gemm(ta, tb, 2.0f, a, b, 0.5f, c);
      const auto hc = host_copy(c);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::size_t l = 0; l < k; ++l)
            s += static_cast<double>(ta == Trans::No ? ha(i, l) : ha(l, i)) * (tb == Trans::No ? hb(l, j) : hb(j, l));
          EXPECT_NEAR(hc(i, j), 2.0 * s + 0.5 * c0(i, j), 1e-5);
        }
      }
      // beta 0 writes C without reading it: garbage (here NaN) in C must not show through.
      Kokkos::deep_copy(c, std::nanf(""));
      kernels::gemm(ta, tb, 1.0f, a, b, 0.0f, c);
      const auto fresh = host_copy(c);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) EXPECT_NEAR(fresh(i, j), (hc(i, j) - 0.5 * c0(i, j)) / 2.0, 1e-5);
    }
  }
  View2D<float> wrong("w", 2, 2), x("x", 3, 3), y("y", 2, 3);
  EXPECT_THROW_WITH(kernels::gemm(kernels::Trans::No, kernels::Trans::No, 1, wrong, x, 0, y), Error,
                    "shapes do not match");
}

// A product over no terms (k = 0: a weight gradient over a batch of no rows) is beta C, as
// BLAS defines it, with C's old contents (NaN) not read where beta is 0; gemm_bias gives the
// bias in every row. An empty C (m or n = 0) is left alone. Both come to BLAS and cuBLAS
// with leading dimensions of at least 1, or cuBLAS refuses the call.
TEST(Gemm, AProductOverNoTermsIsBetaTimesCAndAnEmptyCIsLeftAlone) {
  using kernels::BiasAdd;
  using kernels::Trans;
  const std::size_t m = 4, n = 3;
  auto bias = random_matrix(1, n, 6);
  const auto hbias = host_copy(bias);
  for (Trans ta : {Trans::No, Trans::Yes}) {
    for (Trans tb : {Trans::No, Trans::Yes}) {
      const std::string what =
          std::string("ta ") + (ta == Trans::Yes ? "T" : "N") + ", tb " + (tb == Trans::Yes ? "T" : "N");
      const View2D<float> a = ta == Trans::No ? View2D<float>("a", m, 0) : View2D<float>("a", 0, m);
      const View2D<float> b = tb == Trans::No ? View2D<float>("b", 0, n) : View2D<float>("b", n, 0);
      auto c = random_matrix(m, n, 5);
      const auto c0 = host_copy(c);
      kernels::gemm(ta, tb, 2.0f, a, b, 0.5f, c);
      auto hc = host_copy(c);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(hc(i, j), 0.5f * c0(i, j)) << what;
      Kokkos::deep_copy(c, std::nanf(""));
      kernels::gemm(ta, tb, 1.0f, a, b, 0.0f, c);
      hc = host_copy(c);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(hc(i, j), 0.0f) << what << ": beta 0 must not read C";
      for (BiasAdd how : {BiasAdd::Epilogue, BiasAdd::Separate}) {
        Kokkos::deep_copy(c, std::nanf(""));
        EXPECT_FALSE(kernels::gemm_bias(ta, tb, a, b, View1D<const float>(bias.data(), n), c, how))
            << what << ": cuBLASLt's epilogue takes no product over no terms";
        hc = host_copy(c);
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j)
            EXPECT_EQ(hc(i, j), hbias(0, j)) << what << " at (" << i << ", " << j << ")";
      }
    }
  }
  // Empty C: no rows, then no columns.
  const auto a = random_matrix(m, 2, 7), b = random_matrix(2, n, 8);
  View2D<float> no_rows("c", 0, n), no_columns("c", m, 0);
  EXPECT_NO_THROW(kernels::gemm(Trans::No, Trans::No, 1.0f, View2D<float>("a", 0, 2), b, 0.0f, no_rows));
  EXPECT_NO_THROW(kernels::gemm(Trans::No, Trans::No, 1.0f, a, View2D<float>("b", 2, 0), 0.0f, no_columns));
  EXPECT_FALSE(kernels::gemm_bias(Trans::No, Trans::No, View2D<float>("a", 0, 2), b,
                                  View1D<const float>(bias.data(), n), no_rows, BiasAdd::Auto));
}

// Work queued on the side queue after follow_default() starts after everything queued on the
// default queue before it. On a GPU the side queue is a CUDA stream of its own: a copy queued
// there without that wait reads C while the GEMM (about 0.3 ms on an H100) still writes it,
// and C starts as NaN each round. On the host both are one queue, in order.
TEST(SideQueue, WorkQueuedAfterFollowingTheDefaultQueueSeesItsResults) {
  using kernels::Trans;
  const std::size_t n = test::device_build() ? 2048 : 64;
  const auto a = random_matrix(n, n, 21), b = random_matrix(n, n, 22);
  View2D<float> c("c", n, n), copy("copy", n, n);
  kernels::SideQueue side;
  for (int round = 0; round < 3; ++round) {
    Kokkos::deep_copy(c, std::nanf(""));
    Kokkos::deep_copy(copy, 0.0f);
    kernels::gemm(Trans::No, Trans::No, 1.0f, a, b, 0.0f, c);  // queued on the default queue
    side.follow_default();
    Kokkos::deep_copy(side.space(), copy, c);
    side.space().fence();
    Kokkos::fence();
    const auto hc = host_copy(c), hcopy = host_copy(copy);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) differ += !(hcopy(i, j) == hc(i, j));
    EXPECT_EQ(differ, 0u) << "round " << round << ": the side queue's copy of C differs from C in " << differ << " of "
                          << n * n << " elements";
    EXPECT_FALSE(std::isnan(hc(n - 1, n - 1)));
  }
}

// Column slices of wider matrices are row-major views whose rows lie further apart than
// their width: the GEMM must read and write them at that pitch (it passed the width, and read
// the wrong elements), and leave C's other columns alone.
// An extent past a BLAS int is refused before any call (BLAS would read it as negative or
// wrapped). The views hold no memory: nothing is read before the check.
TEST(Gemm, ExtentsPastABlasIntAreRefused) {
  const std::size_t rows = std::size_t(1) << 31;
  const View2D<const float> tall(static_cast<const float*>(nullptr), rows, 1);
  View2D<float> out(static_cast<float*>(nullptr), rows, 1);
  const View2D<const float> one(static_cast<const float*>(nullptr), 1, 1);
  EXPECT_THROW_WITH(kernels::gemm(kernels::Trans::No, kernels::Trans::No, 1, tall, one, 0, out), Error,
                    "a matrix extent 2147483648 exceeds the largest a BLAS call takes (2147483647)");
}

TEST(Gemm, ColumnSlicesOfWiderMatricesAreReadAtTheirRowPitch) {
  using kernels::BiasAdd;
  using kernels::Trans;
  const std::size_t m = 4, n = 5, k = 3;
  // Columns [at, at + width) of a matrix `extra` columns wider on each side.
  const auto slice = [](const View2D<float>& wide, std::size_t at, std::size_t width) {
    return View2D<float>(Kokkos::subview(wide, Kokkos::ALL, std::make_pair(at, at + width)));
  };
  for (Trans ta : {Trans::No, Trans::Yes}) {
    for (Trans tb : {Trans::No, Trans::Yes}) {
      for (bool with_bias : {false, true}) {
        const std::size_t ar = ta == Trans::No ? m : k, ac = ta == Trans::No ? k : m;
        const std::size_t br = tb == Trans::No ? k : n, bc = tb == Trans::No ? n : k;
        auto wa = random_matrix(ar, ac + 3, 11), wb = random_matrix(br, bc + 2, 12), wc = random_matrix(m, n + 2, 13);
        auto bias = random_matrix(1, n, 14);
        const View2D<const float> a = slice(wa, 2, ac), b = slice(wb, 1, bc);
        const View2D<float> c = slice(wc, 1, n);
        ASSERT_EQ(a.stride(0), ac + 3) << "the slice must be padded, or this test proves nothing";
        const auto ha = host_copy(wa), hb = host_copy(wb), c0 = host_copy(wc), hbias = host_copy(bias);
        if (with_bias)
          kernels::gemm_bias(ta, tb, a, b, View1D<const float>(bias.data(), n), c, BiasAdd::Separate);
        else
          kernels::gemm(ta, tb, 1.0f, a, b, 0.0f, c);
        const auto hc = host_copy(wc);
        const std::string what = std::string("ta ") + (ta == Trans::Yes ? "T" : "N") + ", tb " +
                                 (tb == Trans::Yes ? "T" : "N") + (with_bias ? ", gemm_bias" : ", gemm");
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t j = 0; j < n + 2; ++j) {
            if (j < 1 || j > n) {
              EXPECT_EQ(hc(i, j), c0(i, j)) << what << ": a column outside the slice was written";
              continue;
            }
            double s = with_bias ? hbias(0, j - 1) : 0.0;
            for (std::size_t l = 0; l < k; ++l)
              s += static_cast<double>(ta == Trans::No ? ha(i, 2 + l) : ha(l, 2 + i)) *
                   (tb == Trans::No ? hb(l, 1 + j - 1) : hb(j - 1, 1 + l));
            EXPECT_NEAR(hc(i, j), s, 1e-5) << what << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// A parameter added after shard() lay outside the cut owned range (initialize() then wrote
// past the buffer), and a negative dimension became a huge size_t.
TEST(ParameterStore, RefusesAParameterAfterShardAndANegativeDimension) {
  nn::ParameterStore store;
  EXPECT_THROW_WITH(store.add("neg", {-3, 4}, nn::Init::uniform(0.1f)), ConfigError,
                    "parameter 'neg': dimension 0 is -3; a shape's dimensions are 0 or more");
  store.add("a", {4, 4}, nn::Init::uniform(0.1f));
  store.shard(0, 8, nn::Residency::Owned, nn::Residency::Owned);
  EXPECT_THROW_WITH(store.add("b", {2}, nn::Init::uniform(0.1f)), Error,
                    "ParameterStore::add('b') after shard(); register every parameter before the strategy (ZeRO) "
                    "shards the store");
  store.initialize(1);
  EXPECT_EQ(store.values().size(), 8u);
}

// The GEMM tests' shapes for cuBLASLt's epilogues: multiples of 16 (which cuBLASLt takes), an
// odd one, and ones with a single row or column (which take the separate pass).
struct EpilogueShape {
  std::size_t m, n, k;
};
constexpr EpilogueShape kEpilogueShapes[] = {{5, 7, 3}, {64, 32, 16}, {1, 32, 16}, {64, 1, 16}};

// C = op(A) op(B) + beta C and g = op(A) 1 + g_beta g (a Linear's weight and bias gradients)
// with the row sums in cuBLASLt's bias-gradient epilogue (a CUDA build) or a GEMV after the
// GEMM: every transpose, beta and g_beta 0 and 1, a shape of multiples of 16, an odd one and
// ones with a single row or column, g at 16 bytes or 4 bytes off them. The epilogue runs where
// it may (GPU memory, g_beta 0, g 16-byte aligned, no single row or column) on the multiples
// of 16 with a Linear's transposes; C and g are the naive loop's wherever they were summed,
// old contents (NaN) never show through where their beta is 0, and g's neighbours are left
// alone.
TEST(Gemm, BiasGradientInTheEpilogueOrAfterMatchesANaiveLoop) {
  using kernels::BiasAdd;
  using kernels::Trans;
  for (const EpilogueShape sh : kEpilogueShapes) {
    const auto [m, n, k] = sh;
    const auto ones = device_array(std::vector<float>(k + 2, 1.0f));  // more than k: the first k are read
    for (Trans ta : {Trans::No, Trans::Yes}) {
      for (Trans tb : {Trans::No, Trans::Yes}) {
        auto a = ta == Trans::No ? random_matrix(m, k, 1) : random_matrix(k, m, 1);
        auto b = tb == Trans::No ? random_matrix(k, n, 2) : random_matrix(n, k, 2);
        const auto ha = host_copy(a), hb = host_copy(b);
        for (std::size_t offset : {0, 4, 1}) {
          for (BiasAdd how : {BiasAdd::Epilogue, BiasAdd::Separate}) {
            for (float beta : {0.0f, 1.0f}) {
              for (float g_beta : {0.0f, 1.0f}) {
                auto c = random_matrix(m, n, 3);
                auto g_buffer = random_matrix(1, m + 4, 4);
                if (beta == 0.0f) Kokkos::deep_copy(c, std::nanf(""));
                if (g_beta == 0.0f) {  // NaN where g lies; its neighbours keep their values
                  auto h = host_copy(g_buffer);
                  for (std::size_t i = 0; i < m; ++i) h(0, offset + i) = std::nanf("");
                  Kokkos::deep_copy(g_buffer, h);
                }
                const auto c0 = host_copy(c), g0 = host_copy(g_buffer);
                const bool fused =
                    kernels::gemm_bias_grad(ta, tb, a, b, beta, c, g_beta, View1D<float>(g_buffer.data() + offset, m),
                                            View1D<const float>(ones.data(), ones.extent(0)), how);
                const std::string what = "m n k " + std::to_string(m) + " " + std::to_string(n) + " " +
                                         std::to_string(k) + ", ta " + std::to_string(ta == Trans::Yes) + ", tb " +
                                         std::to_string(tb == Trans::Yes) + ", g offset " + std::to_string(offset) +
                                         ", beta " + std::to_string(beta) + ", g_beta " + std::to_string(g_beta) +
                                         (how == BiasAdd::Epilogue ? ", epilogue" : ", separate");
                const bool may = how == BiasAdd::Epilogue && g_beta == 0.0f && offset % 4 == 0 &&
                                 test::device_build() && m > 1 && n > 1;
                // A Linear's own transposes (dy^T x) must take the epilogue on the shape of
                // multiples of 16; the others may fall back (cuBLASLt documents no algorithm
                // for them).
                if (m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && ta == Trans::Yes && tb == Trans::No) {
                  EXPECT_EQ(fused, may) << what;
                } else {
                  EXPECT_TRUE(may || !fused) << what;
                }
                const auto hc = host_copy(c), hg = host_copy(g_buffer);
                for (std::size_t i = 0; i < m; ++i) {
                  double row = g_beta == 0.0f ? 0.0 : g0(0, offset + i);
                  for (std::size_t l = 0; l < k; ++l) row += ta == Trans::No ? ha(i, l) : ha(l, i);
                  ASSERT_NEAR(hg(0, offset + i), row, 1e-5) << what << ": g(" << i << ")";
                  for (std::size_t j = 0; j < n; ++j) {
                    double s = beta == 0.0f ? 0.0 : c0(i, j);
                    for (std::size_t l = 0; l < k; ++l)
                      s += static_cast<double>(ta == Trans::No ? ha(i, l) : ha(l, i)) *
                           (tb == Trans::No ? hb(l, j) : hb(j, l));
                    ASSERT_NEAR(hc(i, j), s, 1e-5) << what << " at (" << i << ", " << j << ")";
                  }
                }
                for (std::size_t at = 0; at < m + 4; ++at) {
                  if (at >= offset && at < offset + m) continue;
                  ASSERT_EQ(hg(0, at), g0(0, at)) << what << ": g's neighbour " << at << " was written";
                }
              }
            }
          }
        }
      }
    }
  }
  View2D<float> a("a", 4, 3), b("b", 4, 5), c("c", 3, 5);
  View1D<float> g("g", 3), too_few("ones", 3);
  EXPECT_THROW_WITH(kernels::gemm_bias_grad(Trans::Yes, Trans::No, a, b, 0.0f, c, 0.0f, g, too_few), Error,
                    "3 row sums and 3 ones for an op(A) of 3 x 4");
}

TEST(Linear, RefusesALayerWithoutFeatures) {
  nn::ParameterStore store;
  EXPECT_THROW_WITH(nn::Linear(store, "fc", 0, 3), ConfigError, "Linear 'fc' has 0 input features");
  EXPECT_THROW_WITH(nn::Linear(store, "fc", 4, 0), ConfigError, "Linear 'fc' has 0 output features");
}

// C = op(A) op(B) + 1 b^T with the bias added in cuBLASLt's epilogue (a CUDA build) or after
// the GEMM: both ways, every transpose, a shape of multiples of 16, an odd one and ones with
// a single row or column (which take the separate pass), a bias aligned to 16 bytes or more
// and one off that (which takes the separate pass) give the naive loop's values, and C's old
// contents (NaN) never show through.
TEST(Gemm, BiasInTheEpilogueOrAfterMatchesANaiveLoop) {
  using kernels::BiasAdd;
  using kernels::Trans;
  for (const EpilogueShape sh : kEpilogueShapes) {
    for (Trans ta : {Trans::No, Trans::Yes}) {
      for (Trans tb : {Trans::No, Trans::Yes}) {
        const auto [m, n, k] = sh;
        auto a = ta == Trans::No ? random_matrix(m, k, 1) : random_matrix(k, m, 1);
        auto b = tb == Trans::No ? random_matrix(k, n, 2) : random_matrix(n, k, 2);
        // The bias sits at offset 0 (the allocation's alignment), 4 (16 bytes) or 1 (4 bytes
        // off) of a longer buffer.
        auto bias_buffer = random_matrix(1, n + 4, 3);
        const auto ha = host_copy(a), hb = host_copy(b), hbias = host_copy(bias_buffer);
        for (std::size_t offset : {0, 4, 1}) {
          const View1D<const float> bias(bias_buffer.data() + offset, n);
          for (BiasAdd how : {BiasAdd::Epilogue, BiasAdd::Separate}) {
            View2D<float> c("c", m, n);
            Kokkos::deep_copy(c, std::nanf(""));
            const bool fused = kernels::gemm_bias(ta, tb, a, b, bias, c, how);
            const std::string what = "m n k " + std::to_string(m) + " " + std::to_string(n) + " " + std::to_string(k) +
                                     ", ta " + std::to_string(ta == Trans::Yes) + ", tb " +
                                     std::to_string(tb == Trans::Yes) + ", bias offset " + std::to_string(offset) +
                                     (how == BiasAdd::Epilogue ? ", epilogue" : ", separate");
            // The epilogue runs only where C is in GPU memory, the bias is 16-byte aligned and
            // no matrix has a single row or column; there, cuBLASLt has fp32 algorithms with a
            // bias epilogue for every transpose of the shape whose dimensions are multiples of
            // 16 on the GPUs we run (for the odd shape it may have none, and the bias takes
            // the separate pass).
            const bool may = how == BiasAdd::Epilogue && offset % 4 == 0 && test::device_build() && m > 1 && n > 1;
            if (m % 16 == 0 && n % 16 == 0 && k % 16 == 0) {
              EXPECT_EQ(fused, may) << what;
            } else {
              EXPECT_TRUE(may || !fused) << what;
            }
            const auto hc = host_copy(c);
            for (std::size_t i = 0; i < m; ++i) {
              for (std::size_t j = 0; j < n; ++j) {
                double s = hbias(0, offset + j);
                for (std::size_t l = 0; l < k; ++l)
                  s += static_cast<double>(ta == Trans::No ? ha(i, l) : ha(l, i)) *
                       (tb == Trans::No ? hb(l, j) : hb(j, l));
                ASSERT_NEAR(hc(i, j), s, 1e-5) << what << " at (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
  View2D<float> a("a", 4, 3), b("b", 5, 3), c("c", 4, 5);
  View1D<float> short_bias("bias", 4);
  EXPECT_THROW_WITH(kernels::gemm_bias(kernels::Trans::No, kernels::Trans::Yes, a, b, short_bias, c), Error,
                    "the bias has 4 values for a C with 5 columns");
}

/// loss(out) = sum(w * out): dL/dout = w. Checks a module's backward against central
/// differences of that loss with respect to its input and every parameter. Values are
/// perturbed in host copies and copied back, so the module runs wherever its views live.
void check_gradients(nn::Module& module, nn::ParameterStore& store, View2D<float> x, std::size_t out_cols) {
  auto w = random_matrix(x.extent(0), out_cols, 99);
  const auto hw = host_copy(w);
  auto loss = [&]() {
    const auto y = host_copy(module.forward(x));
    double s = 0;
    for (std::size_t i = 0; i < y.extent(0); ++i)
      for (std::size_t j = 0; j < y.extent(1); ++j) s += static_cast<double>(hw(i, j)) * y(i, j);
    return s;
  };
  store.zero_grad();
  module.forward(x);
  const auto dx = host_copy(module.backward(w));
  store.settle_grads();
  const auto grads = host_copy(store.grads());
  auto hx = host_copy(x);
  auto values = store.values();
  auto hv = host_copy(values);
  const float h = 1e-2f;
  auto compare = [&](auto& host, auto& device, float& value, double analytic, const std::string& what) {
    const float saved = value;
    value = saved + h;
    Kokkos::deep_copy(device, host);
    const double up = loss();
    value = saved - h;
    Kokkos::deep_copy(device, host);
    const double down = loss();
    value = saved;
    Kokkos::deep_copy(device, host);
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << what;
  };
  for (std::size_t i = 0; i < x.extent(0); ++i)
    for (std::size_t j = 0; j < x.extent(1); ++j)
      compare(hx, x, hx(i, j), dx(i, j), "d/dx(" + std::to_string(i) + "," + std::to_string(j) + ")");
  for (auto& p : store.parameters())
    for (std::size_t i = 0; i < p.numel; ++i)
      compare(hv, values, hv(p.offset + i), grads(p.offset + i), p.name + "[" + std::to_string(i) + "]");
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

TEST(FastMath, NormalCdfIsWithinItsAbsoluteErrorOfTheDoubleFunction) {
  double worst = 0;
  for (float x = -12.0f; x < 12.0f; x += 2.9e-4f) {
    const double want = 0.5 * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    worst = std::max(worst, std::fabs(kernels::fast_normal_cdf(x) - want));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(kernels::fast_normal_cdf(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(kernels::fast_normal_cdf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(kernels::fast_normal_cdf(std::nanf(""))));
}

TEST(GELU, ForwardIsXTimesTheNormalCdfInDouble) {
  // Lengths that leave a vector remainder, and on the host two chunks of the parallel loop,
  // the second partial (kernels::kHostLoopChunk).
  const std::size_t rows = 70, cols = 129;
  static_assert(70 * 129 > kernels::kHostLoopChunk && 70 * 129 < 2 * kernels::kHostLoopChunk);
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

constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // the normal density at 0

// dx = dy (Phi(x) + x phi(x)) in double, through the layer: the host loops on a CPU, the
// kernels of gelu_kernels.hpp on a GPU.
TEST(GELU, BackwardIsTheDerivativeInDouble) {
  const std::size_t rows = 70, cols = 129;  // as above: a remainder after the last four, two host chunks
  auto x = random_matrix(rows, cols, 12, 6.0f);
  auto dy = random_matrix(rows, cols, 13, 4.0f);
  nn::GELU gelu;
  gelu.forward(x);
  const auto hx = host_copy(x), hdy = host_copy(dy), hdx = host_copy(gelu.backward(dy));
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      const double v = hx(i, j);
      const double want =
          hdy(i, j) * (0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) * kInvSqrt2Pi);
      ASSERT_NEAR(hdx(i, j), want, 1e-6 * std::max(1.0, std::fabs(static_cast<double>(hdy(i, j)))))
          << "at x = " << v << ", dy = " << hdy(i, j);
    }
}

// The GPU's GELU kernels, run here on the default execution space (the host's in a CPU
// build), against the double functions: every array from a 16-byte boundary, where four
// elements go at a time, and some or all of them 1-3 floats past it, where every element
// takes the one-at-a-time path; specials included, and lengths that leave 0-3 elements after
// the last four.
TEST(GELUKernels, MatchTheDoubleFunctionsWithOrWithoutFourAtATime) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, inf, -inf, std::nanf(""), 1e-40f, -1e-40f, 1e30f, -1e30f, -13.0f, 13.0f, 0.5f};
  std::mt19937 gen(6);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  while (x.size() < 1003) x.push_back(wide(gen));
  std::vector<float> g(x.size());
  for (auto& v : g) v = wide(gen);
  auto same = [](double got, double want, double tol) {
    return std::isnan(want) ? std::isnan(got) : got == want || std::fabs(got - want) <= tol;
  };
  struct Offsets {
    std::size_t in, out;  // floats past the start of the inputs' (x, dy) and the outputs' views
  };
  for (const Offsets o : {Offsets{0, 0}, Offsets{1, 1}, Offsets{2, 2}, Offsets{3, 3}, Offsets{0, 1}, Offsets{2, 0}})
    for (std::size_t n : {std::size_t{996}, std::size_t{997}, std::size_t{998}, std::size_t{999}}) {
      // Each array starts that many floats into a view of its own, which Kokkos aligns to 16 bytes at least.
      std::vector<float> px(o.in, 0.0f), pg(o.in, 0.0f);
      px.insert(px.end(), x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
      pg.insert(pg.end(), g.begin(), g.begin() + static_cast<std::ptrdiff_t>(n));
      auto d_x = device_array(px), d_g = device_array(pg);
      View1D<float> d_y("y", o.out + n), d_dx("dx", o.out + n);
      const float *in_x = d_x.data() + o.in, *in_g = d_g.data() + o.in;
      float *out_y = d_y.data() + o.out, *out_dx = d_dx.data() + o.out;
      EXPECT_EQ(kernels::gelu::detail::four_at_a_time(in_x, in_g, out_dx), o.in == 0 && o.out == 0);
      const Kokkos::DefaultExecutionSpace space;
      kernels::gelu::forward(space, in_x, out_y, n);
      kernels::gelu::backward(space, in_x, in_g, out_dx, n);
      space.fence();
      const auto hy = host(d_y), hdx = host(d_dx);
      const std::string where =
          " (offsets " + std::to_string(o.in) + ", " + std::to_string(o.out) + "; n " + std::to_string(n) + ")";
      for (std::size_t k = 0; k < n; ++k) {
        const double v = x[k], phi = 0.5 * std::erfc(-v / std::sqrt(2.0));
        const double pdf = std::exp(-0.5 * v * v) * kInvSqrt2Pi;
        ASSERT_TRUE(same(hy[o.out + k], v * phi, 1e-6 * std::max(1.0, std::fabs(v))))
            << "forward at x = " << v << where << ": " << hy[o.out + k];
        ASSERT_TRUE(same(hdx[o.out + k], g[k] * (phi + v * pdf), 1e-6 * std::max(1.0, std::fabs(double{g[k]}))))
            << "backward at x = " << v << ", dy = " << g[k] << where << ": " << hdx[o.out + k];
      }
    }
}

// Every vector width this CPU runs computes GELU's forward and backward bit for bit as the
// baseline loop does (replicas on different CPUs stay identical), specials included.
TEST(HostLoops, EveryInstructionSetGivesTheBaselinesBits) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,   -0.0f,  inf,   -inf,   std::nanf(""), 1e-40f, -1e-40f, 1e30f,
                          -1e30f, -87.5f, 88.8f, -13.0f, 13.0f,         0.5f,   -0.5f};
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  while (x.size() < 1003) x.push_back(wide(gen));  // not a multiple of any vector width
  const std::size_t n = x.size();
  std::vector<float> dy(n);
  for (auto& g : dy) g = wide(gen);
  auto run = [&](const kernels::HostLoops& l) {
    std::vector<float> y(n), cdf(n), dx(n);
    l.gelu_forward(x.data(), y.data(), cdf.data(), n);
    l.gelu_backward(x.data(), cdf.data(), dy.data(), dx.data(), n);
    std::vector<std::uint32_t> bits(3 * n);
    std::memcpy(bits.data(), y.data(), n * 4);
    std::memcpy(bits.data() + n, cdf.data(), n * 4);
    std::memcpy(bits.data() + 2 * n, dx.data(), n * 4);
    return bits;
  };
  const auto available = kernels::host_loops_available();
  ASSERT_STREQ(available.front()->isa, "baseline");
  if (available.size() < 2) GTEST_SKIP() << "the baseline loops alone in this build or on this CPU: nothing to compare";
  const auto want = run(*available.front());
  for (const auto* l : available) {
    const auto got = run(*l);
    for (std::size_t k = 0; k < got.size(); ++k)
      ASSERT_EQ(got[k], want[k]) << l->isa << " differs from baseline at output " << k / n << ", x = " << x[k % n];
  }
  std::string names;
  for (const auto* l : available) names += std::string(" ") + l->isa;
  std::printf("host loops compared:%s; in use: %s\n", names.c_str(), kernels::host_loops().isa);
  EXPECT_EQ(&kernels::host_loops_named(available.back()->isa), available.back());
}

TEST(HostLoops, AnInstructionSetThisBuildOrCpuLacksIsAConfigError) {
  EXPECT_THROW_WITH(kernels::host_loops_named("sse9"), ConfigError,
                    "TESSERA_HOST_ISA='sse9' is not an instruction set this build and CPU run; use baseline");
}

TEST(GELU, BackwardRejectsAGradientOfAnotherShape) {
  nn::GELU gelu;
  gelu.forward(random_matrix(4, 6, 1));
  EXPECT_THROW_WITH(gelu.backward(random_matrix(4, 5, 2)), ConfigError, "but forward saw 4x6");
}

// Linear likewise: a gradient of another shape than the last forward's output, or one
// before any forward, was the GEMM's "shapes do not match: op(A) is 16x8, op(B) is 0x0",
// naming neither the layer nor dy (and a ZeRO-3 layer was left acquired).
TEST(Linear, BackwardRejectsAGradientOfAnotherShapeOrBeforeForward) {
  nn::ParameterStore store;
  nn::Linear fc(store, "fc", 6, 3);
  store.initialize(2);
  EXPECT_THROW_WITH(fc.backward(random_matrix(4, 3, 1)), Error,
                    "Linear 'fc.weight': backward() before any forward(); run forward first");
  fc.forward(random_matrix(4, 6, 1));
  EXPECT_THROW_WITH(fc.backward(random_matrix(4, 6, 2)), ConfigError,
                    "Linear 'fc.weight': backward() was given a gradient of 4 x 6, and the last forward's output is "
                    "4 x 3; give the gradient of that output");
  EXPECT_THROW_WITH(fc.backward_input(random_matrix(5, 3, 2)), ConfigError,
                    "backward_input() was given a gradient of 5 x 3");
  EXPECT_EQ(fc.backward(random_matrix(4, 3, 2)).extent(1), 6u);
}

// A slice of some columns (View2D takes one: its rows are a pitch apart) given to GELU or to
// the loss was "internal: a padded matrix reached an elementwise kernel".
TEST(GELU, AndTheLossRefuseASliceOfColumnsInWordsForTheUser) {
  const View2D<float> wide = random_matrix(4, 8, 3);
  const View2D<float> slice(Kokkos::subview(wide, Kokkos::ALL, std::make_pair(std::size_t(2), std::size_t(6))));
  nn::GELU gelu;
  EXPECT_THROW_WITH(gelu.forward(slice), ConfigError,
                    "a 4 x 4 matrix whose rows are not next to each other in memory (a slice of some columns?) was "
                    "given to an elementwise layer or loss (GELU, mse_loss); give it a whole matrix, or a copy of the "
                    "slice");
  View2D<float> dy("dy", 4, 4);
  EXPECT_THROW_WITH(nn::mse_loss(slice, random_matrix(4, 4, 4), dy), ConfigError, "a slice of some columns?");
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

TEST(Gradients, ZeroGradIsLazyAndTheNextBackwardWritesInsteadOfAdding) {
  nn::ParameterStore store;
  nn::MLP mlp(store, 2, 4);
  store.initialize(5);
  auto x = random_matrix(3, 4, 1), dy = random_matrix(3, 4, 2);
  mlp.forward(x);
  mlp.backward(dy);
  store.settle_grads();
  const auto once = host(store.grads());
  Kokkos::deep_copy(store.grads(), std::nanf(""));  // whatever the memory holds must not matter
  store.zero_grad();
  mlp.forward(x);
  mlp.backward(dy);
  store.settle_grads();
  EXPECT_EQ(host(store.grads()), once);
  mlp.forward(x);
  mlp.backward(dy);  // without zero_grad, gradients add up
  const auto twice = host(store.grads());
  for (std::size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(twice[i], 2 * once[i], 1e-5 * (1 + std::fabs(once[i])));
  // A parameter no backward reached since zero_grad reads as zero once settled.
  Kokkos::deep_copy(store.grads(), 7.0f);
  store.zero_grad();
  store.settle_grads();
  for (float v : host(store.grads())) ASSERT_EQ(v, 0.0f);
}

// The bias gradient is dy's column sums, whatever the batch, also when a smaller batch follows
// a larger one (the ones it is summed with are kept for the largest batch seen).
TEST(Gradients, BiasGradientIsTheColumnSumOfDyForEveryBatchSize) {
  nn::ParameterStore store;
  nn::Linear lin(store, "fc", 4, 3);
  store.initialize(3);
  unsigned seed = 10;
  for (std::size_t batch : {6u, 2u, 9u, 1u}) {
    auto x = random_matrix(batch, 4, seed++), dy = random_matrix(batch, 3, seed++);
    store.zero_grad();
    lin.forward(x);
    lin.backward(dy);
    store.settle_grads();
    const auto grads = host(store.grads());
    const auto hdy = host_copy(dy);
    const nn::Parameter& bias = *lin.bias();
    for (std::size_t j = 0; j < 3; ++j) {
      double sum = 0;
      for (std::size_t i = 0; i < batch; ++i) sum += hdy(i, j);
      EXPECT_NEAR(grads[bias.offset + j], sum, 1e-5 * (1 + std::fabs(sum))) << "batch " << batch << ", column " << j;
    }
  }
}

TEST(Gradients, TheInputGradientCanBeSwitchedOffWithoutChangingTheOthers) {
  nn::ParameterStore a, b;
  nn::MLP with(a, 3, 4), without(b, 3, 4);
  a.initialize(5);
  b.initialize(5);
  without.set_input_grad(false);
  auto x = random_matrix(3, 4, 1), dy = random_matrix(3, 4, 2);
  with.forward(x);
  EXPECT_EQ(with.backward(dy).extent(0), 3u);
  without.forward(x);
  EXPECT_EQ(without.backward(dy).size(), 0u) << "no input gradient was asked for";
  EXPECT_EQ(host(a.grads()), host(b.grads()));
}

TEST(Gradients, BackwardInTwoHalvesEqualsOneBackward) {
  // The pipeline's order: every input gradient first (no gradient written, no hook fired),
  // then every parameter gradient, which must be exactly those of one backward pass.
  nn::ParameterStore a, b;
  nn::MLP whole(a, 3, 4), halves(b, 3, 4);
  a.initialize(5);
  b.initialize(5);
  std::vector<std::string> ready, acquired;
  halves.set_grad_ready_hook([&](nn::Parameter& p) { ready.push_back(p.name); });
  halves.set_acquire_hook([&](nn::Parameter& p, nn::Pass pass) {
    acquired.push_back(p.name + (pass == nn::Pass::InputGradient    ? " input"
                                 : pass == nn::Pass::WeightGradient ? " weights"
                                                                    : " other"));
  });
  auto x = random_matrix(3, 4, 1), dy = random_matrix(3, 4, 2);
  whole.forward(x);
  const auto dx = host_copy(whole.backward(dy));
  halves.forward(x);
  acquired.clear();
  Kokkos::deep_copy(b.grads(), std::nanf(""));  // written by the second half only
  b.zero_grad();
  const auto dx_first = host_copy(halves.backward_input(dy));
  EXPECT_TRUE(ready.empty()) << "a gradient was reported before backward_weights()";
  EXPECT_EQ(acquired,
            (std::vector<std::string>{"layers.2.weight input", "layers.1.weight input", "layers.0.weight input"}));
  for (std::size_t i = 0; i < dx.extent(0); ++i)
    for (std::size_t j = 0; j < dx.extent(1); ++j) EXPECT_EQ(dx_first(i, j), dx(i, j));
  acquired.clear();
  halves.backward_weights();
  EXPECT_EQ(ready, (std::vector<std::string>{"layers.2.weight", "layers.2.bias", "layers.1.weight", "layers.1.bias",
                                             "layers.0.weight", "layers.0.bias"}));
  EXPECT_EQ(acquired.size(), 6u);
  for (const auto& name : acquired) EXPECT_NE(name.find(" weights"), std::string::npos) << name;
  a.settle_grads();
  EXPECT_EQ(host(b.grads()), host(a.grads()));
  EXPECT_THROW(halves.backward_weights(), Error) << "a second weight pass without an input pass";
}

/// Central differences of a loss with respect to its input.
template <class LossFn>
void check_loss(LossFn fn, View2D<float> y) {
  View2D<float> dy;
  fn(y, dy);
  const auto analytic = host_copy(dy);
  auto hy = host_copy(y);
  const float h = 1e-2f;
  for (std::size_t i = 0; i < y.extent(0); ++i) {
    for (std::size_t j = 0; j < y.extent(1); ++j) {
      const float saved = hy(i, j);
      View2D<float> scratch;
      hy(i, j) = saved + h;
      Kokkos::deep_copy(y, hy);
      const double up = fn(y, scratch);
      hy(i, j) = saved - h;
      Kokkos::deep_copy(y, hy);
      const double down = fn(y, scratch);
      hy(i, j) = saved;
      Kokkos::deep_copy(y, hy);
      EXPECT_NEAR(analytic(i, j), (up - down) / (2 * h), 2e-3);
    }
  }
}

TEST(Loss, MeanSquaredErrorValueAndGradient) {
  auto y = device_matrix(1, 2, {1, 3}), t = device_matrix(1, 2, {0, 1});
  View2D<float> dy;
  EXPECT_FLOAT_EQ(nn::mse_loss(y, t, dy), (1.0f + 4.0f) / 2.0f);
  EXPECT_FLOAT_EQ(host_copy(dy)(0, 1), 2.0f * 2.0f / 2.0f);
  auto target = random_matrix(3, 4, 4);
  check_loss([&](View2D<float> v, View2D<float>& g) { return nn::mse_loss(v, target, g); }, random_matrix(3, 4, 5));
}

TEST(Loss, CrossEntropyValueGradientAndBadLabels) {
  View2D<float> logits("l", 2, 4), dy;
  auto labels = device_array<std::int64_t>({1, 3});
  EXPECT_NEAR(nn::cross_entropy_loss(logits, labels, dy), std::log(4.0), 1e-6);  // uniform logits
  check_loss([&](View2D<float> v, View2D<float>& g) { return nn::cross_entropy_loss(v, labels, g); },
             random_matrix(2, 4, 6, 2.0f));
  labels = device_array<std::int64_t>({1, 4});
  EXPECT_THROW_WITH(nn::cross_entropy_loss(logits, labels, dy), ConfigError, "1 label(s) outside [0, 4)");
}

/// Sets a device view from doubles.
void put(const View1D<float>& v, const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  Kokkos::deep_copy(v, device_array(f));
}

TEST(Optimizers, SGDWithMomentumFollowsTorchRule) {
  View1D<float> p("p", 3), g("g", 3);
  const std::vector<double> p0 = {1.0, -2.0, 0.5};
  const std::vector<std::vector<double>> grads = {{0.1, -0.2, 0.3}, {0.05, 0.0, -0.1}, {-0.3, 0.2, 0.1}};
  put(p, p0);
  optim::SGD sgd(p, g, {0.1f, 0.9f, 0.01f});
  double ref[3] = {p0[0], p0[1], p0[2]}, buf[3] = {0, 0, 0};
  for (std::size_t t = 0; t < 3; ++t) {
    put(g, grads[t]);
    const double squares = sgd.step();
    const auto hp = host_copy(p);
    double want_squares = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      const double d = grads[t][i] + 0.01 * ref[i];
      buf[i] = t == 0 ? d : 0.9 * buf[i] + d;
      ref[i] -= 0.1 * buf[i];
      EXPECT_NEAR(hp(i), ref[i], 1e-6) << "step " << t << " element " << i;
      want_squares += grads[t][i] * grads[t][i];
    }
    EXPECT_NEAR(squares, want_squares, 1e-7) << "the update reports the squared gradient norm";
  }
  EXPECT_EQ(sgd.state_bytes(), 3 * sizeof(float));
}

TEST(Optimizers, AdamWFollowsTorchRuleAndDefaults) {
  View1D<float> p("p", 2), g("g", 2);
  put(p, {1.0, -0.5});
  optim::AdamW adam(p, g);  // PyTorch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01
  double ref[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  const double grads[4][2] = {{0.5, -1.0}, {0.1, 0.2}, {-0.3, 0.0}, {2.0, -0.01}};
  for (int t = 1; t <= 4; ++t) {
    put(g, {grads[t - 1][0], grads[t - 1][1]});
    adam.step();
    const auto hp = host_copy(p);
    for (int i = 0; i < 2; ++i) {
      ref[i] *= 1 - 1e-3 * 0.01;
      m[i] = 0.9 * m[i] + 0.1 * grads[t - 1][i];
      v[i] = 0.999 * v[i] + 0.001 * grads[t - 1][i] * grads[t - 1][i];
      const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= 1e-3 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(hp(i), ref[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(adam.state_bytes(), 2 * 2 * sizeof(float));
  EXPECT_THROW_WITH(optim::AdamW(p, g, {1e-3f, 1.0f, 0.999f, 1e-8f, 0.01f}), ConfigError,
                    "AdamW: beta1 is 1; it must be in [0, 1) (0.9 is usual)");
}

// Settings that are no number, or infinite, are refused as a negative one is: NaN fails
// every comparison, so `lr < 0` let it through, and one update made every parameter NaN.
TEST(Optimizers, SettingsThatAreNoFiniteNumberAreRefused) {
  View1D<float> p("p", 4), g("g", 4);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW_WITH(optim::AdamW(p, g, {nan}), ConfigError, "AdamW: lr is nan; it must be a finite number >= 0");
  EXPECT_THROW_WITH(optim::AdamW(p, g, {1e-3f, 0.9f, nan}), ConfigError, "AdamW: beta2 is nan");
  EXPECT_THROW_WITH(optim::AdamW(p, g, {1e-3f, 0.9f, 0.999f, inf}), ConfigError, "AdamW: eps is inf");
  EXPECT_THROW_WITH(optim::AdamW(p, g, {1e-3f, 0.9f, 0.999f, 1e-8f, nan}), ConfigError, "AdamW: weight_decay is nan");
  EXPECT_THROW_WITH(optim::SGD(p, g, {inf}), ConfigError, "SGD: lr is inf");
  EXPECT_THROW_WITH(optim::SGD(p, g, {0.1f, nan}), ConfigError, "SGD: momentum is nan");
  EXPECT_THROW_WITH(optim::SGD(p, g, {0.1f, 0.9f, -1.0f}), ConfigError, "SGD: weight_decay is -1");
  // A schedule's rate (a warm-up of 0 steps: 0 / 0), kept as it was.
  optim::AdamW adam(p, g);
  EXPECT_THROW_WITH(adam.set_lr(nan), ConfigError, "AdamW::set_lr: lr is nan; it must be a finite number >= 0");
  EXPECT_THROW_WITH(adam.set_lr(-0.5f), ConfigError, "AdamW::set_lr: lr is -0.5");
  EXPECT_FLOAT_EQ(adam.lr(), 1e-3f);
  adam.set_lr(0.0f);
  EXPECT_FLOAT_EQ(adam.lr(), 0.0f);
  optim::SGD sgd(p, g);
  EXPECT_THROW_WITH(sgd.set_lr(inf), ConfigError, "SGD::set_lr: lr is inf");
}

// update() without a step begun: AdamW's bias corrections are those of no step (step size 0),
// so every update applied the weight decay alone, in silence.
TEST(Optimizers, AnUpdateBeforeAnyStepBeganIsRefused) {
  View1D<float> p("p", 4), g("g", 4);
  optim::AdamW adam(p, g);
  EXPECT_THROW_WITH(adam.update(0, 4), Error,
                    "adamw::update: no step has begun; call begin_step() once per step before its update()s, or "
                    "step() for all the parameters at once");
  adam.begin_step();
  adam.update(0, 4);
  EXPECT_EQ(adam.steps(), 1);
  optim::SGD sgd(p, g);
  EXPECT_THROW_WITH(sgd.update(0, 2), Error, "sgd::update: no step has begun");
  sgd.step();  // begins its own
}

void adamw_over_ranges(std::size_t p_shift, std::size_t g_shift, std::size_t threads);

TEST(Optimizers, AdamWOverRangesOffFourElementBoundariesFollowsTorchRule) {
  // On a GPU the update runs four elements per thread where they are 16-byte aligned and one
  // per thread before and after: ranges that start and end at every offset modulo 4. And the
  // parameters or gradients at an address off 16 bytes (a ZeRO shard that starts at an odd
  // element) take the path of one element per thread throughout. With its threads limited
  // (as beside backward), each thread takes every threads-th of those.
  for (const std::size_t threads : {0, 5, 64}) {
    for (const auto& [p_shift, g_shift] : {std::make_pair(0, 0), std::make_pair(1, 0), std::make_pair(0, 3)}) {
      SCOPED_TRACE("parameters " + std::to_string(p_shift) + " and gradients " + std::to_string(g_shift) +
                   " elements into their buffers, threads limited to " + std::to_string(threads));
      adamw_over_ranges(static_cast<std::size_t>(p_shift), static_cast<std::size_t>(g_shift), threads);
    }
  }
}

void adamw_over_ranges(std::size_t p_shift, std::size_t g_shift, std::size_t threads) {
  const std::size_t n = 1003;
  std::vector<double> init(n), grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    init[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)));
    grad[i] = static_cast<float>(std::cos(1.7 * static_cast<double>(i)));
  }
  View1D<float> p_buffer("p", n + p_shift), g_buffer("g", n + g_shift);
  View1D<float> p = Kokkos::subview(p_buffer, std::make_pair(p_shift, p_shift + n));
  View1D<float> g = Kokkos::subview(g_buffer, std::make_pair(g_shift, g_shift + n));
  put(p, init);
  put(g, grad);
  const float lr = 1e-2f, wd = 0.1f;
  optim::AdamW adam(p, g, {lr, 0.9f, 0.999f, 1e-8f, wd});
  adam.limit_threads(threads);
  std::vector<double> ref = init, m(n, 0.0), v(n, 0.0);
  const std::vector<std::pair<std::size_t, std::size_t>> ranges = {{0, 1}, {1, 6}, {7, 2}, {9, n - 11}, {n - 2, 2}};
  for (int t = 1; t <= 3; ++t) {
    adam.begin_step();
    for (const auto& [offset, count] : ranges) adam.update(offset, count);
    double want_squares = 0;
    for (std::size_t i = 0; i < n; ++i) want_squares += grad[i] * grad[i];
    EXPECT_NEAR(adam.grad_square_sum(), want_squares, 1e-9 * want_squares) << "step " << t;
    const auto hp = host_copy(p);
    for (std::size_t i = 0; i < n; ++i) {
      ref[i] *= 1.0 - static_cast<double>(lr) * static_cast<double>(wd);
      m[i] = 0.9 * m[i] + 0.1 * grad[i];
      v[i] = 0.999 * v[i] + 0.001 * grad[i] * grad[i];
      const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= static_cast<double>(lr) * mhat / (std::sqrt(vhat) + 1e-8);
      ASSERT_NEAR(hp(i), ref[i], 2e-6) << "step " << t << " element " << i;
    }
  }
}

// A range outside the parameters is refused, also one whose end wraps around (it passed the
// check: on a GPU the AdamW kernel then wrote before the buffer, on the host it did nothing).
TEST(Optimizers, UpdateRefusesARangeOutsideTheParameters) {
  View1D<float> p("p", 8), g("g", 8);
  optim::AdamW adamw(p, g);
  adamw.begin_step();
  const std::size_t most = std::numeric_limits<std::size_t>::max();
  EXPECT_THROW_WITH(adamw.update(most, 2), Error, "outside its 8");
  EXPECT_THROW_WITH(adamw.update(5, most - 2), Error, "outside its 8");
  EXPECT_THROW_WITH(adamw.update(9, 0), Error, "outside its 8");
  EXPECT_THROW_WITH(adamw.update(4, 5), Error, "outside its 8");
  adamw.update(0, 8);  // the whole range is taken
}

TEST(Optimizers, UpdatingRangesInAnyOrderEqualsOneWholeStep) {
  const std::size_t n = 10000;  // several of the host loop's chunks, and a remainder
  std::vector<double> init(n), grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    init[i] = std::sin(static_cast<double>(i));
    grad[i] = std::cos(static_cast<double>(i) * 0.7);
  }
  for (int which = 0; which < 2; ++which) {
    View1D<float> p1("p1", n), g("g", n), p2("p2", n), p3("p3", n);
    put(p1, init);
    put(p2, init);
    put(p3, init);
    put(g, grad);
    std::unique_ptr<optim::Optimizer> whole, ranged, pieces;
    if (which == 0) {
      whole = std::make_unique<optim::AdamW>(p1, g);
      ranged = std::make_unique<optim::AdamW>(p2, g);
      pieces = std::make_unique<optim::AdamW>(p3, g);
    } else {
      whole = std::make_unique<optim::SGD>(p1, g, optim::SGDOptions{0.1f, 0.9f, 0.0f});
      ranged = std::make_unique<optim::SGD>(p2, g, optim::SGDOptions{0.1f, 0.9f, 0.0f});
      pieces = std::make_unique<optim::SGD>(p3, g, optim::SGDOptions{0.1f, 0.9f, 0.0f});
    }
    double want = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double gi = static_cast<float>(grad[i]);
      want += gi * gi;
    }
    // On a GPU, each range on fewer threads than it has elements (as beside backward).
    ranged->limit_threads(37);
    for (int step = 0; step < 3; ++step) {
      const double all = whole->step();
      ranged->begin_step();
      // Reverse order, uneven ranges, like gradient buckets.
      ranged->update(7000, 3000);
      ranged->update(1000, 6000);
      ranged->update(0, 1000);
      const double parts = ranged->grad_square_sum();
      EXPECT_NEAR(all, want, 1e-6 * want) << ranged->name();
      EXPECT_NEAR(parts, want, 1e-6 * want) << ranged->name();
      pieces->begin_step();
      for (std::size_t k = n / 100; k-- > 0;) pieces->update(k * 100, 100);  // more ranges than it first keeps sums for
      EXPECT_NEAR(pieces->grad_square_sum(), want, 1e-6 * want) << pieces->name();
    }
    const auto a = host_copy(p1), b = host_copy(p2), c = host_copy(p3);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a(i), b(i)) << ranged->name() << " element " << i;
      ASSERT_EQ(a(i), c(i)) << pieces->name() << " element " << i;
    }
  }
}
}  // namespace
