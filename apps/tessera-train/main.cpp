// tessera-train: trains an MLP across the ranks of the job (data, tensor and pipeline parallelism).
//
//   mpiexec -n 2 tessera-train [--config FILE] [--model.layers 8] [--model.dim 1024] ...

#include <tessera/checkpoint/model_file.hpp>
#include <tessera/tessera.hpp>
#include <tessera/train/trainer.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "../common/app_main.hpp"
#include "../common/machine_json.hpp"
#include "../common/trace_file.hpp"
#include "../common/train_flags.hpp"

namespace {
/// m:ss, h:mm:ss from an hour, and "Nd hh:mm:ss" from a day.
std::string duration_text(double s) {
  char t[48];
  const long long total = s < 9e15 ? std::llround(s) : 9000000000000000LL;
  const long long days = total / 86400, h = total / 3600 % 24, m = total / 60 % 60, sec = total % 60;
  if (days > 0)
    std::snprintf(t, sizeof t, "%lldd %02lld:%02lld:%02lld", days, h, m, sec);
  else if (h > 0)
    std::snprintf(t, sizeof t, "%lld:%02lld:%02lld", h, m, sec);
  else
    std::snprintf(t, sizeof t, "%lld:%02lld", m, sec);
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Trains an MLP across the ranks of an MPI job: data parallelism (DDP, or ZeRO stages 1-3 with "
      "--parallel.zero), tensor parallelism (--parallel.tp) and pipeline stages (--parallel.pp) on one "
      "dp x tp x pp mesh. Settings come from flags and from a TOML file (--config); flags override the file.",
      "mpiexec -n N tessera-train"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  tessera::apps::TrainFlags flags;
  auto& c = flags.config;
  std::string metrics_path, save_path, config_path, trace_path;
  bool quiet = false;
  app.add_option("--config", config_path, "TOML file: [model] layers = 8, [train] steps = 100, ...")
      ->option_text("FILE");
  app.add_option("--train.steps", c.steps, "optimizer steps")
      ->capture_default_str()
      ->transform(tessera::apps::whole(0, 1ll << 50));
  flags.add_to(app);
  app.add_option("--metrics", metrics_path, "write one JSON object per step to this file")
      ->option_text("FILE")
      ->check(tessera::apps::file_name())
      ->group("Output");
  app.add_option("--save", save_path, "write the final parameters to this HDF5 file")
      ->option_text("FILE")
      ->check(tessera::apps::file_name())
      ->group("Output");
  app.add_option("--trace", trace_path,
                 "write every rank's timeline (step phases, each collective) to this Chrome trace JSON file, "
                 "which Perfetto opens")
      ->option_text("FILE")
      ->check(tessera::apps::file_name())
      ->group("Output");
  std::string progress = "auto";
  app.add_option("--progress", progress,
                 "auto: bar on a terminal outside an MPI launcher, whose ranks see a pseudo-terminal even "
                 "when its output is a file, else lines; bar: redrawn in place; lines; or none")
      ->capture_default_str()
      ->group("Output")
      ->transform(tessera::apps::one_of({"auto", "bar", "lines", "none"}, "a progress style"));
  app.add_flag("--quiet", quiet, "no progress output: --progress none")->group("Output");

  return tessera::apps::run_app(argc, argv, app, [&](tessera::Session& session) {
    using namespace tessera;
    c = flags.finish(app, session.size());
    flags.print_unused(app, "tessera-train", session.size(), session.rank() == 0);
    if (!save_path.empty() && c.tp > 1)
      throw ConfigError("--save writes whole tensors, and with --parallel.tp " + std::to_string(c.tp) +
                        " every rank holds blocks of them; saving a tensor-parallel run is not supported yet: "
                        "run without --save, or with --parallel.tp 1");
    if (!save_path.empty() && c.pp > 1)
      throw ConfigError("--save writes the whole model from rank 0, and with --parallel.pp " + std::to_string(c.pp) +
                        " rank 0 holds only the first stage; saving a pipeline-parallel run is not supported yet: "
                        "run without --save, or with --parallel.pp 1");
    const bool root = session.rank() == 0;
    // Output files are checked before any work, on every rank alike, and touched only once the
    // run is set up; a file the user had is replaced only by a run that finished.
    apps::check_on_rank0(session, [&] {
      if (!metrics_path.empty())
        if (auto why = apps::cannot_write("--metrics", metrics_path); !why.empty()) return why;
      if (!trace_path.empty())
        if (auto why = apps::cannot_write("--trace", trace_path); !why.empty()) return why;
      if (!save_path.empty())
        if (auto why = apps::cannot_write("--save", save_path, /*always_beside=*/true); !why.empty()) return why;
      return apps::same_file_twice({{"--metrics", metrics_path}, {"--trace", trace_path}, {"--save", save_path}},
                                   {{"--config", config_path}, {"--data.source", c.data == "synthetic" ? "" : c.data}});
    });
    if (root)
      for (const auto& note :
           apps::leftover_copy_notes({{"--metrics", metrics_path}, {"--trace", trace_path}, {"--save", save_path}}))
        std::fprintf(stderr, "tessera-train: note: %s\n", note.c_str());
    auto comm = comm::Communicator::create(comm::parse_backend(flags.backend));
    train::Trainer trainer(c, *comm);
    std::unique_ptr<apps::OutputFile> metrics_file;
    if (root && !metrics_path.empty()) metrics_file = std::make_unique<apps::OutputFile>("--metrics", metrics_path);
    const HostThreads& blas = host_threads();
    if (root && quiet && app.count("--progress") && progress != "none")
      std::fprintf(stderr, "tessera-train: note: --progress %s has no effect with --quiet, which prints nothing\n",
                   progress.c_str());
    if (progress == "none") quiet = true;
    const bool tty =
        progress == "bar" || (progress == "auto" && isatty(STDOUT_FILENO) != 0 && !apps::started_by_launcher());
    const std::string layout = trainer.layout();  // collective-free; every rank builds it
    if (root && !quiet && (c.tp > 1 || c.pp > 1)) std::printf("tessera-train: layout %s\n", layout.c_str());
    // DDP says when its buckets travel where that is not during backward.
    std::string strategy = trainer.strategy().name();
    if (c.ddp.grad_dtype == DType::BFloat16) strategy += ", bf16 gradients";
    if (const auto* ddp = dynamic_cast<const parallel::DistributedDataParallel*>(&trainer.strategy());
        ddp != nullptr && trainer.data_parallel().size() > 1 && !ddp->overlaps_backward())
      strategy += c.ddp.overlap_backward == parallel::BackwardOverlap::Off
                      ? ", buckets reduced after backward"
                      : ", buckets reduced after backward: one core per rank";
    // Gradient accumulation: the micro-steps of each step and their rows on one rank.
    std::string steps = std::to_string(c.steps) + (c.steps == 1 ? " step" : " steps");
    if (c.accum > 1)
      steps += " (" + std::to_string(c.accum) + " micro-steps of " +
               std::to_string(c.global_batch / (static_cast<std::int64_t>(trainer.data_parallel().size()) * c.accum)) +
               " rows per rank)";
    // Where the GEMMs run: a GPU build's are cuBLAS's on the rank's GPU, a host build's the
    // BLAS's threads.
    const std::string gpu = apps::gpu_placement(session);
    const std::string where =
        !gpu.empty()
            ? gpu
            : "BLAS threads " + (blas.threads > 0 ? std::to_string(blas.threads) : std::string("?")) + " per rank (" +
                  blas.reason + ")" +
                  (blas.kokkos_threads > 0
                       ? ", Kokkos " + blas.kokkos_backend + " threads " + std::to_string(blas.kokkos_threads) +
                             " per rank" + (blas.kokkos_reason.empty() ? "" : " (" + blas.kokkos_reason + ")")
                       : "");
    if (root && !quiet)
      std::printf("tessera-train: %d rank%s (%s, %s), MLP %zu x %zu (%zu parameters), %s, %s, batch %lld x %s, %s\n",
                  comm->size(), comm->size() == 1 ? "" : "s", comm::backend_name(comm->backend()), strategy.c_str(),
                  c.layers, c.dim, c.layers * (c.dim * c.dim + c.dim), trainer.dataset().describe().c_str(),
                  c.optimizer.c_str(), static_cast<long long>(c.global_batch), steps.c_str(), where.c_str());
    double first_loss = 0, last_loss = 0, elapsed = 0;
    std::size_t drawn = 0;  // the bar's last line, in characters
    // The verdict at the end compares the mean loss of the first and of the last few steps:
    // each step's batch differs, so one step's loss against another's is partly noise.
    const std::int64_t window = std::max<std::int64_t>(1, std::min<std::int64_t>(5, c.steps / 2));
    double first_sum = 0;
    std::deque<double> last_losses;
    const std::int64_t every = std::max<std::int64_t>(1, c.steps / 20);
    auto report = [&](const train::StepMetrics& m) {
      if (m.step == 1) first_loss = m.loss;
      last_loss = m.loss;
      if (m.step <= window) first_sum += m.loss;
      last_losses.push_back(m.loss);
      if (static_cast<std::int64_t>(last_losses.size()) > window) last_losses.pop_front();
      elapsed += m.step_time_s;
      if (!root) return;
      if (metrics_file) {
        metrics_file->stream() << nlohmann::json{{"step", m.step},
                                                 {"loss", m.loss},
                                                 {"grad_norm", m.grad_norm},
                                                 {"step_time_s", m.step_time_s},
                                                 {"samples_per_s", m.samples_per_s},
                                                 {"comm_exposed_s", m.comm_exposed_s},
                                                 {"forward_s", m.forward_s},
                                                 {"backward_s", m.backward_s},
                                                 {"optimizer_s", m.optimizer_s},
                                                 {"data_s", m.data_s},
                                                 {"pipeline_idle_s", m.pipeline_idle_s},
                                                 {"other_s", m.step_time_s - m.forward_s - m.backward_s -
                                                                 m.comm_exposed_s - m.optimizer_s - m.data_s -
                                                                 m.pipeline_idle_s},
                                                 {"model_state_bytes", m.model_state_bytes},
                                                 {"working_bytes", m.working_bytes},
                                                 {"comm_bytes", std::llround(m.comm_bytes)},
                                                 {"tp_comm_bytes", std::llround(m.tp_comm_bytes)},
                                                 {"pp_comm_bytes", std::llround(m.pp_comm_bytes)},
                                                 {"bubble_fraction", m.bubble_fraction},
                                                 {"microbatches_in_flight", m.microbatches_in_flight}}
                                      .dump()
                               << "\n"
                               << std::flush;  // a line per step, as it happens (tail -f)
      }
      if (quiet) return;
      const double eta = elapsed / static_cast<double>(m.step) * static_cast<double>(c.steps - m.step);
      char line[160];
      std::snprintf(line, sizeof line, "step %lld/%lld | loss %.6g | grad norm %.3g | %.0f samples/s | ETA %s",
                    static_cast<long long>(m.step), static_cast<long long>(c.steps), m.loss, m.grad_norm,
                    m.samples_per_s, duration_text(eta).c_str());
      if (tty) {
        // Redrawn in place: cut to the terminal's width (a line that wraps would be redrawn a
        // row lower each time), and padded over what the last one left.
        std::string text = line;
        winsize size{};
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 && text.size() >= size.ws_col)
          text.resize(size.ws_col - 1u);
        std::printf("\r%s%s", text.c_str(), std::string(drawn > text.size() ? drawn - text.size() : 0, ' ').c_str());
        drawn = text.size();
        if (m.step == c.steps) std::printf("\n");
      } else if (m.step % every == 0 || m.step == 1 || m.step == c.steps) {
        std::printf("%s\n", line);
      }
      std::fflush(stdout);
    };
    if (!trace_path.empty()) apps::start_trace();
    try {
      trainer.run(report);
    } catch (const NonFiniteError& e) {
      if (tty && root && !quiet) std::printf("\n");
      // Nothing is saved from a diverged run; a file the user already had stays as it was.
      std::string kept;
      if (metrics_file) kept += "; " + metrics_file->abandon();
      if (!trace_path.empty()) {  // every rank stops alike: collective
        try {
          kept += apps::write_trace(trace_path, false);
        } catch (const Error& trace_error) {
          kept += "; " + trace_error.message();
        }
      }
      if (!save_path.empty()) kept += "; --save '" + save_path + "' was not written";
      throw NonFiniteError(e.message() + kept);
    } catch (const std::exception& e) {
      // Any other failure (a peer that stopped, a file that cannot be read, memory that ran
      // out): the same account of the files, on the ranks that say it (no trace: the ranks
      // may not all be here to gather one).
      if (tty && root && !quiet) std::printf("\n");
      std::string kept;
      if (metrics_file) kept += "; " + metrics_file->abandon();
      if (!trace_path.empty()) kept += "; --trace '" + trace_path + "' was not written";
      if (!save_path.empty()) kept += "; --save '" + save_path + "' was not written";
      if (kept.empty()) throw;
      const auto* error = dynamic_cast<const Error*>(&e);
      const std::string message = error != nullptr ? error->message() : e.what();
      throw Error(!message.empty() && message.back() == '.' ? message + " Files: " + kept.substr(2) + "."
                                                            : message + kept);
    }
    // The model first: a trace that cannot be written (a full disk) does not cost it.
    if (!save_path.empty()) checkpoint::save_model(save_path, trainer.parameters(), *comm);
    if (!trace_path.empty()) apps::write_trace(trace_path, true);
    if (metrics_file) metrics_file->commit();
    if (root && !quiet && c.steps > 0) {
      // How the loss moved, either way (a run that is learning nothing says so too).
      // One step has one loss: nothing to compare.
      // Within 10% either way is no clear change: a rate too low, or too few steps, as often as
      // one too high. Under 10 steps the windows are shorter than 5 steps, and one batch's
      // loss against another's is partly noise: only a change of 2x or more is told.
      char change[160] = "";
      const double before = first_sum / static_cast<double>(window);
      const double after = std::accumulate(last_losses.begin(), last_losses.end(), 0.0) / static_cast<double>(window);
      const double clear = window >= 5 ? 1.1 : 2.0;
      const std::string over = window > 1 ? ", mean of the first " + std::to_string(window) +
                                                " steps against the last " + std::to_string(window)
                                          : "";
      if (c.steps > 1 && after <= 0 && before > 0)
        std::snprintf(change, sizeof change, " (down to 0%s)", over.c_str());
      else if (c.steps > 1 && after * clear < before)
        std::snprintf(change, sizeof change, " (%.1fx lower%s)", before / after, over.c_str());
      else if (c.steps > 1 && before > 0 && after > clear * before)
        std::snprintf(change, sizeof change, " (%.1fx HIGHER%s: not learning; try a lower --optim.lr)", after / before,
                      over.c_str());
      else if (c.steps > 1)
        std::snprintf(change, sizeof change, " (no clear change%s: train longer, or try another --optim.lr)",
                      over.c_str());
      std::printf("done: %lld step%s in %.1f %s; loss %.6g -> %.6g%s%s\n", static_cast<long long>(c.steps),
                  c.steps == 1 ? "" : "s", elapsed < 1 ? elapsed * 1e3 : elapsed, elapsed < 1 ? "ms" : "s", first_loss,
                  last_loss, change, save_path.empty() ? "" : ("; parameters saved to " + save_path).c_str());
    } else if (root && !quiet) {
      std::printf("done: 0 steps (--train.steps 0), nothing trained%s\n",
                  save_path.empty() ? "" : ("; the initial parameters saved to " + save_path).c_str());
    }
    return 0;
  });
}
