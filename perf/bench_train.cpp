// tessera-bench-train: where the time of a training step goes (forward, backward, exposed
// communication, optimizer) for any strategy tessera-train runs (the same --model.*,
// --train.*, --parallel.*, --zero.* and --comm.* flags), what each rank keeps in memory and
// sends, and how the step compares with its GEMMs alone, (DDP) with the floor of GEMMs +
// optimizer + all-reduces each run alone, and with its GEMMs plus every byte its
// memory-bound passes (GELU, bias gradients, loss, optimizer) move at the speed of a copy.
// All timed in the same run on every rank at once.
//
//   mpiexec -n 2 tessera-bench-train [--parallel.zero 0] [--model.dim 1024] [--bench.steps 30] --json FILE

#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../apps/common/app_main.hpp"
#include "../apps/common/machine_json.hpp"
#include "../apps/common/train_flags.hpp"
#include "kernels/gemm.hpp"

namespace {
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Per-step breakdown of training with any layout (DDP, ZeRO 1-3, tensor and pipeline parallelism): time, "
      "memory and traffic, and the step against its GEMMs alone. Takes tessera-train's flags that say what a step "
      "is (training, model, optimizer, data, parallelism, ZeRO, communication), not those of its output.",
      "mpiexec -n N tessera-bench-train"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  tessera::apps::TrainFlags flags;
  auto& c = flags.config;
  int steps = 30, warmup = 5, rounds = 3;
  std::string json_path, config_path;
  app.add_option("--config", config_path, "TOML file of tessera-train's settings")->option_text("FILE");
  std::int64_t train_steps = 0;
  app.add_option("--train.steps", train_steps,
                 "ignored here (tessera-train's config files set it): the benchmark runs --bench.warmup + "
                 "--bench.steps steps")
      ->transform(tessera::apps::whole(0, 1ll << 50));  // still a count of steps: -5 is a mistake, as in tessera-train
  flags.add_to(app);
  // The benchmark's own default: enough samples for its steps, made quickly.
  if (auto* samples = app.get_option_no_throw("--data.samples"))
    samples->description("samples in the synthetic task (default here: 8 x --train.batch, at least 1024)")
        ->default_str("");
  app.add_option("--bench.steps", steps, "timed steps")
      ->capture_default_str()
      ->transform(tessera::apps::whole(1, 100000));
  app.add_option("--bench.warmup", warmup, "untimed steps first")
      ->capture_default_str()
      ->transform(tessera::apps::whole(0, 100000));
  app.add_option(
         "--bench.rounds", rounds,
         "rounds that each time a share of the steps, then the GEMMs, optimizer, all-reduces, memory-bound passes "
         "and a copy alone")
      ->capture_default_str()
      ->transform(tessera::apps::whole(1, 1000));
  app.add_option("--json", json_path, "write the results as JSON")
      ->option_text("FILE")
      ->check(tessera::apps::file_name());
  // tessera-train's output flags have no place here: each is refused, as a usage error, with
  // what this benchmark does instead (not as an unknown option, which says nothing of why).
  const std::pair<const char*, const char*> train_only[] = {
      {"--metrics", "this benchmark writes its results with --json FILE"},
      {"--save", "this benchmark saves no model; train with tessera-train --save FILE"},
      {"--trace", "this benchmark writes no trace; trace a run of tessera-train with --trace FILE"},
      {"--progress", "this benchmark prints no progress, only its summary"},
  };
  const auto refuse = [](std::string name, std::string instead) {
    return [name, instead](const auto&...) { throw CLI::ValidationError(name, "tessera-train's option; " + instead); };
  };
  for (const auto& [name, instead] : train_only)
    app.add_option_function<std::string>(name, refuse(name, instead))->group("");
  // Refused whatever its value: --quiet=false is as much a tessera-train flag as --quiet.
  app.add_flag_function("--quiet", refuse("--quiet", "this benchmark prints no progress, only its summary"))->group("");

