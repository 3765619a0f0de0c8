// ZeRO stages 1-3 proven against a single-process reference on the same data: each rank also
// trains the whole global batch alone (DDP on a communicator of its own), and the sharded
// run, gathered, must end with the same parameters. Memory and traffic are checked against
// the ZeRO paper's formulas from what was allocated and sent.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <tessera/checkpoint/model_file.hpp>
#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using test::expect_same_parameters;
using test::self;
using test::world;

// Width 29 divides by none of 2, 3 and 4 ranks; 2610 parameters, 41 units of 64.
train::TrainConfig small_config() { return test::small_run(3, 29, 11); }

std::vector<float> whole(train::Trainer& t, comm::Communicator& comm) {
  return parallel::gather_values(t.parameters(), comm);
}

/// The layouts every parity test runs: uneven shards, equal shards (alignment 1 on a model
/// whose size divides by 2, 3 and 4: the all_gather path), and a model smaller than one
/// alignment unit (every rank but the last owns nothing).
struct Layout {
  std::size_t layers, dim, align;
  const char* what;
  double bucket_mb = 4.0;  // the default holds each of these models whole
};
const Layout kLayouts[] = {{3, 29, 64, "uneven shards, width 29"},
                           {3, 32, 1, "equal shards"},
                           {2, 4, 64, "empty shards"},
                           // 27 buckets, most of them across a shard's boundary at 2-4 ranks
                           {3, 29, 64, "buckets of 100 floats", 400.0 / (1024 * 1024)}};

train::TrainConfig with(train::TrainConfig c, const Layout& l, int stage) {
  c.layers = l.layers;
  c.dim = l.dim;
  c.teacher_layers = std::min<std::size_t>(l.layers, 2);
  c.zero.align = l.align;
  c.zero.bucket_mb = l.bucket_mb;
  c.zero_stage = stage;
  return c;
}

std::string label(const Layout& l, int stage) { return "stage " + std::to_string(stage) + ", " + l.what; }

TEST(ZeroPartition, ShardsAreContiguousCoverEverythingAndDifferByAtMostOneUnit) {
  for (std::size_t total : {0ul, 1ul, 63ul, 64ul, 65ul, 1000ul, 2610ul, 3168ul, 8396800ul})
    for (int ranks = 1; ranks <= 5; ++ranks)
      for (std::size_t align : {1ul, 16ul, 64ul}) {
        const parallel::FlatPartition p(total, ranks, align);
        ASSERT_EQ(p.ranks(), ranks);
        EXPECT_EQ(p.begin(0), 0u);
        EXPECT_EQ(p.end(ranks - 1), total);
        std::size_t lo = total, hi = 0;
        for (int r = 0; r < ranks; ++r) {
          EXPECT_LE(p.begin(r), p.end(r));
          if (r > 0) {
            EXPECT_EQ(p.begin(r), p.end(r - 1));
          }
          EXPECT_EQ(p.begin(r) % align, 0u) << "shards start on an alignment unit";
          lo = std::min(lo, p.size(r));
          hi = std::max(hi, p.size(r));
        }
        EXPECT_LE(hi - lo, align) << total << " over " << ranks << " ranks, unit " << align;
      }
  const parallel::FlatPartition tiny(10, 4, 64);
  EXPECT_EQ(tiny.size(0) + tiny.size(1) + tiny.size(2), 0u);  // a rank may own nothing
  EXPECT_EQ(tiny.size(3), 10u);
  EXPECT_TRUE(parallel::FlatPartition(3168, 4, 1).equal());
  EXPECT_FALSE(parallel::FlatPartition(2610, 4, 64).equal());
}

TEST(Zero, SGDMatchesTheSingleProcessRunOnTheSameGlobalBatch) {
  for (const auto& layout : kLayouts) {
    auto c = with(small_config(), layout, 0);
    c.optimizer = "sgd";
    c.lr = 0.05f;
    c.momentum = 0.9f;
    train::Trainer reference(c, self());
    reference.run();
    const auto ref = whole(reference, self());
    train::Trainer untrained(c, self());
    double moved = 0;
    const auto start = whole(untrained, self());
    for (std::size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::fabs(double(start[i]) - ref[i]));
    EXPECT_GT(moved, 1e-3) << "the steps must change the parameters, or the comparison proves nothing";
    for (int stage = 1; stage <= 3; ++stage) {
      train::Trainer zero(with(c, layout, stage), world());
      zero.run();
      expect_same_parameters(ref, whole(zero, world()), 1e-5, label(layout, stage));
    }
  }
}

