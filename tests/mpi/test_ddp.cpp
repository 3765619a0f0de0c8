// Data parallelism proven against a single-process reference on the same data: each rank
// also trains the whole global batch alone (on a communicator of its own), and the two
// runs must end with the same parameters.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using test::expect_same_parameters;
using test::self;
using test::world;

train::TrainConfig small_config() {
  train::TrainConfig c;
  c.layers = 3;
  c.dim = 32;
  c.global_batch = 24;  // divides across 1, 2, 3 and 4 ranks
  c.steps = 10;
  c.synthetic_samples = 480;
  c.teacher_layers = 2;
  c.seed = 7;
  return c;
}

std::vector<float> values(train::Trainer& t) {
  auto v = t.parameters().values();
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  return std::vector<float>(h.data(), h.data() + h.size());
}

TEST(DDP, SGDMatchesTheSingleProcessRunOnTheSameGlobalBatch) {
  auto c = small_config();
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.9f;
  train::Trainer reference(c, self());
  reference.run();
  // Buckets reduced during backward and after it (DDPOptions::overlap_backward), in one
  // bucket (the default sizes hold this model), a bucket per layer, and a bucket per
  // parameter (a layer's weight and bias apart).
  for (double mib : {0.0, 4.0 * 32 * 33 / (1024 * 1024), 4.0 / (1024 * 1024)})
    for (auto overlap : {parallel::BackwardOverlap::On, parallel::BackwardOverlap::Off}) {
      SCOPED_TRACE(std::string("overlap_backward ") + parallel::overlap_name(overlap) + ", buckets of " +
                   (mib > 0 ? std::to_string(mib * 1024 * 1024) + " bytes" : std::string("the default size")));
      auto d = c;
      if (mib > 0) d.ddp.first_bucket_mb = d.ddp.bucket_mb = mib;
      d.ddp.overlap_backward = overlap;
      train::Trainer ddp(d, world());
      if (mib > 0) {
        EXPECT_GT(ddp.ddp().buckets().size(), 2u);
      }
      ddp.run();
      expect_same_parameters(values(reference), values(ddp), 1e-5);
    }
  // The steps must have changed the parameters, or the comparison proves nothing.
  train::Trainer untrained(c, self());
  double moved = 0;
  const auto a = values(untrained), b = values(reference);
  for (std::size_t i = 0; i < a.size(); ++i) moved = std::max(moved, std::fabs(static_cast<double>(a[i]) - b[i]));
  EXPECT_GT(moved, 1e-3);
}

// Updating each bucket as soon as it is final (during backward on one rank) must give the
// parameters of one update after all of backward, whether a bucket holds whole layers or, as
// with buckets of one float's capacity, a layer's weight and bias apart (the weight's update
// must wait until backward has used it for the input gradient).
TEST(DDP, OptimizerOverlappedWithCommunicationGivesTheSameParameters) {
  for (double mib : {4.0 * 32 * 33 / (1024 * 1024), 4.0 / (1024 * 1024)}) {
    auto c = small_config();
    c.ddp.first_bucket_mb = c.ddp.bucket_mb = mib;
    c.overlap_optimizer = false;
    train::Trainer after(c, world());
    after.run();
    c.overlap_optimizer = true;
    train::Trainer overlapped(c, world());
    overlapped.run();
    EXPECT_EQ(values(after), values(overlapped)) << "buckets of " << mib << " MiB";
  }
}

TEST(DDP, AdamWPerStepLossesMatchTheSingleProcessRun) {
  auto c = small_config();
  train::Trainer reference(c, self());
  train::Trainer ddp(c, world());
  for (int s = 0; s < 10; ++s) {
    const auto a = reference.step(), b = ddp.step();
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << "step " << s + 1;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << "step " << s + 1;
    // The reported norm is that of the averaged gradients the optimizer applied.
    const auto g = test::host_copy(ddp.parameters().grads());
    double sq = 0;
    for (std::size_t i = 0; i < g.size(); ++i) sq += static_cast<double>(g(i)) * g(i);
    EXPECT_NEAR(b.grad_norm, std::sqrt(sq), 1e-6 * std::sqrt(sq)) << "step " << s + 1;
  }
}

