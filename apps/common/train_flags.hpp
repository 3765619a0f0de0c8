#pragma once
// The training flags tessera-train and tessera-bench-train share: one vocabulary and one
// parser, so a run and its benchmark are described by the same command line.

#include <CLI/CLI.hpp>

#include <limits>
#include <string>

#include <tessera/train/trainer.hpp>

#include "validators.hpp"

namespace tessera::apps {

struct TrainFlags {
  train::TrainConfig config;
  std::string backend = "auto";
  std::string grad_dtype = "fp32";
  float lr = 0;

  /// Registers --model.*, --train.* (but --train.steps, which each app words for itself),
  /// --optim.*, --data.*, --parallel.*, --zero.* and --comm.* on `app`.
  void add_to(CLI::App& app) {
    auto& c = config;
    constexpr long long kMany = 1ll << 30;
    app.add_option("--model.layers", c.layers, "number of Linear layers")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--model.dim", c.dim, "width of every layer")->capture_default_str()->check(whole(1, kMany));
    app.add_option("--train.batch", c.global_batch, "global batch: samples per step over all ranks")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--train.accum", c.accum, "gradient accumulation micro-steps per step")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--train.seed", c.seed, "seed of initial values and data order")
        ->capture_default_str()
        ->check(whole(0, std::numeric_limits<long long>::max()));
    app.add_option("--optim.name", c.optimizer, "adamw or sgd")->capture_default_str();
    app.add_option("--optim.lr", lr, "learning rate (default: adamw 1e-3, sgd 0.01)")->check(positive(1e3));
    app.add_option("--optim.momentum", c.momentum, "sgd momentum")->capture_default_str()->check(non_negative());
    app.add_option("--train.overlap_optimizer", c.overlap_optimizer,
                   "update each gradient bucket as soon as it is reduced (true) or all at the end (false)")
        ->capture_default_str();
    app.add_option("--data.source", c.data, "synthetic, or an HDF5 file (see docs/training.md)")->capture_default_str();
    app.add_option("--data.samples", c.synthetic_samples, "samples in the synthetic task")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--data.teacher_layers", c.teacher_layers, "depth of the synthetic task's teacher (0: as the model)")
        ->capture_default_str()
        ->check(whole(0, kMany));
    app.add_option("--parallel.zero", c.zero_stage,
                   "0: DDP (every rank keeps the whole model); ZeRO stage 1 (optimizer state sharded), 2 (and "
                   "gradients) or 3 (and parameters); see docs/strategies.md")
        ->capture_default_str()
        ->check(whole(0, 3));
    app.add_option("--parallel.tp", c.tp,
                   "tensor-parallel group size: consecutive ranks split every layer pair column-row "
                   "(must divide the ranks and --model.dim); data parallelism runs over the rest")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--parallel.pp", c.pp,
                   "pipeline stages: the layers are cut into this many contiguous stages over the ranks")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--parallel.microbatches", c.microbatches,
                   "pipeline micro-batches each micro-step's batch is cut into (must divide it)")
        ->capture_default_str()
        ->check(whole(1, kMany));
    app.add_option("--parallel.schedule", c.schedule, "pipeline schedule: 1f1b or gpipe")
        ->capture_default_str()
        ->check(CLI::IsMember({"1f1b", "gpipe"}));
    app.add_option("--zero.prefetch", c.zero.prefetch, "ZeRO stage 3: layers gathered ahead of the one computing")
        ->capture_default_str()
        ->check(whole(0, kMany));
    app.add_option("--zero.bucket_mb", c.zero.bucket_mb, "ZeRO stages 1 and 2: gradient bucket size in MiB")
        ->capture_default_str()
        ->check(positive(1 << 20));
    app.add_option("--zero.max_rank_bytes", c.max_rank_bytes,
                   "refuse a run whose estimated memory per rank exceeds this many bytes (e.g. 16e9; 0: what the "
                   "node or GPU has)")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--comm.backend", backend, "auto, mpi, gloo or nccl")->capture_default_str();
    app.add_option("--comm.bucket_mb", c.ddp.bucket_mb, "DDP gradient bucket size in MiB")
        ->capture_default_str()
        ->check(positive(1 << 20));
    app.add_option("--comm.grad_dtype", grad_dtype, "gradients on the wire: fp32 or bf16")->capture_default_str();
  }

  /// After parsing: the configuration, checked.
  train::TrainConfig finish(const CLI::App& app) {
    if (app.count("--optim.lr")) config.lr = lr;
    const std::string wire = "--comm.grad_dtype '" + grad_dtype + "': gradients travel as fp32 or bf16";
    try {
      config.ddp.grad_dtype = parse_dtype(grad_dtype);
    } catch (const ConfigError&) {
      throw ConfigError(wire);
    }
    if (config.ddp.grad_dtype != DType::Float32 && config.ddp.grad_dtype != DType::BFloat16) throw ConfigError(wire);
    config.validate();
    return config;
  }
};

}  // namespace tessera::apps