TEST(Zero, AdamWPerStepLossesMatchTheSingleProcessRun) {
  for (const auto& layout : kLayouts) {
    auto c = with(small_config(), layout, 0);
    for (int stage = 1; stage <= 3; ++stage) {
      train::Trainer reference(c, self());
      train::Trainer zero(with(c, layout, stage), world());
      for (int s = 0; s < 10; ++s) {
        const auto a = reference.step(), b = zero.step();
        EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << label(layout, stage) << ", step " << s + 1;
        EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << label(layout, stage) << ", step " << s + 1;
      }
      expect_same_parameters(whole(reference, self()), whole(zero, world()), 1e-5, label(layout, stage));
    }
  }
}

TEST(Zero, AccumulationOfFourMicroStepsMatchesOneStepOfTheWholeBatch) {
  auto c = small_config();
  c.global_batch = 96;
  c.synthetic_samples = 960;
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.steps = 5;
  train::Trainer reference(c, self());  // 1 x 96
  reference.run();
  const auto ref = whole(reference, self());
  c.accum = 4;  // 4 micro-steps on every rank
  if (96 % (world().size() * 4) != 0) GTEST_SKIP() << "96 samples do not split into 4 micro-steps on every rank";
  for (int stage = 1; stage <= 3; ++stage) {
    c.zero_stage = stage;
    train::Trainer zero(c, world());
    zero.run();
    expect_same_parameters(ref, whole(zero, world()), 1e-5, "stage " + std::to_string(stage));
  }
}

TEST(Zero, Bfloat16GradientsTrainCloseToTheSingleProcessRun) {
  auto c = small_config();
  c.optimizer = "sgd";
  c.lr = 0.05f;
  c.momentum = 0.9f;
  train::Trainer untrained(c, self());
  const auto init = whole(untrained, self());
  train::Trainer reference(c, self());
  reference.run();
  const auto ref = whole(reference, self());
  c.ddp.grad_dtype = DType::BFloat16;
  for (int stage = 1; stage <= 3; ++stage) {
    c.zero_stage = stage;
    train::Trainer bf16(c, world());
    bf16.run();
    const auto got = whole(bf16, world());
    // Within bf16's rounding of how far training moved the parameters: shards that skipped
    // the reduction end several times further away.
    test::expect_close_to_reference(init, ref, got, 2e-2, "stage " + std::to_string(stage));
    if (world().size() > 1) {  // one rank sends nothing, so nothing is rounded
      auto f = c;
      f.ddp.grad_dtype = DType::Float32;
      train::Trainer fp32(f, world());
      fp32.run();
      EXPECT_NE(whole(fp32, world()), got) << "bf16 on the wire must round the gradients (stage " << stage << ")";
    }
  }
}

// What a rank keeps, from its allocations, against the paper's formulas for fp32 AdamW with
// psi parameters: DDP 16 psi, stage 1 8 psi + 8 shard, stage 2 4 psi + 12 shard, stage 3
// 16 shard, where shard is this rank's part as the partition cuts it.
// Stage 3 gathers ahead at most the layers there are: a prefetch of 100000 layers was counted
// as 100001 gathered ones, and a model that fits was refused as needing terabytes.
TEST(Zero, TheEstimateGathersAheadNoMoreLayersThanThereAre) {
  auto c = small_config();
  c.zero_stage = 3;
  c.zero.prefetch = static_cast<int>(c.layers) - 1;
  const double all_layers = c.estimate_memory(4).working;
  c.zero.prefetch = 100000;
  EXPECT_EQ(c.estimate_memory(4).working, all_layers);
  c.zero.prefetch = 0;
  EXPECT_LT(c.estimate_memory(4).working, all_layers);
}