TEST(DDP, AccumulationOfFourMicroStepsMatchesOneStepOfTheWholeBatch) {
  auto c = small_config();
  c.global_batch = 128;
  c.synthetic_samples = 1280;
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.steps = 5;
  train::Trainer whole(c, self());  // 1 x 128
  whole.run();
  c.accum = 4;  // 4 x 32
  train::Trainer micro(c, self());
  micro.run();
  expect_same_parameters(values(whole), values(micro), 1e-5);
  if (128 % (world().size() * 4) == 0) {  // and the same with data parallelism
    train::Trainer ddp_micro(c, world());
    ddp_micro.run();
    expect_same_parameters(values(whole), values(ddp_micro), 1e-5);
  }
}

TEST(DDP, FirstBucketIsReducedWhileBackwardStillRuns) {
  auto c = small_config();
  c.ddp.first_bucket_mb = c.ddp.bucket_mb = 4.0 * 32 * 33 / (1024 * 1024);  // about one layer per bucket
  c.ddp.overlap_backward = parallel::BackwardOverlap::On;
  train::Trainer t(c, world());
  if (world().size() == 1) {
    // One replica has nothing to average: no bucket is sent, and the step still trains.
    const auto before = values(t);
    const auto m = t.step();
    EXPECT_TRUE(t.ddp().last_sync().ready_at_launch.empty());
    EXPECT_EQ(t.ddp().last_sync().buckets_launched_during_backward, 0u);
    EXPECT_NE(values(t), before) << "the optimizer must still have run";
    EXPECT_GT(m.grad_norm, 0.0);
    return;
  }
  const auto& buckets = t.ddp().buckets();
  ASSERT_GE(buckets.size(), 3u);
  EXPECT_EQ(buckets.front().parameters.front(), "layers.2.bias");  // the last layer's, ready first
  t.step();
  const auto& s = t.ddp().last_sync();
  const std::size_t all = t.parameters().parameters().size();
  ASSERT_FALSE(s.ready_at_launch.empty());
  EXPECT_LT(s.ready_at_launch.front(), all) << "the first bucket must start before every gradient exists";
  EXPECT_EQ(s.buckets_launched_during_backward, buckets.size());
}

// Without overlap, no bucket starts before backward has produced every gradient, and the
// step ends with the parameters of the overlapped one, bit for bit.
TEST(DDP, BucketsReducedAfterBackwardStartOnlyOnceEveryGradientExists) {
  auto c = small_config();
  c.ddp.first_bucket_mb = c.ddp.bucket_mb = 4.0 * 32 * 33 / (1024 * 1024);  // about one layer per bucket
  c.ddp.overlap_backward = parallel::BackwardOverlap::Off;
  train::Trainer after(c, world());
  EXPECT_FALSE(after.ddp().overlaps_backward());
  c.ddp.overlap_backward = parallel::BackwardOverlap::On;
  train::Trainer during(c, world());
  EXPECT_TRUE(during.ddp().overlaps_backward());
  for (int s = 0; s < 3; ++s) {
    after.step();
    during.step();
    if (world().size() == 1) continue;  // one replica sends nothing
    const auto& stats = after.ddp().last_sync();
    const std::size_t all = after.parameters().parameters().size();
    EXPECT_EQ(stats.buckets_launched_during_backward, 0u);
    ASSERT_EQ(stats.ready_at_launch.size(), after.ddp().buckets().size());
    for (const std::size_t ready : stats.ready_at_launch) EXPECT_EQ(ready, all);
    EXPECT_EQ(during.ddp().last_sync().buckets_launched_during_backward, during.ddp().buckets().size());
  }
  EXPECT_EQ(values(after), values(during));
}

