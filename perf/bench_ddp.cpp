// tessera-bench-ddp: where the time of a data-parallel training step goes (forward,
// backward, exposed communication, optimizer), and how the step compares with its GEMMs
// alone, timed in the same run on every rank at once.
//
//   mpiexec -n 2 tessera-bench-ddp [--layers 8] [--dim 1024] [--batch 128] [--steps 30] --json FILE

#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include <mpi.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "../apps/common/app_main.hpp"
#include "kernels/gemm.hpp"

namespace {
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Per-step breakdown of data-parallel training, and the step against its GEMMs alone.\n"
      "Usage: mpiexec -n N tessera-bench-ddp [flags] [--json FILE]"};
  tessera::train::TrainConfig c;
  int steps = 30, warmup = 5;
  std::string json_path, backend = "mpi", grad_dtype = "fp32";
  app.add_option("--layers", c.layers, "MLP layers")->capture_default_str();
  app.add_option("--dim", c.dim, "MLP width")->capture_default_str();
  app.add_option("--batch", c.global_batch, "global batch")->capture_default_str();
  app.add_option("--optim", c.optimizer, "adamw or sgd")->capture_default_str();
  app.add_option("--bucket-mb", c.ddp.bucket_mb, "DDP bucket size (MiB)")->capture_default_str();
  app.add_option("--grad-dtype", grad_dtype, "fp32 or bf16")->capture_default_str();
  app.add_option("--backend", backend, "mpi or gloo")->capture_default_str();
  app.add_option("--overlap-optimizer", c.overlap_optimizer,
                 "update each bucket as soon as it is reduced (true) or after all communication (false)")
      ->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_option("--json", json_path, "write the results as JSON");

  return tessera::apps::run_app(argc, argv, app, [&](tessera::Session& session) {
    using namespace tessera;
    c.ddp.grad_dtype = parse_dtype(grad_dtype);
    c.steps = warmup + steps;
    c.synthetic_samples = std::max<std::int64_t>(c.global_batch * 8, 1024);
    c.validate();
    auto comm = comm::Communicator::create(comm::parse_backend(backend));
    train::Trainer trainer(c, *comm);
    std::vector<double> step, fwd, bwd, exposed, opt, data;
    for (int s = 0; s < warmup + steps; ++s) {
      const auto m = trainer.step();
      if (s < warmup) continue;
      step.push_back(m.step_time_s);
      fwd.push_back(m.forward_s);
      bwd.push_back(m.backward_s);
      exposed.push_back(m.comm_exposed_s);
      opt.push_back(m.optimizer_s);
      data.push_back(m.step_time_s - m.forward_s - m.backward_s - m.comm_exposed_s - m.optimizer_s);
    }
    // The same GEMMs the step runs (forward y = x W^T, backward dW += dy^T x, dx = dy W for
    // every layer), on every rank at once as in training, with nothing else.
    const auto b = static_cast<std::size_t>(c.global_batch / comm->size() / c.accum);
    View2D<float> x("x", b, c.dim), y("y", b, c.dim), w("w", c.dim, c.dim), dw("dw", c.dim, c.dim);
    Kokkos::deep_copy(x, 0.5f);
    Kokkos::deep_copy(w, 0.01f);
    std::vector<double> gemm;
    for (int s = 0; s < warmup + steps; ++s) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t l = 0; l < c.layers; ++l) {
        kernels::gemm(kernels::Trans::No, kernels::Trans::Yes, 1.0f, x, w, 0.0f, y);
        kernels::gemm(kernels::Trans::Yes, kernels::Trans::No, 1.0f, y, x, 1.0f, dw);
        kernels::gemm(kernels::Trans::No, kernels::Trans::No, 1.0f, y, w, 0.0f, x);
      }
      Kokkos::fence();
      if (s >= warmup) gemm.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // Report the slowest rank's medians.
    double med[7] = {median(step), median(fwd), median(bwd), median(exposed), median(opt), median(data), median(gemm)};
    MPI_Allreduce(MPI_IN_PLACE, med, 7, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double compute_step = med[0] - med[5];  // the step without loading data
    if (session.rank() == 0) {
      std::printf("# tessera-bench-ddp: %d ranks (%s), MLP %zu x %zu, global batch %lld, %s%s, grads %s, %d steps\n",
                  comm->size(), comm::backend_name(comm->backend()), c.layers, c.dim,
                  static_cast<long long>(c.global_batch), c.optimizer.c_str(),
                  c.overlap_optimizer ? " overlapped with communication" : " after communication",
                  dtype_name(c.ddp.grad_dtype), steps);
      std::printf("  median step        %9.2f ms  (%.1f steps/s, %.0f samples/s)\n", med[0] * 1e3, 1 / med[0],
                  static_cast<double>(c.global_batch) / med[0]);
      std::printf("    forward          %9.2f ms\n    backward         %9.2f ms  (communication overlapped)\n",
                  med[1] * 1e3, med[2] * 1e3);
      std::printf("    exposed comm     %9.2f ms  (%.1f%% of the step)\n", med[3] * 1e3, 100 * med[3] / med[0]);
      std::printf("    optimizer        %9.2f ms\n    data loading     %9.2f ms\n", med[4] * 1e3, med[5] * 1e3);
      std::printf("  GEMMs alone        %9.2f ms; step / GEMMs = %.3f (without data loading: %.3f)\n", med[6] * 1e3,
                  med[0] / med[6], compute_step / med[6]);
      if (!json_path.empty()) {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        nlohmann::json out = {
            {"machine", {{"hostname", host}, {"ranks", comm->size()}, {"cores", sysconf(_SC_NPROCESSORS_ONLN)}}},
            {"config",
             {{"layers", c.layers},
              {"dim", c.dim},
              {"global_batch", c.global_batch},
              {"optimizer", c.optimizer},
              {"backend", comm::backend_name(comm->backend())},
              {"grad_dtype", dtype_name(c.ddp.grad_dtype)},
              {"bucket_mb", c.ddp.bucket_mb},
              {"steps", steps}}},
            {"median_s",
             {{"step", med[0]},
              {"forward", med[1]},
              {"backward", med[2]},
              {"comm_exposed", med[3]},
              {"optimizer", med[4]},
              {"data", med[5]},
              {"gemm_only", med[6]}}},
            {"steps_per_s", 1 / med[0]},
            {"exposed_fraction", med[3] / med[0]},
            {"step_over_gemm", med[0] / med[6]},
            {"compute_step_over_gemm", compute_step / med[6]}};
        std::ofstream(json_path) << out.dump(2) << "\n";
        std::printf("# results written to %s\n", json_path.c_str());
      }
    }
    return 0;
  });
}