TEST(Zero, ModelStateBytesFollowTheFormulaOfEachStage) {
  auto c = small_config();
  c.steps = 1;
  const int n = world().size(), me = world().rank();
  for (int stage = 0; stage <= 3; ++stage) {
    c.zero_stage = stage;
    train::Trainer t(c, world());
    const auto m = t.step();
    const std::size_t psi = t.parameters().numel();
    const std::size_t shard = parallel::FlatPartition(psi, n, c.zero.align).size(me);
    const std::size_t want = stage == 0   ? 16 * psi
                             : stage == 1 ? 8 * psi + 8 * shard
                             : stage == 2 ? 4 * psi + 12 * shard
                                          : 16 * shard;
    EXPECT_EQ(m.model_state_bytes, want) << "stage " << stage << " on rank " << me << " of " << n;
    if (stage > 0) {
      EXPECT_EQ(t.zero().partition().size(me), shard);
    }
  }
}

TEST(Zero, StageThreeHoldsAtMostPrefetchPlusOneGatheredLayersAndPrefetches) {
  auto c = small_config();
  c.layers = 5;
  c.steps = 2;
  c.zero_stage = 3;
  const std::size_t layer_bytes = (c.dim * c.dim + c.dim) * sizeof(float);
  for (int prefetch : {0, 1, 2}) {
    c.zero.prefetch = prefetch;
    train::Trainer t(c, world());
    t.step();
    const auto m = t.step();
    const auto& s = t.strategy().last_sync();
    if (world().size() == 1) {
      EXPECT_EQ(m.working_bytes, 0u) << "one rank gathers nothing";
      EXPECT_EQ(s.gathers, 0u);
      continue;
    }
    // (prefetch + 1) gathered layers and two gradient buffers of a layer each.
    EXPECT_LE(m.working_bytes, (static_cast<std::size_t>(prefetch) + 1 + 2) * layer_bytes) << "prefetch " << prefetch;
    EXPECT_GT(m.working_bytes, 0u);
    // Every layer is gathered for forward and again for backward, but the last (backward
    // starts with the layer forward ended with, still gathered) and the first (its backward
    // forms no input gradient and reads no value).
    EXPECT_EQ(s.gathers, 2 * c.layers - 2) << "prefetch " << prefetch;
    // Forward prefetches every layer but the first, backward every layer but the last and the first.
    EXPECT_EQ(s.gathers_prefetched, prefetch == 0 ? 0 : 2 * c.layers - 3) << "prefetch " << prefetch;
  }
}