// Under auto, ranks with different numbers of cores choose differently (two ranks sharing a
// 2-core node, beside a rank alone on another): every rank must still issue the same
// reductions in the same order. With a bucket per parameter, backward completes a layer's
// weight bucket before its bias bucket, which has the lower number.
TEST(DDP, RanksThatChooseDifferentlyWhetherToOverlapStillMatchTheSingleProcessRun) {
  if (world().size() == 1) GTEST_SKIP() << "needs a second replica";
  auto c = small_config();
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.steps = 3;
  c.ddp.first_bucket_mb = c.ddp.bucket_mb = 4.0 / (1024 * 1024);  // one float: a bucket per parameter
  train::Trainer reference(c, self());
  reference.run();
  c.ddp.overlap_backward = world().rank() == 0 ? parallel::BackwardOverlap::On : parallel::BackwardOverlap::Off;
  train::Trainer mixed(c, world());
  const auto& buckets = mixed.ddp().buckets();
  ASSERT_GE(buckets.size(), 2u);
  ASSERT_EQ(buckets[0].parameters.front(), "layers.2.bias");  // completed after layers.2.weight's
  ASSERT_EQ(buckets[1].parameters.front(), "layers.2.weight");
  mixed.run();
  expect_same_parameters(values(reference), values(mixed), 1e-5);
}

// Auto reduces during backward unless the gradients are in host memory and the rank has a
// single core to compute and communicate on (docs/strategies.md).
TEST(DDP, AutoOverlapFollowsWhereTheGradientsLiveAndTheRanksCores) {
  const int cores = Session::current().cores();
  const bool device = memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device;
  EXPECT_EQ(parallel::overlaps_backward(parallel::BackwardOverlap::Auto), device || cores >= 2)
      << cores << " cores per rank, gradients in " << (device ? "device" : "host") << " memory";
  // The ranks of a node share its cores: one each here when they outnumber them.
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int ranks = Session::current().local_size();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores * ranks, std::max(online, ranks)) << ranks << " ranks on a node of " << online << " cores";
  EXPECT_TRUE(parallel::overlaps_backward(parallel::BackwardOverlap::On));
  EXPECT_FALSE(parallel::overlaps_backward(parallel::BackwardOverlap::Off));
}

TEST(DDP, BucketsCoverTheGradientsOnceInReverseOrderWithASmallFirstBucket) {
  auto c = small_config();
  c.dim = 512;  // 1 MiB per weight
  c.ddp.first_bucket_mb = 1.0;
  c.ddp.bucket_mb = 2.5;
  c.synthetic_samples = 48;
  c.teacher_layers = 1;
  train::Trainer t(c, world());
  const auto& buckets = t.ddp().buckets();
  std::size_t covered = 0, end = t.parameters().numel();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(buckets[b].offset + buckets[b].numel, end) << "bucket " << b << " is not the next range down";
    end = buckets[b].offset;
    covered += buckets[b].numel;
    const double mib = static_cast<double>(buckets[b].numel) * 4 / (1024 * 1024);
    if (buckets[b].parameters.size() > 1) {
      EXPECT_LE(mib, b == 0 ? 1.0 : 2.5) << "bucket " << b;
    }
  }
  EXPECT_EQ(covered, t.parameters().numel());
  EXPECT_EQ(end, 0u);
  // Gradients become ready from the last layer down. The first bucket (1 MiB) takes the last
  // bias (2 kB), and its weight (1 MiB) would pass the limit; the next (2.5 MiB) takes that
  // weight, layers.1 (1 MiB + 2 kB) and layers.0's bias, and layers.0's weight is the third.
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].parameters, std::vector<std::string>{"layers.2.bias"});
  EXPECT_EQ(buckets[1].parameters,
            (std::vector<std::string>{"layers.2.weight", "layers.1.bias", "layers.1.weight", "layers.0.bias"}));
  EXPECT_EQ(buckets[2].parameters, std::vector<std::string>{"layers.0.weight"});
}

