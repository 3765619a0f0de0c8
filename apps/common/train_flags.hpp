#pragma once
// The training flags tessera-train and tessera-bench-train share: one vocabulary and one
// parser, so a run and its benchmark are described by the same command line.

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <tessera/core/memory.hpp>
#include <tessera/train/trainer.hpp>

#include "validators.hpp"

namespace tessera::apps {

struct TrainFlags {
  train::TrainConfig config;
  std::string backend = "auto";
  std::string grad_dtype = "fp32";
  std::string overlap_backward = "auto";
  float lr = 0;

  /// Registers --model.*, --train.* (but --train.steps, which each app words for itself),
  /// --optim.*, --data.*, --parallel.*, --zero.* and --comm.* on `app`.
  void add_to(CLI::App& app) {
    auto& c = config;
    constexpr long long kMany = 1ll << 30;
    app.add_option("--model.layers", c.layers, "number of Linear layers")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    app.add_option("--model.dim", c.dim, "width of every layer")->capture_default_str()->transform(whole(1, kMany));
    app.add_option("--train.batch", c.global_batch, "global batch: samples per step over all ranks and micro-steps")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    app.add_option("--train.accum", c.accum, "gradient accumulation micro-steps per step")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    app.add_option("--train.seed", c.seed, "seed of initial values and data order")
        ->capture_default_str()
        ->transform(whole(0, std::numeric_limits<long long>::max()));
    // Names of things (optimizer, schedule, backend, dtype) are taken in any case.
    app.add_option("--optim.name", c.optimizer, "optimizer")
        ->capture_default_str()
        ->transform(one_of({"adamw", "sgd"}, "an optimizer Tessera has"));
    app.add_option("--optim.lr", lr, "learning rate; adamw's default is 1e-3, sgd's 0.01")->check(positive(1e3));
    app.add_option("--optim.momentum", c.momentum, "sgd momentum: 0.9 is usual, 0 is none")
        ->capture_default_str()
        ->check(fraction());
    app.add_option("--train.overlap_optimizer", c.overlap_optimizer,
                   "update each gradient bucket as soon as it is reduced; false: all at the end")
        ->default_str(c.overlap_optimizer ? "true" : "false")
        // CLI11 alone takes any number (2, -1) and "enable" as a truth value.
        ->transform(one_of({"true", "false"}, "", {"on", "off", "yes", "no", "1", "0"}, " (nor on/off, yes/no, 1/0)"));
    // An empty name (a script's unset $DATA) is a usage error, as --metrics '' is.
    app.add_option("--data.source", c.data, "synthetic, or an HDF5 file: see docs/training.md")
        ->capture_default_str()
        ->check(file_name("give synthetic, or an HDF5 file"));
    app.add_option("--data.samples", c.synthetic_samples, "samples in the synthetic task")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    // A random teacher much deeper than this gives near-constant targets (and its data takes
    // minutes to make), so the depth is bounded.
    app.add_option("--data.teacher_layers", c.teacher_layers,
                   "depth of the synthetic task's teacher; 0: as deep as the model")
        ->capture_default_str()
        ->transform(whole(0, 1024));
    app.add_option("--parallel.zero", c.zero_stage,
                   "0: DDP, every rank keeps the whole model; ZeRO stage 1 shards the optimizer state, 2 the "
                   "gradients too, 3 the parameters too; see docs/strategies.md")
        ->capture_default_str()
        ->transform(whole(0, 3));
    app.add_option("--parallel.tp", c.tp,
                   "tensor-parallel group size: consecutive ranks split every layer pair column-row; it "
                   "must divide the ranks and --model.dim, and data parallelism runs over the rest")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    app.add_option("--parallel.pp", c.pp,
                   "pipeline stages: the layers are cut into this many contiguous stages over the ranks")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    app.add_option("--parallel.microbatches", c.microbatches,
                   "pipeline micro-batches each micro-step's batch is cut into; must divide it")
        ->capture_default_str()
        ->transform(whole(1, kMany));
    app.add_option("--parallel.schedule", c.schedule, "pipeline schedule: 1f1b or gpipe")
        ->capture_default_str()
        ->transform(one_of({"1f1b", "gpipe"}, "a pipeline schedule Tessera has"));
    app.add_option("--zero.prefetch", c.zero.prefetch, "ZeRO stage 3: layers gathered ahead of the one computing")
        ->capture_default_str()
        ->transform(whole(0, kMany));
    app.add_option("--zero.bucket_mb", c.zero.bucket_mb, "ZeRO stages 1 and 2: gradient bucket size in MiB")
        ->capture_default_str()
        ->check(positive(1 << 20));
    app.add_option("--zero.max_rank_bytes", c.max_rank_bytes,
                   "refuse a run whose estimated memory per rank exceeds this many bytes, e.g. 16e9; 0: what the "
                   "node or GPU has")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--comm.backend", backend,
                   "auto: NCCL in a GPU build where every rank has a GPU of its own, else MPI")
        ->capture_default_str()
        ->option_text("{auto,mpi,gloo,nccl}")
        ->check(parsed_by(comm::parse_backend));
    app.add_option("--comm.bucket_mb", c.ddp.bucket_mb, "DDP gradient bucket size in MiB")
        ->capture_default_str()
        ->check(positive(1 << 20));
    app.add_option("--comm.grad_dtype", grad_dtype, "gradients on the wire")
        ->capture_default_str()
        ->option_text("{fp32,bf16}")
        ->check(parsed_by(wire_dtype));
    app.add_option("--comm.overlap_backward", overlap_backward,
                   "DDP: reduce each gradient bucket during backward, as soon as it is ready (true), or after "
                   "backward (false); auto: true, but false where gradients are in host memory and a rank has "
                   "one core")
        ->capture_default_str()
        ->transform(
            one_of({"auto", "true", "false"}, "", {"on", "off", "yes", "no", "1", "0"}, " (nor on/off, yes/no, 1/0)"));
  }