TEST(Zero, StageThreeGathersTheLayerForwardEndsWithOnceAndTheFirstForForwardOnly) {
  if (world().size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  // With K micro-steps (and --zero.prefetch 1): the first forward gathers every layer; each
  // backward starts with the layer forward ended with and needs no value of the first layer
  // (it forms no input gradient), so gathers L - 2 and ends with the second; the next forward
  // gathers the first and finds the second still there, L - 2 + 1. In all
  // 2(L - 1) + (K - 1)(2L - 3).
  auto c = small_config();
  c.layers = 4;
  c.zero_stage = 3;
  c.zero.prefetch = 1;
  c.global_batch = 48;  // divides over 2-4 ranks x 1, 2 or 4 micro-steps
  for (std::int64_t accum : {1, 2, 4}) {
    c.accum = accum;
    train::Trainer t(c, world());
    for (int step = 0; step < 2; ++step) {
      t.step();
      const auto& s = t.strategy().last_sync();
      const std::size_t passes = 2 * static_cast<std::size_t>(accum);
      EXPECT_EQ(s.gathers, 2 * (c.layers - 1) + (passes / 2 - 1) * (2 * c.layers - 3))
          << "accumulation " << accum << ", step " << step;
    }
  }
}

TEST(Zero, StageThreeGathersAOneLayerModelOncePerStep) {
  if (world().size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  // The one layer is both the first and the last: the first forward gathers it, backward
  // reads no value of it (it forms no input gradient), and the layer a pass ends with stays
  // gathered for the next pass, so later micro-steps find it there. The optimizer changes
  // it, so the next step gathers it again.
  auto c = small_config();
  c.layers = 1;
  c.zero_stage = 3;
  c.global_batch = 48;
  for (int prefetch : {0, 1}) {
    c.zero.prefetch = prefetch;
    for (std::int64_t accum : {1, 2, 4}) {
      c.accum = accum;
      train::Trainer t(c, world());
      for (int step = 0; step < 2; ++step) {
        t.step();
        EXPECT_EQ(t.strategy().last_sync().gathers, 1u)
            << "prefetch " << prefetch << ", accumulation " << accum << ", step " << step;
      }
    }
  }
}

TEST(Zero, StagesOneAndTwoSendWhatDDPSendsAndStageThreeHalfAgainMoreButTwoLayers) {
  if (world().size() == 1) GTEST_SKIP() << "one rank sends nothing";
  auto c = small_config();
  c.steps = 1;
  double bytes[4] = {};
  for (int stage = 0; stage <= 3; ++stage) {
    c.zero_stage = stage;
    train::Trainer t(c, world());
    bytes[stage] = t.step().comm_bytes;
  }
  ASSERT_GT(bytes[0], 0);
  EXPECT_NEAR(bytes[1] / bytes[0], 1.0, 0.05);
  EXPECT_NEAR(bytes[2] / bytes[0], 1.0, 0.05);
  // DDP's all-reduce moves 2 Ψ; stage 3 reduces Ψ and gathers Ψ twice, less the last layer,
  // which forward and backward share (one step, no accumulation), and less the first layer,
  // whose backward reads no value.
  const double layer = static_cast<double>(c.dim * c.dim + c.dim), psi = static_cast<double>(c.layers) * layer;
  const double want = (psi + 2 * psi - 2 * layer) / (2 * psi);
  EXPECT_NEAR(bytes[3] / bytes[0], want, 0.05 * want);
}

TEST(Zero, StageTwoReducesTheFirstBucketWhileBackwardStillRuns) {
  if (world().size() == 1) GTEST_SKIP() << "one rank reduces nothing";
  auto c = small_config();
  c.zero_stage = 2;
  c.zero.bucket_mb = 4.0 * 30 * 29 / (1024 * 1024);  // about a layer per bucket
  train::Trainer t(c, world());
  t.step();
  const auto& s = t.strategy().last_sync();
  ASSERT_GE(t.zero().buckets().size(), 3u);
  ASSERT_FALSE(s.ready_at_launch.empty());
  EXPECT_LT(s.ready_at_launch.front(), t.parameters().parameters().size());
  EXPECT_EQ(s.buckets_launched_during_backward, t.zero().buckets().size());
}

TEST(Zero, AModelTooLargeForDDPUnderTheBudgetTrainsWithStageThree) {
  if (world().size() == 1) GTEST_SKIP() << "sharding over one rank saves nothing";
  auto c = small_config();
  c.layers = 4;
  c.dim = 256;
  c.synthetic_samples = 48;
  c.teacher_layers = 1;
  c.steps = 2;
  const int n = world().size();
  auto stage3 = c;
  stage3.zero_stage = 3;
  const double ddp_need = c.estimate_memory(n).total(), zero_need = stage3.estimate_memory(n).total();
  ASSERT_LT(zero_need, ddp_need);
  c.max_rank_bytes = stage3.max_rank_bytes = (ddp_need + zero_need) / 2;
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "with DDP");
  try {
    train::Trainer refused(c, world());
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--zero.max_rank_bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("--parallel.zero"), std::string::npos) << "the message must name a stage that fits: " << what;
  }
  train::Trainer t(stage3, world());
  t.run();
  EXPECT_EQ(t.steps_done(), 2);
}

// The memory check's estimate of the buckets stages 1 and 2 lend bounds what a step uses,
// and counts one bucket where one holds the whole model (it counted two, and put stage 2
// above DDP for a small model).
TEST(Zero, BucketEstimateBoundsTheMeasuredBuckets) {
  if (world().size() == 1) GTEST_SKIP() << "one rank lends no buckets";
  const int n = world().size();
  for (const bool one_bucket : {true, false})
    for (int stage : {1, 2}) {
      auto c = small_config();
      c.layers = 4;
      c.dim = 64;
      c.steps = 2;
      c.zero_stage = stage;
      c.ddp.grad_dtype = DType::BFloat16;  // stage 1 lends buckets only to convert the gradients
      c.zero.bucket_mb = one_bucket ? 1.0 : 0.02;
      train::Trainer t(c, world());
      const auto m = t.step();
      const double estimate = c.estimate_memory(n).working;
      const std::string what = "stage " + std::to_string(stage) + (one_bucket ? ", one bucket" : ", several buckets");
      EXPECT_EQ(t.zero().buckets().size() == 1, one_bucket) << what;
      EXPECT_LE(static_cast<double>(m.working_bytes), estimate) << what;
      if (one_bucket) {
        EXPECT_LE(estimate, 1.01 * static_cast<double>(m.working_bytes)) << what;
      }
    }
}