// A model built on one store and handed to a strategy with another: its hooks reported
// parameters the strategy never laid out, and backward threw std::out_of_range's
// "unordered_map::at". Bucket sizes that are not finite passed the check that they be > 0.
TEST(DDP, AModelOfAnotherStoreAndBucketsOfNoSizeAreNamed) {
  nn::ParameterStore mine, other;
  nn::MLP model(mine, 2, 8);
  nn::MLP unrelated(other, 2, 8);
  parallel::DDPOptions bad;
  bad.bucket_mb = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW_WITH(parallel::DistributedDataParallel(model, mine, world(), bad), ConfigError,
                    "DistributedDataParallel: bucket sizes must be finite and > 0 MiB (bucket_mb nan");
  parallel::DistributedDataParallel ddp(model, other, world(), {});
  other.initialize(1);
  mine.initialize(1);
  View2D<float> x("x", 4, 8), dy("dy", 4, 8);
  Kokkos::deep_copy(x, 1.0f);
  Kokkos::deep_copy(dy, 1.0f);
  ddp.new_step();
  ddp.begin_step();
  model.forward(x);
  EXPECT_THROW_WITH(model.backward(dy), Error,
                    "DistributedDataParallel: the model reported its parameter 'layers.1.weight', which is not in the "
                    "ParameterStore the strategy was given; build the model on that store, or give the strategy the "
                    "store the model was built on");
  parallel::ZeroOptions zero;
  zero.align = 0;
  nn::ParameterStore third;
  nn::MLP third_model(third, 2, 8);
  EXPECT_THROW_WITH(parallel::ZeroDataParallel(third_model, third, world(), zero), ConfigError,
                    "ZeRO: the shards' alignment (ZeroOptions::align) is 0; give 1 or more elements");
}

TEST(DDP, ReplicasThatDifferAreCaughtOnEveryRank) {
  auto c = small_config();
  train::Trainer t(c, world());
  if (world().size() < 2) GTEST_SKIP() << "needs two replicas";
  if (world().rank() == 1) {
    auto& p = t.parameters().find("layers.1.weight");
    auto h = Kokkos::create_mirror_view(p.value);
    Kokkos::deep_copy(h, p.value);
    h(3) += 1e-3f;
    Kokkos::deep_copy(p.value, h);
  }
  EXPECT_THROW_WITH(t.ddp().verify_replicas_identical(), Error,
                    "parameter 'layers.1.weight' does not hold the same values");
}

// bf16 gradients on the wire: the single-process fp32 run's parameters within bf16's rounding
// of how far training moved them (each rank stepping on its own gradients, unreduced, ends
// several times further away), and every replica the same.
TEST(DDP, Bfloat16GradientsTrainCloseToTheSingleProcessRun) {
  auto c = small_config();
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.9f;
  train::Trainer untrained(c, self());
  train::Trainer reference(c, self());
  reference.run();
  c.ddp.grad_dtype = DType::BFloat16;
  train::Trainer bf16(c, world());
  bf16.run();
  bf16.ddp().verify_replicas_identical();
  const auto ref = values(reference), got = values(bf16);
  test::expect_close_to_reference(values(untrained), ref, got, 2e-2);
  if (world().size() > 1) {  // one rank sends nothing, so nothing is rounded
    c.ddp.grad_dtype = DType::Float32;
    train::Trainer fp32(c, world());
    fp32.run();
    EXPECT_NE(values(fp32), got) << "bf16 on the wire must round the gradients (the same run in fp32 gave these)";
  }
}

// A diverging run throws on every rank at the same step, that step does not count as done,
// and the trainer refuses to step again (its state is partway through the failed step; an
// all-reduce on NaN parameters would only throw again, or, with one rank stepping and another
// not, wait for a peer that never comes).
TEST(DDP, ADivergedStepStopsEveryRankAndTheTrainerStepsNoMore) {
  auto c = small_config();
  c.optimizer = "sgd";
  c.lr = 1e6f;
  train::Trainer t(c, world());
  std::int64_t failed_at = 0;
  try {
    t.run();
    ADD_FAILURE() << "lr 1e6 trained " << t.steps_done() << " steps without a non-finite loss";
  } catch (const NonFiniteError& e) {
    failed_at = t.steps_done() + 1;
    EXPECT_NE(e.message().find("training diverged at step " + std::to_string(failed_at) + ":"), std::string::npos)
        << e.message();
  }
  ASSERT_GT(failed_at, 1) << "the first step's loss comes before any update, so it is finite";
  EXPECT_LT(failed_at, c.steps);
  // The same step on every rank: the largest and the smallest agree.
  double at[2] = {static_cast<double>(failed_at), -static_cast<double>(failed_at)};
  world().all_reduce({at, 2}, comm::ReduceOp::Max);
  EXPECT_EQ(at[0], -at[1]) << "the ranks stopped at different steps";
  EXPECT_THROW_WITH(t.step(), Error,
                    "this Trainer cannot step again: step " + std::to_string(failed_at) +
                        " failed (training diverged at step " + std::to_string(failed_at) + ": ");
  EXPECT_EQ(t.steps_done(), failed_at - 1) << "a refused step must not count";
}