  return tessera::apps::run_app(argc, argv, app, tessera::apps::Outputs::AtEnd, [&](tessera::Session& session) {
    using namespace tessera;
    const std::string started_utc = apps::utc_now();
    c.steps = warmup + steps;
    if (rounds > steps)
      throw ConfigError("--bench.rounds " + std::to_string(rounds) + " is more than --bench.steps " +
                        std::to_string(steps) + ": each round times at least one step; give --bench.steps " +
                        std::to_string(rounds) + " or more, or fewer --bench.rounds");
    if (!app.count("--data.samples")) c.synthetic_samples = std::max<std::int64_t>(c.global_batch * 8, 1024);
    c = flags.finish(app, session.size());
    flags.print_unused(app, "tessera-bench-train", session.size(), session.rank() == 0);
    if (session.rank() == 0 && app.count("--train.steps"))
      std::fprintf(stderr,
                   "tessera-bench-train: note: --train.steps is tessera-train's; the benchmark runs "
                   "--bench.warmup + --bench.steps steps\n");
    // The results file is checked before any work, and written only when the run finished.
    apps::check_on_rank0(session, [&] {
      if (json_path.empty()) return std::string();
      if (auto why = apps::cannot_write("--json", json_path); !why.empty()) return why;
      return apps::same_file_twice({{"--json", json_path}},
                                   {{"--config", config_path}, {"--data.source", c.data == "synthetic" ? "" : c.data}});
    });
    if (session.rank() == 0)
      for (const auto& note : apps::leftover_copy_notes({{"--json", json_path}}))
        std::fprintf(stderr, "tessera-bench-train: note: %s\n", note.c_str());
    auto comm = comm::Communicator::create(comm::parse_backend(flags.backend));
    train::Trainer trainer(c, *comm);
    // The floor (GEMMs + optimizer + all-reduces alone) is defined for DDP without tensor
    // parallelism, whose step has nothing else to do.
    const bool ddp = c.zero_stage == 0 && c.tp == 1 && c.pp == 1;

    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    std::vector<double> step, fwd, bwd, exposed, opt, other, gemm, gemm_fwd, opt_alone, comm_alone, bubbles, idle;
    train::StepMetrics last;
    auto train_step = [&](bool keep) {
      const auto m = trainer.step();
      last = m;
      if (!keep) return;
      step.push_back(m.step_time_s);
      fwd.push_back(m.forward_s);
      bwd.push_back(m.backward_s);
      exposed.push_back(m.comm_exposed_s);
      opt.push_back(m.optimizer_s);
      other.push_back(m.step_time_s - m.forward_s - m.backward_s - m.comm_exposed_s - m.optimizer_s -
                      m.pipeline_idle_s);
      idle.push_back(m.pipeline_idle_s);
      if (c.pp > 1) bubbles.push_back(m.bubble_fraction);
    };
    // The process's peak resident memory is read after the untimed steps, before this
    // program allocates anything of its own: it is training's.
    for (int s = 0; s < std::max(warmup, 1); ++s) train_step(false);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double peak_rss = static_cast<double>(usage.ru_maxrss) * 1024;  // KiB on Linux

    // The same GEMMs the step runs (forward y = x W^T; backward dW = dy^T x for every layer
    // and dx = dy W for every layer but the first, whose input is data), on operands of the
    // same shapes and count (every layer its own weight, gradient and activations, so nothing
    // stays in cache that would not in training), on every rank at once as in training, with
    // nothing else. With tensor parallelism, the shapes of this rank's blocks; with pipeline
    // parallelism, a micro-step's rows as its micro-batches, each run in turn. The operands
    // hold random values, as training's do (a GPU's clock and power draw depend on the data:
    // constant operands run faster).
    const auto micro_batches = static_cast<std::size_t>(c.pp > 1 ? c.microbatches : 1);
    const auto b = static_cast<std::size_t>(c.global_batch / trainer.data_parallel().size() / c.accum) / micro_batches;
    std::mt19937 gen(static_cast<std::uint32_t>(1000 + session.rank()));
    const auto fill_random = [&gen](const View2D<float>& v, float scale) {
      auto h = Kokkos::create_mirror_view(v);
      std::uniform_real_distribution<float> u(-scale, scale);
      for (std::size_t i = 0; i < h.extent(0); ++i)
        for (std::size_t j = 0; j < h.extent(1); ++j) h(i, j) = u(gen);
      Kokkos::deep_copy(v, h);
    };
    std::vector<View2D<float>> acts, ws, dws, dys, dxs;
    std::vector<std::vector<std::int64_t>> weights;  // this rank's layers (its pipeline stage)
    for (const auto& p : trainer.parameters().parameters())
      if (p.shape.size() == 2) weights.push_back(p.held_shape());
    const std::size_t layers = weights.size();
    const bool first_stage = trainer.parameters().parameters().front().name == "layers.0.weight";
    for (std::size_t l = 0; l < layers; ++l) {
      const auto& held = weights[l];
      const auto out = static_cast<std::size_t>(held[0]), in = static_cast<std::size_t>(held[1]);
      acts.emplace_back("x", b, in);
      fill_random(acts.back(), 1.0f);
      ws.emplace_back("w", out, in);
      dws.emplace_back("dw", out, in);
      fill_random(ws.back(), 1.0f / std::sqrt(static_cast<float>(in)));
      dys.emplace_back("dy", b, out);
      fill_random(dys.back(), 0.01f);
      dxs.emplace_back("dx", b, in);
      if (l + 1 == layers) acts.emplace_back("y", b, out);
    }
    // The two other things a step cannot skip, each alone on every rank at once: the
    // optimizer's update of the parameters this rank updates, and (DDP) the gradient
    // buckets' all-reduces.
    const std::size_t numel = trainer.strategy().update_values().size();
    View1D<float> values("values", numel), grads("grads", numel);
    // The gradients as bf16, where the step sends them so (--comm.grad_dtype bf16).
    View1D<bfloat16> wire("wire", c.ddp.grad_dtype == DType::BFloat16 ? numel : 0);
    Kokkos::deep_copy(values, 0.5f);
    Kokkos::deep_copy(grads, 0.01f);
    // The step's optimizer (SGD with its momentum buffer where the step has one).
    std::unique_ptr<optim::Optimizer> optimizer;
    double optimizer_bytes = 0;  // what one update reads and writes
    if (c.optimizer == "sgd") {
      optim::SGDOptions o;
      o.momentum = c.momentum;
      optimizer = std::make_unique<optim::SGD>(values, grads, o);
      optimizer_bytes = static_cast<double>(numel) * sizeof(float) * (c.momentum > 0 ? 5 : 3);
    } else {
      optimizer = std::make_unique<optim::AdamW>(values, grads, optim::AdamWOptions{});
      optimizer_bytes = static_cast<double>(numel) * sizeof(float) * 7;  // reads p, g, m, v; writes p, m, v
    }

    // The step's other memory-bound passes, each alone, in the step's order, over buffers of
    // the step's shapes and of their own per layer: GELU forward after every layer but the
    // model's last, GELU backward, every layer's bias gradient (the same GEMV as the step's)
    // and, where this rank holds the model's last layer, the loss. With the bytes each must
    // move, and a copy timed the same way, they say how near the memory's bandwidth each
    // runs, and what a step whose every memory-bound byte moved at the copy's speed would take.
    const bool host_memory = memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Host;
    struct PassLayer {
      std::size_t out = 0;
      bool gelu = false;  // a GELU follows the layer
      View2D<float> pre, dy, bias_grad;
      std::unique_ptr<nn::GELU> act;
    };
    std::vector<PassLayer> pass_layers;
    bool last_layer = false;
    double pass_bytes[4] = {};  // GELU forward, GELU backward, bias gradients, loss
    // Per element, what a GELU pass reads and writes: on a CPU, forward also writes Phi(x) and
    // backward reads it; a GPU computes it again.
    const double gelu_forward_bytes = host_memory ? 12 : 8, gelu_backward_bytes = host_memory ? 16 : 12;
    for (const auto& p : trainer.parameters().parameters()) {
      if (p.shape.size() != 2) continue;
      const std::size_t index = std::stoul(p.name.substr(p.name.find('.') + 1));  // "layers.<i>.weight"
      PassLayer l;
      l.out = static_cast<std::size_t>(p.held_shape()[0]);
      l.gelu = index + 1 < c.layers;
      last_layer = last_layer || !l.gelu;
      l.pre = View2D<float>("pre", b, l.out);
      Kokkos::deep_copy(l.pre, 0.5f);
      l.dy = View2D<float>("dy", b, l.out);
      Kokkos::deep_copy(l.dy, 0.01f);
      l.bias_grad = View2D<float>("bias_grad", l.out, 1);
      if (l.gelu) l.act = std::make_unique<nn::GELU>();
      const double elements = static_cast<double>(b) * static_cast<double>(l.out);
      if (l.gelu) {
        pass_bytes[0] += elements * gelu_forward_bytes;
        pass_bytes[1] += elements * gelu_backward_bytes;
      }
      pass_bytes[2] += (elements + static_cast<double>(b + l.out)) * sizeof(float);  // dy, the ones, the gradient
      pass_layers.push_back(std::move(l));
    }
    View2D<float> ones("ones", b, 1), target, loss_grad;
    Kokkos::deep_copy(ones, 1.0f);
    View1D<std::int64_t> labels;
    const bool labelled = trainer.dataset().has_labels();
    if (last_layer) {
      const std::size_t out = pass_layers.back().out;
      loss_grad = View2D<float>("loss_grad", b, out);
      if (labelled) {
        labels = View1D<std::int64_t>("labels", b);  // class 0: every label valid
      } else {
        target = View2D<float>("target", b, out);
        Kokkos::deep_copy(target, 0.25f);
      }
      // MSE reads the output and the target and writes the gradient; cross-entropy reads each
      // row of logits from memory once (its three passes over a row hit the cache) and writes it.
      pass_bytes[3] = static_cast<double>(b) * static_cast<double>(out) * sizeof(float) * (labelled ? 2 : 3);
    }
    // The passes of every micro-step (and pipeline micro-batch).
    for (auto& bytes : pass_bytes) bytes *= static_cast<double>(c.accum) * static_cast<double>(micro_batches);
    const double copy_bytes = 2.0 * static_cast<double>(numel) * sizeof(float);
    std::vector<double> pass_alone[4], copy_alone;

    // A step runs --train.accum micro-steps (each as its pipeline micro-batches of b rows): the
    // GEMMs and the passes below run as many times, the optimizer and the all-reduces once.
    auto gemms = [&](bool keep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      double forward = 0;
      for (std::size_t micro = 0; micro < static_cast<std::size_t>(c.accum) * micro_batches; ++micro) {
        const auto f0 = Clock::now();
        for (std::size_t l = 0; l < layers; ++l)
          kernels::gemm(kernels::Trans::No, kernels::Trans::Yes, 1.0f, acts[l], ws[l], 0.0f, acts[l + 1]);
        Kokkos::fence();
        forward += seconds(f0, Clock::now());
        for (std::size_t l = layers; l-- > 0;) {
          kernels::gemm(kernels::Trans::Yes, kernels::Trans::No, 1.0f, dys[l], acts[l], 0.0f, dws[l]);
          if (l > 0 || !first_stage)
            kernels::gemm(kernels::Trans::No, kernels::Trans::No, 1.0f, dys[l], ws[l], 0.0f, dxs[l]);
        }
        Kokkos::fence();
      }
      if (!keep) return;
      gemm.push_back(seconds(t0, Clock::now()));
      gemm_fwd.push_back(forward);
    };
    auto optimizer_alone = [&](bool keep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      optimizer->step();
      Kokkos::fence();
      if (keep) opt_alone.push_back(seconds(t0, Clock::now()));
    };
    auto all_reduces_alone = [&](bool keep) {
      if (!ddp) return;  // no one-op floor for ZeRO or tensor parallelism; their time is in the breakdown
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      // A sum, as in the step: the trainer divides the loss gradient by the ranks instead. In
      // the dtype the step sends (--comm.grad_dtype).
      for (const auto& bucket : trainer.ddp().buckets()) {
        if (c.ddp.grad_dtype == DType::BFloat16)
          comm->all_reduce(View1D<bfloat16>(wire.data() + bucket.offset, bucket.numel), comm::ReduceOp::Sum);
        else
          comm->all_reduce(View1D<float>(grads.data() + bucket.offset, bucket.numel), comm::ReduceOp::Sum);
      }
      if (keep) comm_alone.push_back(seconds(t0, Clock::now()));
    };
    auto passes_alone = [&](bool keep) {
      MPI_Barrier(MPI_COMM_WORLD);
      double took[4] = {0, 0, 0, 0};
      for (std::size_t micro = 0; micro < static_cast<std::size_t>(c.accum) * micro_batches; ++micro) {
        Clock::time_point t[5];
        t[0] = Clock::now();
        for (auto& l : pass_layers)
          if (l.gelu) l.act->forward(l.pre);
        Kokkos::fence();
        t[1] = Clock::now();
        for (std::size_t k = pass_layers.size(); k-- > 0;)
          if (pass_layers[k].gelu) pass_layers[k].act->backward(pass_layers[k].dy);
        Kokkos::fence();
        t[2] = Clock::now();
        for (auto& l : pass_layers)
          kernels::gemm(kernels::Trans::Yes, kernels::Trans::No, 1.0f, l.dy, ones, 0.0f, l.bias_grad);
        Kokkos::fence();
        t[3] = Clock::now();
        if (last_layer) {
          if (labelled)
            nn::cross_entropy_loss(pass_layers.back().pre, labels, loss_grad);
          else
            nn::mse_loss(pass_layers.back().pre, target, loss_grad);
        }
        Kokkos::fence();
        t[4] = Clock::now();
        for (int k = 0; k < 4; ++k) took[k] += seconds(t[k], t[k + 1]);
      }
      if (keep)
        for (int k = 0; k < 4; ++k) pass_alone[k].push_back(took[k]);
    };
    auto copy = [&](bool keep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      Kokkos::deep_copy(values, grads);
      Kokkos::fence();
      if (keep) copy_alone.push_back(seconds(t0, Clock::now()));
    };
    // Each part is timed in every round, one after the other, so that a change in what else
    // the machine runs touches the step and its floor alike.
    for (int s = 0; s < std::max(warmup, 1); ++s) {  // once at least: GELU allocates in its first pass
      gemms(false);
      optimizer_alone(false);
      all_reduces_alone(false);
      passes_alone(false);
      copy(false);
    }
    // A line per round on stderr (rank 0's own times), so that a long run shows it is alive
    // while the report waits for the end.
    const auto round_done = [&](int r, int done) {
      if (session.rank() != 0) return;
      std::fprintf(stderr, "tessera-bench-train: round %d/%d done, %d of %d timed steps; step %.2f ms, GEMMs %.2f ms\n",
                   r + 1, rounds, done, steps, median(step) * 1e3, median(gemm) * 1e3);
      std::fflush(stderr);
    };
    for (int r = 0, done = 0; r < rounds; ++r) {
      const int n = (steps - done) / (rounds - r);
      done += n;
      for (int s = 0; s < n; ++s) train_step(true);
      for (int s = 0; s < n; ++s) gemms(true);
      for (int s = 0; s < n; ++s) optimizer_alone(true);
      for (int s = 0; s < n; ++s) all_reduces_alone(true);
      for (int s = 0; s < n; ++s) passes_alone(true);
      for (int s = 0; s < n; ++s) copy(true);
      round_done(r, done);
    }
    pass_layers.clear();
    acts.clear();
    ws.clear();
    dws.clear();
    dys.clear();
    dxs.clear();

    // Report the medians of the rank whose step is slowest, all of them its own, so that the
    // parts add up to its step (the largest of each part, from different ranks, did not).
    double med[11] = {median(step),  median(fwd),  median(bwd),      median(exposed),   median(opt),
                      median(other), median(gemm), median(gemm_fwd), median(opt_alone), ddp ? median(comm_alone) : 0,
                      median(idle)};
    struct {
      double step;
      int rank;
    } slowest{med[0], session.rank()};
    MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    MPI_Bcast(med, 11, MPI_DOUBLE, slowest.rank, MPI_COMM_WORLD);
    // The memory-bound parts: the slowest rank's medians and the most bytes a rank moves.
    // 0 GELU forward, 1 GELU backward, 2 bias gradients, 3 loss, 4 optimizer, 5 copy.
    double mem_s[6] = {
        median(pass_alone[0]), median(pass_alone[1]), median(pass_alone[2]), median(pass_alone[3]), med[8],
        median(copy_alone)};
    double mem_bytes[6] = {pass_bytes[0], pass_bytes[1], pass_bytes[2], pass_bytes[3], optimizer_bytes, copy_bytes};
    MPI_Allreduce(MPI_IN_PLACE, mem_s, 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, mem_bytes, 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const char* mem_names[6] = {"gelu_forward", "gelu_backward", "bias_grad", "loss", "optimizer", "copy"};
    const double copy_rate = mem_bytes[5] / mem_s[5];
    // The step at the copy's speed, rank by rank (pipeline stages make different passes): its
    // GEMMs, and every byte it moves outside them at its own copy's speed; the slowest rank's.
    // Bias gradients summed in the weight-gradient GEMMs' epilogue move no bytes of their own:
    // their GEMVs are timed alone all the same, and count for the share of the bias gradients
    // that the step summed with them (with --train.accum, the micro-steps after the first add
    // theirs with the GEMV). The JSON has the largest share of any rank.
    const auto bias_counts = kernels::gemm_bias_counts();
    const auto bias_grads = static_cast<double>(bias_counts.grad_epilogue + bias_counts.grad_separate);
    const double my_gemv_share = bias_grads > 0 ? static_cast<double>(bias_counts.grad_separate) / bias_grads : 1.0;
    double gemv_share = my_gemv_share;
    MPI_Allreduce(MPI_IN_PLACE, &gemv_share, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double my_bytes = optimizer_bytes + my_gemv_share * pass_bytes[2];
    for (int k : {0, 1, 3}) my_bytes += pass_bytes[k];
    const double my_copy_speed_step = median(gemm) + my_bytes * median(copy_alone) / copy_bytes;
    std::vector<double> copy_speed_steps(static_cast<std::size_t>(comm->size()));
    MPI_Allgather(&my_copy_speed_step, 1, MPI_DOUBLE, copy_speed_steps.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double memory_bound_bytes = 0;  // the most any rank moves
    MPI_Allreduce(&my_bytes, &memory_bound_bytes, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double copy_speed_step = *std::max_element(copy_speed_steps.begin(), copy_speed_steps.end());
    // Memory and traffic of the rank that holds and sends the most.
    double bytes[6] = {static_cast<double>(last.model_state_bytes),
                       static_cast<double>(last.working_bytes),
                       peak_rss,
                       last.comm_bytes,
                       last.tp_comm_bytes,
                       last.pp_comm_bytes};
    MPI_Allreduce(MPI_IN_PLACE, bytes, 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // The pipeline's bubble: each rank's median share of idle time (per rank, and the largest).
    const double my_bubble = bubbles.empty() ? 0 : median(bubbles);
    std::vector<double> rank_bubbles(static_cast<std::size_t>(comm->size()));
    MPI_Allgather(&my_bubble, 1, MPI_DOUBLE, rank_bubbles.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
    const double bubble = *std::max_element(rank_bubbles.begin(), rank_bubbles.end());
    const double compute_step = med[0] - med[5];  // the step without zeroing, loading and the loss average
    // No schedule on these cores can beat doing the three unavoidable parts back to back.
    const double floor = med[6] + med[8] + med[9];
    // Whether DDP reduced its buckets during backward (null for the other strategies and one
    // data-parallel rank, which reduces nothing).
    const auto* ddp_strategy = trainer.data_parallel().size() > 1
                                   ? dynamic_cast<const parallel::DistributedDataParallel*>(&trainer.strategy())
                                   : nullptr;
    const bool during_backward = ddp_strategy != nullptr && ddp_strategy->overlaps_backward();
    const std::string layout = trainer.layout();
    const auto rate_text = [](double bytes_per_s) {
      char text[32];
      if (bytes_per_s >= 1e12)
        std::snprintf(text, sizeof text, "%.2f TB/s", bytes_per_s / 1e12);
      else
        std::snprintf(text, sizeof text, "%.1f GB/s", bytes_per_s / 1e9);
      return std::string(text);
    };
    // Bytes moved by each memory-bound part (per rank, the most), and its speed as a share of
    // the copy's.
    const auto memory_bound_json = [&] {
      nlohmann::json bytes_json, share;
      for (int k = 0; k < 6; ++k) {
        bytes_json[mem_names[k]] = mem_bytes[k];
        if (k < 5)
          share[mem_names[k]] =
              mem_bytes[k] > 0 ? nlohmann::json(mem_bytes[k] / mem_s[k] / copy_rate) : nlohmann::json(nullptr);
      }
      return nlohmann::json{{"copy_bytes_per_s", copy_rate},
                            {"bias_grad_in_step", gemv_share > 0},
                            {"bias_grad_gemv_share", gemv_share},
                            {"bytes", bytes_json},
                            {"total_bytes", memory_bound_bytes},
                            {"over_copy_bandwidth", share},
                            {"copy_speed_step_s_per_rank", copy_speed_steps}};
    };
    if (session.rank() == 0) {
      // Where the GEMMs run: a GPU build's are cuBLAS's on the rank's GPU, a host build's the
      // BLAS's threads.
      const std::string gpu = apps::gpu_placement(session);
      const std::string where =
          !gpu.empty()
              ? gpu
              : "BLAS threads " +
                    (host_threads().threads > 0 ? std::to_string(host_threads().threads) : std::string("?")) +
                    " per rank" +
                    (host_threads().kokkos_threads > 0
                         ? ", Kokkos " + host_threads().kokkos_backend + " " +
                               std::to_string(host_threads().kokkos_threads) +
                               (host_threads().kokkos_reason.empty() ? "" : " (" + host_threads().kokkos_reason + ")")
                         : "");
      std::printf(
          "# tessera-bench-train: %d rank%s (%s, %s, layout %s), MLP %zu x %zu, global batch %lld, %s%s, grads %s, "
          "%d step%s, %s\n",
          comm->size(), comm->size() == 1 ? "" : "s", comm::backend_name(comm->backend()), trainer.strategy().name(),
          layout.substr(0, layout.find(':')).c_str(),  // "dp 1 x tp 1 x pp 2", not its groups
          c.layers, c.dim, static_cast<long long>(c.global_batch), c.optimizer.c_str(),
          trainer.data_parallel().size() > 1
              ? (trainer.overlaps_updates() ? " overlapped with communication" : " after communication")
              // One data-parallel rank: DDP's buckets as backward completes them, but ZeRO's and
              // a pipeline stage's after backward (and its flush).
              : (trainer.overlaps_updates() && c.zero_stage == 0 && c.pp == 1 ? " bucket by bucket during backward"
                                                                              : " after backward"),
          dtype_name(c.ddp.grad_dtype), steps, steps == 1 ? "" : "s", where.c_str());
      if (kernels::gemm_bias_epilogue_requested())
        std::printf(
            "# Linear biases (TESSERA_GEMM_BIAS_EPILOGUE): %llu GEMMs added theirs in cuBLASLt's epilogue, "
            "%llu in a pass after the GEMM\n",
            static_cast<unsigned long long>(bias_counts.epilogue),
            static_cast<unsigned long long>(bias_counts.separate));
      if (kernels::gemm_bias_grad_epilogue_requested())
        std::printf(
            "# Linear bias gradients (TESSERA_GEMM_BIAS_GRAD_EPILOGUE): %llu summed in the weight-gradient GEMM's "
            "epilogue, %llu in a GEMV after it\n",
            static_cast<unsigned long long>(bias_counts.grad_epilogue),
            static_cast<unsigned long long>(bias_counts.grad_separate));
      std::printf("  median step        %9.2f ms  (%.1f steps/s, %.0f samples/s)\n", med[0] * 1e3, 1 / med[0],
                  static_cast<double>(c.global_batch) / med[0]);
      std::printf("    forward          %9.2f ms  (its GEMMs alone: %.2f ms)\n", med[1] * 1e3, med[7] * 1e3);
      std::printf(
          "    backward         %9.2f ms  (its GEMMs alone: %.2f ms%s)\n", med[2] * 1e3, (med[6] - med[7]) * 1e3,
          ddp_strategy == nullptr                                    ? ""
          : during_backward                                          ? "; buckets reduced during it"
          : c.ddp.overlap_backward == parallel::BackwardOverlap::Off ? "; buckets reduced after it"
                                                                     : "; buckets reduced after it: one core per rank");
      std::printf("    exposed comm     %9.2f ms  (%.1f%% of the step)\n", med[3] * 1e3, 100 * med[3] / med[0]);
      std::printf("    optimizer        %9.2f ms\n", med[4] * 1e3);
      if (c.pp > 1) std::printf("    pipeline idle    %9.2f ms  (waiting for neighbour stages)\n", med[10] * 1e3);
      std::printf("    other            %9.2f ms  (zeroing gradients, loading the batch, averaging the loss)\n",
                  med[5] * 1e3);
      std::printf("  GEMMs alone        %9.2f ms; step / GEMMs = %.3f (without 'other': %.3f)\n", med[6] * 1e3,
                  med[0] / med[6], compute_step / med[6]);
      if (ddp) {
        std::printf("  optimizer alone    %9.2f ms; bucket all-reduces alone %.2f ms\n", med[8] * 1e3, med[9] * 1e3);
        std::printf("  floor: GEMMs + optimizer + all-reduces back to back = %.2f ms = %.3f x GEMMs\n", floor * 1e3,
                    floor / med[6]);
      } else {
        std::printf("  optimizer alone    %9.2f ms (over this rank's shard)\n", med[8] * 1e3);
      }
      if (c.pp > 1) {
        std::string per_rank;
        for (double b : rank_bubbles) per_rank += (per_rank.empty() ? "" : ", ") + std::to_string(b).substr(0, 5);
        std::printf(
            "  pipeline bubble    %9.3f of the pipeline's span at most (per rank: %s; %s, %d micro-batches, "
            "%d stages; the schedule's own: %.3f)\n",
            bubble, per_rank.c_str(), c.schedule.c_str(), c.microbatches, c.pp,
            (c.pp - 1.0) / (c.microbatches + c.pp - 1.0));
      }
      std::printf("  memory-bound passes alone (a copy moves %s here):\n", rate_text(copy_rate).c_str());
      const char* labels[5] = {"GELU forward", "GELU backward", "bias gradients", "loss", "optimizer"};
      for (int k = 0; k < 5; ++k)
        if (mem_bytes[k] > 0)
          std::printf("    %-16s %9.2f ms  %8.1f MB, %s, %.2f x the copy's%s\n", labels[k], mem_s[k] * 1e3,
                      mem_bytes[k] / 1e6, rate_text(mem_bytes[k] / mem_s[k]).c_str(),
                      mem_bytes[k] / mem_s[k] / copy_rate,
                      k != 2 || gemv_share == 1.0 ? ""
                      : gemv_share == 0.0         ? " (not in the step: the GEMMs' epilogue sums them)"
                                                  : " (in the step for some: the GEMMs' epilogue sums the rest)");
      std::printf("  at the copy's speed: GEMMs + those %.1f MB = %.2f ms = %.3f x GEMMs; the step is %.3f x that\n",
                  memory_bound_bytes / 1e6, copy_speed_step * 1e3, copy_speed_step / med[6], med[0] / copy_speed_step);
      const auto mib = [](double b) { return b / (1024.0 * 1024.0); };
      const auto fixed = [](double v, int digits) {
        char text[32];
        std::snprintf(text, sizeof text, "%.*f", digits, v);
        return std::string(text);
      };
      // What a rank sends: over data parallelism, and where the layout has them over its
      // tensor- and pipeline-parallel groups (the JSON's comm_per_step, tp_ and pp_).
      // A small model's traffic in three decimals (33 KB read "0.0 MiB").
      const auto sent_mib = [&](double b) { return fixed(mib(b), b > 0 && mib(b) < 0.1 ? 3 : 1); };
      std::string sent = "sent " + sent_mib(bytes[3]) + " MiB per step";
      if (bytes[4] + bytes[5] > 0) {
        sent = "sent per step: dp " + sent_mib(bytes[3]) + " MiB";
        if (bytes[4] > 0) sent += ", tp " + sent_mib(bytes[4]) + " MiB";
        if (bytes[5] > 0) sent += ", pp " + sent_mib(bytes[5]) + " MiB";
      }
      std::printf("  per rank (most):   model state %.1f MiB, working buffers %.1f MiB, peak resident %.1f MiB, %s\n",
                  mib(bytes[0]), mib(bytes[1]), mib(bytes[2]), sent.c_str());
      if (!json_path.empty()) {
        nlohmann::json machine = apps::machine_json(session);
        // Threads per rank: the BLAS's (0: a BLAS Tessera cannot set) and why, and Kokkos' own
        // host threads where its host backend is threaded (null: it is not).
        machine["blas_threads"] = host_threads().threads;
        machine["blas_threads_reason"] = host_threads().reason;
        machine["kokkos_host_threads"] =
            host_threads().kokkos_threads > 0 ? nlohmann::json(host_threads().kokkos_threads) : nlohmann::json(nullptr);
        machine["kokkos_host_threads_reason"] = host_threads().kokkos_reason;
        nlohmann::json out = {
            {"started_utc", started_utc},
            {"machine", machine},
            {"config",
             {{"layers", c.layers},
              {"dim", c.dim},
              {"global_batch", c.global_batch},
              {"optimizer", c.optimizer},
              {"backend", comm::backend_name(comm->backend())},
              {"memory", memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device ? "device" : "host"},
              {"grad_dtype", dtype_name(c.ddp.grad_dtype)},
              {"strategy", trainer.strategy().name()},
              {"zero_stage", c.zero_stage},
              {"tp", c.tp},
              {"pp", c.pp},
              {"microbatches", c.microbatches},
              {"schedule", c.schedule},
              {"layout", layout},
              {"zero_prefetch", c.zero.prefetch},
              {"bucket_mb", c.zero_stage == 0 ? c.ddp.bucket_mb : c.zero.bucket_mb},
              {"overlap_optimizer", c.overlap_optimizer},
              // TESSERA_GEMM_BIAS_EPILOGUE, and how the run's Linear biases were added: in
              // cuBLASLt's epilogue or in a pass after the GEMM (GEMM calls of each kind).
              {"gemm_bias_epilogue_requested", kernels::gemm_bias_epilogue_requested()},
              {"gemm_bias_in_epilogue", bias_counts.epilogue},
              {"gemm_bias_separate", bias_counts.separate},
              // TESSERA_GEMM_BIAS_GRAD_EPILOGUE, and how the run's bias gradients were summed:
              // in the weight-gradient GEMM's epilogue or in a GEMV after it.
              {"gemm_bias_grad_epilogue_requested", kernels::gemm_bias_grad_epilogue_requested()},
              {"gemm_bias_grad_in_epilogue", bias_counts.grad_epilogue},
              {"gemm_bias_grad_separate", bias_counts.grad_separate},
              {"overlap_backward", ddp_strategy != nullptr ? nlohmann::json(during_backward) : nlohmann::json(nullptr)},
              {"steps", steps},
              {"warmup", warmup},
              {"rounds", rounds},
              // What else makes a step what it is, to compare two files later.
              {"accum", c.accum},
              {"lr", c.lr ? nlohmann::json(*c.lr) : nlohmann::json(nullptr)},  // null: the optimizer's default
              {"momentum", c.momentum},
              {"weight_decay", c.weight_decay < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.weight_decay)},
              {"seed", c.seed},
              {"data", c.data},
              {"samples", c.data == "synthetic" ? nlohmann::json(c.synthetic_samples) : nlohmann::json(nullptr)},
              {"max_rank_bytes", c.max_rank_bytes}}},
            {"median_s",
             {{"step", med[0]},
              {"forward", med[1]},
              {"backward", med[2]},
              {"comm_exposed", med[3]},
              {"optimizer", med[4]},
              {"other", med[5]},
              {"pipeline_idle", med[10]},
              {"gemm_only", med[6]},
              {"gemm_forward_only", med[7]},
              {"optimizer_only", med[8]},
              {"all_reduce_only", ddp ? nlohmann::json(med[9]) : nlohmann::json(nullptr)},
              {"gelu_forward_only", mem_s[0]},
              {"gelu_backward_only", mem_s[1]},
              {"bias_grad_only", mem_s[2]},
              {"loss_only", mem_s[3]},
              {"copy_only", mem_s[5]}}},
            {"memory_bound", memory_bound_json()},
            {"bytes_per_rank_max",
             {{"model_state", bytes[0]},
              {"working", bytes[1]},
              {"peak_resident", bytes[2]},
              {"comm_per_step", bytes[3]},
              {"tp_comm_per_step", bytes[4]},
              {"pp_comm_per_step", bytes[5]}}},
            {"steps_per_s", 1 / med[0]},
            {"bubble_fraction", bubble},
            {"bubble_fraction_per_rank", rank_bubbles},
            {"exposed_fraction", med[3] / med[0]},
            {"step_over_gemm", med[0] / med[6]},
            {"compute_step_over_gemm", compute_step / med[6]},
            {"floor_over_gemm", ddp ? nlohmann::json(floor / med[6]) : nlohmann::json(nullptr)},
            {"copy_speed_step_over_gemm", copy_speed_step / med[6]},
            {"step_over_copy_speed_step", med[0] / copy_speed_step}};
        apps::OutputFile file("--json", json_path);
        file.stream() << out.dump(2) << "\n";
        file.commit();
        std::printf("# results written to %s\n", json_path.c_str());
      }
    }
    return 0;
  });
}