// The calls of a step, driven by hand in DataParallelStrategy's order, and out of it: a
// step begun without new_step() added the last step's gradients to its own at stages 2 and
// 3 (and skipped buckets' updates), and a new step without finish_step() left each rank's
// copy of the others' shards a step old at stages 1 and 2, both in silence.
TEST(Zero, AStepOutOfOrderIsRefused) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    nn::ParameterStore store;
    nn::MLP model(store, 2, 8);
    parallel::ZeroOptions options;
    options.stage = stage;
    parallel::ZeroDataParallel zero(model, store, world(), options);
    store.initialize(3);
    View2D<float> x("x", 4, 8), dy("dy", 4, 8);
    Kokkos::deep_copy(x, 0.5f);
    Kokkos::deep_copy(dy, 0.25f);
    const auto pass = [&] {
      model.forward(x);
      model.backward(dy);
      zero.end_backward();
    };
    zero.new_step();
    zero.begin_step();
    pass();
    zero.finish_gradient_sync();
    // The optimizer's update would run here; then its shards must be shared before a new step.
    if (world().size() > 1 && stage < 3)
      EXPECT_THROW_WITH(zero.new_step(), Error,
                        "ZeRO stage " + std::to_string(stage) +
                            ": new_step() after an update without finish_step(): the ranks' updated shards were not "
                            "shared");
    zero.finish_step();
    // The next step without new_step(): refused as it begins, before any gradient is added.
    EXPECT_THROW_WITH(zero.begin_step(), Error,
                      "ZeRO: begin_step() after the last step's finish_gradient_sync() without new_step(): the last "
                      "step's gradients would be added to this one's; call new_step() at the start of every "
                      "optimizer step");
    // Or at the first gradient backward reports, for a micro-step that calls no begin_step()
    // (gradient accumulation's early ones). On 1 rank nothing is hooked.
    if (world().size() > 1)
      EXPECT_THROW_WITH(pass(), Error, "ZeRO: a backward pass after the last step's finish_gradient_sync()");
    world().barrier();
  }
}

// A model file's gather brings the whole model to rank 0 alone: the other ranks hold nothing
// more than their shards (a ZeRO-3 save held the whole model twice on every rank).
TEST(Zero, TheValuesGatheredForOneRankReachItAlone) {
  auto& w = world();
  for (const auto& l : kLayouts) {
    SCOPED_TRACE(label(l, 3));
    train::Trainer t(with(small_config(), l, 3), w);
    t.step();
    const auto everywhere = parallel::gather_values(t.parameters(), t.data_parallel());
    for (int root : {0, w.size() - 1}) {
      const auto at_root = parallel::gather_values(t.parameters(), t.data_parallel(), root);
      if (w.rank() == root)
        EXPECT_EQ(at_root, everywhere) << "root " << root;
      else
        EXPECT_TRUE(at_root.empty()) << "root " << root;
    }
  }
  train::Trainer t(with(small_config(), kLayouts[0], 3), w);
  EXPECT_THROW_WITH(parallel::gather_values(t.parameters(), t.data_parallel(), w.size()), ConfigError,
                    "gather_values: root " + std::to_string(w.size()) + " is no rank of communicator");
}