// Settings that differ between ranks are named on every rank, with the ranks that differ
// from rank 0 where there are several (they trained apart in silence).
TEST(DDP, RanksGivenDifferentSettingsAreToldOnEveryRank) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "needs a second rank to differ";
  auto c = small_config();
  c.seed = world().rank() == 0 ? 1 : 2;
  std::string differ;
  for (int r = 1; r < p; ++r) differ += (r > 1 ? ", " : "") + std::to_string(r);
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError,
                    "the ranks were not given the same settings: rank 1 has --train.seed 2 where rank 0 has 1" +
                        (p > 2 ? " (ranks differing from rank 0: " + differ + ")" : std::string()) +
                        "; give every rank the same");
  // A setting the comparison leaves out as unused (momentum under adamw) that one rank refuses:
  // every rank stops, in its words (the others waited in the next collective).
  c.seed = 1;
  c.momentum = world().rank() == 1 ? 1.5f : 0.0f;
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError,
                    std::string(world().rank() == 1 ? "" : "rank 1 refused its settings: ") +
                        "--optim.momentum must be 0 or more and below 1");
  c.momentum = 0.0f;
  // Only rank 1 differs, in a later setting: it alone is named.
  c.seed = 1;
  c.optimizer = world().rank() == 1 ? "sgd" : "adamw";
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError,
                    "the ranks were not given the same settings: rank 1 has --optim.name sgd where rank 0 has adamw; "
                    "give every rank the same");
}

TEST(DDP, BadLayoutsAreConfigErrors) {
  auto c = small_config();
  c.global_batch = 25;
  if (world().size() > 1 && 25 % world().size() != 0) {
    EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "does not divide across");
  }
  c.global_batch = 24;
  c.accum = 5;
  // With the ranks known, the whole figure in one refusal (it was "a multiple of 5 x the
  // data-parallel ranks", and then a second refusal gave the number).
  const int p = world().size();
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError,
                    "--train.batch 24 does not divide across " + std::to_string(p) +
                        (p == 1 ? " data-parallel rank" : " data-parallel ranks") +
                        " x 5 micro-steps; choose a multiple of " + std::to_string(5 * p));
  EXPECT_THROW_WITH(c.validate(), ConfigError, "does not split into 5 micro-steps");
  // Fewer synthetic samples than a batch: refused before the task is made (after it, once its
  // teacher had run over every sample).
  c.accum = 1;
  c.synthetic_samples = 8;
  EXPECT_THROW_WITH(c.validate(), ConfigError,
                    "the dataset has 8 samples, fewer than one batch (--train.batch 24); lower --train.batch or raise "
                    "--data.samples");
  c.synthetic_samples = 4096;
  // Sizes whose product wraps around in 64 bits: 4 ranks x 2^62 micro-steps is 2^64, which
  // was 0, and the Trainer divided by it (a floating-point exception on every rank).
  c.global_batch = 1LL << 62;
  c.accum = 1LL << 62;
  EXPECT_THROW_WITH(c.validate(4), ConfigError,
                    "--train.batch 4611686018427387904 does not divide across 4 data-parallel ranks x "
                    "4611686018427387904 micro-steps; choose a multiple of 18446744073709551616");
}
}  // namespace