  /// The dtype gradients travel as, from --comm.grad_dtype: fp32 or bf16 (any name of them).
  static DType wire_dtype(const std::string& name) {
    const std::string wire = "'" + name + "' is not a dtype gradients travel as; use fp32 or bf16";
    DType t = DType::Float32;
    try {
      t = parse_dtype(name);
    } catch (const ConfigError&) {
      throw ConfigError(wire);
    }
    if (t != DType::Float32 && t != DType::BFloat16) throw ConfigError(wire);
    return t;
  }

  /// After parsing: the configuration, checked for a job of `ranks` ranks.
  train::TrainConfig finish(const CLI::App& app, int ranks) {
    // The names were checked, and lower-cased, as the command line was read (one_of).
    if (app.count("--optim.lr")) config.lr = lr;
    config.ddp.grad_dtype = wire_dtype(grad_dtype);
    const std::string& o = overlap_backward;
    config.ddp.overlap_backward = o == "auto"                                          ? parallel::BackwardOverlap::Auto
                                  : o == "true" || o == "on" || o == "yes" || o == "1" ? parallel::BackwardOverlap::On
                                                                                       : parallel::BackwardOverlap::Off;
    config.validate(ranks);
    return config;
  }

  /// Settings the user gave (on the command line or in --config) that this run does not use,
  /// each saying why: a flag is never ignored in silence. Call after finish().
  std::vector<std::string> unused(const CLI::App& app, int ranks) const {
    const auto& c = config;
    std::vector<std::string> notes;
    const auto given = [&](const char* flag) { return app.count(flag) > 0; };
    if (given("--optim.momentum") && c.optimizer != "sgd")
      notes.push_back("--optim.momentum is sgd's; --optim.name " + c.optimizer + " does not use it");
    if (c.pp == 1)
      for (const char* flag : {"--parallel.microbatches", "--parallel.schedule"})
        if (given(flag))
          notes.push_back(std::string(flag) + " applies to pipeline stages, and this run has none (--parallel.pp 1)");
    const std::string run =
        c.zero_stage == 0 ? "DDP (--parallel.zero 0)" : "ZeRO stage " + std::to_string(c.zero_stage);
    if (given("--zero.prefetch") && c.zero_stage != 3)
      notes.push_back(
          "--zero.prefetch applies to ZeRO stage 3 (--parallel.zero 3), which gathers layers; this run is " + run);
    if (given("--zero.bucket_mb") && c.zero_stage != 1 && c.zero_stage != 2)
      notes.push_back("--zero.bucket_mb sizes the buckets of ZeRO stages 1 and 2; " +
                      (c.zero_stage == 0 ? run + " takes --comm.bucket_mb" : run + " reduces a layer at a time"));
    if (given("--comm.bucket_mb") && c.zero_stage != 0)
      notes.push_back("--comm.bucket_mb sizes DDP's buckets; " +
                      (c.zero_stage == 3 ? run + " reduces a layer at a time" : run + " takes --zero.bucket_mb"));
    if (given("--comm.overlap_backward") && c.zero_stage != 0)
      notes.push_back("--comm.overlap_backward applies to DDP (--parallel.zero 0); " + run +
                      (c.zero_stage == 3 ? " reduces each layer as backward leaves it"
                                         : " reduces each bucket as backward completes it"));
    // One data-parallel rank (every rank holds a different tensor-parallel block or pipeline
    // stage): nothing to shard, nothing sent over data parallelism.
    const long long model_ranks = static_cast<long long>(c.tp) * c.pp;
    if (model_ranks > 0 && ranks % model_ranks == 0 && ranks / model_ranks == 1) {
      const std::string layout =
          std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
          (model_ranks > 1 ? " = --parallel.tp " + std::to_string(c.tp) + " x --parallel.pp " + std::to_string(c.pp)
                           : std::string());
      if (c.zero_stage > 0)
        notes.push_back("--parallel.zero " + std::to_string(c.zero_stage) +
                        " shards over the data-parallel ranks, and this run has one (" + layout +
                        "): nothing is sharded, and each rank keeps what DDP would");
      if (given("--comm.overlap_backward") && c.zero_stage == 0)
        notes.push_back(
            "--comm.overlap_backward overlaps DDP's reductions with backward, and this run has one "
            "data-parallel rank (" +
            layout + "): nothing is reduced");
      if (given("--comm.grad_dtype") && c.ddp.grad_dtype != DType::Float32)
        notes.push_back(
            "--comm.grad_dtype sets the gradients data parallelism sends, and this run has one "
            "data-parallel rank (" +
            layout + "): none are sent");
    }
    if (c.tp > 1 && c.layers == 1)
      notes.push_back("--parallel.tp " + std::to_string(c.tp) +
                      " cuts layers in column-row pairs, and the model's one layer is kept whole on every rank; give "
                      "--model.layers 2 or more");
    // Fewer micro-batches than stages: each stage waits for the others most of the step (the
    // pipeline's bubble, (pp - 1) / (microbatches + pp - 1) of it), which speeds nothing up.
    if (c.pp > 1 && c.microbatches < c.pp) {
      const auto idle = [&](int m) {
        return std::to_string(static_cast<int>(std::lround(100.0 * (c.pp - 1) / (m + c.pp - 1)))) + "%";
      };
      notes.push_back("--parallel.pp " + std::to_string(c.pp) + " with --parallel.microbatches " +
                      std::to_string(c.microbatches) + " leaves each stage idle about " + idle(c.microbatches) +
                      " of every step, waiting for the others; --parallel.microbatches " + std::to_string(4 * c.pp) +
                      " (4 x --parallel.pp, as is usual) would leave about " + idle(4 * c.pp));
    }
    if (c.data != "synthetic")
      for (const char* flag : {"--data.samples", "--data.teacher_layers"})
        if (given(flag))
          notes.push_back(std::string(flag) + " describes the synthetic task; this run reads its samples from '" +
                          c.data + "'");
    return notes;
  }

  /// Prints unused(app, ranks) on stderr as "NAME: note: ...", from rank 0 only.
  void print_unused(const CLI::App& app, const char* name, int ranks, bool root) const {
    if (!root) return;
    for (const auto& note : unused(app, ranks)) std::fprintf(stderr, "%s: note: %s\n", name, note.c_str());
    std::fflush(stderr);
  }
};

}  // namespace tessera::apps