// A root without the memory for the whole model says so, and every rank stops with it: the
// others had sent their shards and waited for the root until the timeout.
TEST(Zero, ARootWithoutMemoryForTheWholeModelStopsEveryRank) {
  auto& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs a rank besides the root";
  // NCCL's own allocations on the capped rank could fail first, inside NCCL.
  if (w.backend() == comm::Backend::Nccl) GTEST_SKIP() << "the address-space cap is for host-only backends";
  // 18.9 M values, 75 MB: above glibc's largest mmap threshold (32 MB), so the allocation
  // needs new address space, which the cap below does not leave.
  train::TrainConfig c = test::small_run(2, 3072, 5);
  c.teacher_layers = 1;
  c.zero_stage = 3;
  train::Trainer t(c, w);
  // Rank 0's address space capped at what it uses now and 2 MB more.
  std::optional<test::AddressSpaceCap> cap;
  const auto cap_rank_0 = [&] {
    if (w.rank() == 0) cap.emplace(std::size_t{2} << 20);
  };
  cap_rank_0();
  EXPECT_THROW_WITH(parallel::gather_values(t.parameters(), t.data_parallel(), 0), Error,
                    "gather_values: rank 0 of communicator 'world' has no memory for the whole model's 18880512 values "
                    "(75522048 bytes); every rank stops here");
  cap.reset();
  // With the memory, the same call gathers.
  EXPECT_EQ(parallel::gather_values(t.parameters(), t.data_parallel(), 0).size(),
            w.rank() == 0 ? t.parameters().numel() : 0u);
  // A store every rank keeps whole (DDP): rank 0 copies it alone, and a rank 0 without the
  // memory reaches the others through the save's own outcome (they waited in its broadcast).
  c.zero_stage = 0;
  train::Trainer ddp(c, w);
  cap_rank_0();
  EXPECT_THROW_WITH(checkpoint::save_model("never_written_" + std::to_string(w.size()) + ".h5", ddp.parameters(), w),
                    CheckpointError, "gather_values: no memory for the whole model's 18880512 values");
  cap.reset();
}

// A save of a store without memory is refused on every rank before any collective: rank 0
// alone failed (Kokkos' "extents of views don't match"), and the other ranks waited at the
// save's broadcast until the timeout.
TEST(Zero, ASaveOfAStoreWithoutMemoryStopsEveryRank) {
  if (!build_info().hdf5) GTEST_SKIP() << "model files need HDF5";
  nn::ParameterStore bare;
  nn::MLP model(bare, 2, 8);
  EXPECT_THROW_WITH(checkpoint::save_model("never_written.h5", bare, world()), CheckpointError,
                    "its parameters have no memory yet");
  world().barrier();  // every rank got here: none was left in the save
}

// A model file one rank cannot read (its node's copy missing) stops every rank that loads it
// together, naming that rank: the others had gone on to wait for it in their next collective.
TEST(Zero, ALoadThatFailsOnOneRankStopsEveryRank) {
  if (!build_info().hdf5) GTEST_SKIP() << "model files need HDF5";
  auto& w = world();
  train::Trainer t(with(small_config(), kLayouts[0], 3), w);
  // A name of this run's own: the suites of other backends and rank counts run beside it.
  const std::string path =
      "load_together_" + std::string(comm::backend_name(w.backend())) + "_" + std::to_string(w.size()) + ".h5";
  checkpoint::save_model(path, t.parameters(), t.data_parallel());
  const auto saved = whole(t, t.data_parallel());
  train::Trainer other(with(small_config(), kLayouts[0], 3), w);
  other.step();
  ASSERT_NE(whole(other, other.data_parallel()), saved) << "a step must change the values, or loading proves nothing";
  checkpoint::load_model(path, other.parameters(), other.data_parallel());
  EXPECT_EQ(whole(other, other.data_parallel()), saved);
  if (w.size() > 1) {
    const std::string mine = w.rank() == w.size() - 1 ? "missing_on_this_node.h5" : path;
    EXPECT_THROW_WITH(checkpoint::load_model(mine, other.parameters(), other.data_parallel()), CheckpointError,
                      "rank " + std::to_string(w.size() - 1) +
                          " of communicator 'world' could not load the model (model file 'missing_on_this_node.h5' "
                          "does not exist), and every rank stops");
  }
  // Where every rank fails alike, its words alone.
  EXPECT_THROW_WITH(checkpoint::load_model("nowhere.h5", other.parameters(), other.data_parallel()), CheckpointError,
                    "model file 'nowhere.h5' does not exist");
  w.barrier();
  if (w.rank() == 0) std::filesystem::remove(path);
}

TEST(Zero, BadSettingsAreConfigErrorsBeforeAnythingRuns) {
  auto c = small_config();
  c.zero_stage = 4;
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "--parallel.zero 4 is not a ZeRO stage");
  c.zero_stage = 3;
  c.zero.prefetch = -1;
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "--zero.prefetch");
  c.zero.prefetch = 1;
  c.zero.bucket_mb = 0;
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "--zero.bucket_mb");
  c.zero.bucket_mb = std::numeric_limits<double>::infinity();  // passed `> 0`
  EXPECT_THROW_WITH(train::Trainer(c, world()), ConfigError, "--zero.bucket_mb must be > 0 MiB");
}
}  // namespace
