#pragma once
// Shared top of every Tessera app: start the Session, parse flags, run, and turn any error
// into one clear message and a non-zero exit on every rank (aborting the job when ranks
// may disagree, so none is left hanging).

#include <mpi.h>
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tessera/core/build_info.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/files.hpp>
#include <tessera/core/session.hpp>

#include "config_file.hpp"
#include "flag_errors.hpp"
#include "help_format.hpp"
#include "output_file.hpp"
#include "validators.hpp"

namespace tessera::apps {

namespace detail {
// What a stopped job prints (rank 0 only), made before any signal can come: a handler may
// only call async-signal-safe functions.
inline char g_stop_message[2][512];
inline std::size_t g_stop_length[2] = {0, 0};

inline void on_stop_signal(int sig) {
  remove_unfinished_files();
  const int k = sig == SIGINT ? 0 : 1;
  if (g_stop_length[k] > 0 && ::write(2, g_stop_message[k], g_stop_length[k]) < 0) {
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);  // ends as the signal would have: the launcher and the shell see it
}

/// Whether an MPI launcher (mpiexec, srun) started this process, read before MPI starts: a
/// singleton MPI_Init sets some of the same variables (Open MPI's PMIX_RANK) itself.
inline bool g_launched = false;

/// After an error is printed, a SIGTERM is the launcher taking the job down (a rank exited
/// non-zero or aborted), not the user stopping it: it still removes the unfinished files,
/// silently.
inline void quiet_stop_signals() noexcept { g_stop_length[0] = g_stop_length[1] = 0; }

/// Rank 0's report of an error the ranks met together: "NAME: error: TEXT" where all said
/// the same, else "NAME: error on rank 1: TEXT" and "NAME: error on ranks 0, 2: TEXT" (at
/// most 8 texts), and the ranks whose text did not come in time.
/// With `unheard_had_none`, the ranks without a text had no error of their own (their flags
/// were sound) and stop for the others'.
inline void print_rank_texts(const std::string& name, const std::vector<Session::RankText>& texts, int ranks,
                             bool unheard_had_none = false) {
  std::vector<bool> heard(static_cast<std::size_t>(ranks), false);
  for (const auto& t : texts)
    for (int r : t.ranks) heard[static_cast<std::size_t>(r)] = true;
  if (texts.size() == 1 && texts[0].same_words && static_cast<int>(texts[0].ranks.size()) == ranks) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), texts[0].text.c_str());
    return;
  }
  constexpr std::size_t kShown = 8;
  std::size_t more_ranks = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto& t = texts[i];
    if (i < kShown)
      std::fprintf(
          stderr, "%s: error on rank%s %s%s: %s\n", name.c_str(), t.ranks.size() > 1 ? "s" : "", t.ranks_text.c_str(),
          t.same_words ? ""
                       : (" (rank " + std::to_string(t.ranks[0]) + "'s words; the others differ in numbers)").c_str(),
          t.text.c_str());
    else
      more_ranks += t.ranks.size();
  }
  if (texts.size() > kShown)
    std::fprintf(stderr, "%s: and %zu more ranks, with %zu other messages\n", name.c_str(), more_ranks,
                 texts.size() - kShown);
  std::vector<int> silent;
  for (int r = 0; r < ranks; ++r)
    if (!heard[static_cast<std::size_t>(r)]) silent.push_back(r);
  if (!silent.empty() && unheard_had_none)
    std::fprintf(stderr, "%s: the other %zu rank%s found no error in %s flags, and stop%s too\n", name.c_str(),
                 silent.size(), silent.size() > 1 ? "s" : "", silent.size() > 1 ? "their" : "its",
                 silent.size() > 1 ? "" : "s");
  else if (!silent.empty())
    std::fprintf(stderr, "%s: %zu rank%s failed too, whose message did not reach rank 0 in time\n", name.c_str(),
                 silent.size(), silent.size() > 1 ? "s" : "");
}

/// The ranks settle their flags together. `stop` is this rank's outcome: -1 to go on, 0 for
/// --help, else the exit status of its error `error` (what follows "NAME: error: "). Ranks
/// usually read the same flags and fail alike, but not always: a config file on node-local
/// disk missing on one node, or a launch with different flags per rank. Then the ranks whose
/// flags were sound would go on and wait for the failed ones in their first collective, for
/// the whole communication timeout, without the failed ones' message. So every rank stops
/// with the highest status any rank has, and rank 0 prints each error with its ranks (once,
/// as "NAME: error: ...", where every rank failed alike). Returns the status to exit with,
/// or -1 to go on.
inline int settle_flags(Session& session, const std::string& name, int stop, const std::string& error) {
  int worst = stop;
  if (session.size() > 1) MPI_Allreduce(&stop, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst <= 0) return worst;
  if (session.size() == 1) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), error.c_str());
    return worst;
  }
  const std::string kNone = "\x01";  // a rank with no error of its own
  const auto texts = session.gather_texts_within(stop > 0 ? error : kNone, std::chrono::seconds(30));
  if (!texts) {  // some rank did not come: each says its own
    if (stop > 0) std::fprintf(stderr, "%s: error: %s [rank %d]\n", name.c_str(), error.c_str(), session.rank());
    return worst;
  }
  if (session.rank() != 0) return worst;
  std::vector<Session::RankText> failed;
  for (const auto& t : *texts)
    if (t.text != kNone) failed.push_back(t);
  print_rank_texts(name, failed, session.size(), true);
  return worst;
}

/// Kokkos' settings whose value is a whole number, as a flag and (where Kokkos reads one) as
/// an environment variable, with the least value Kokkos takes. Kokkos 4 aborts the process on
/// a value it cannot take (a core dump and a backtrace on every rank), Kokkos 3 throws "stoi"
/// or takes it, so they are checked before Kokkos starts.
struct KokkosNumber {
  const char* flag;
  const char* env;  // nullptr: none
  int least;
  int example;  // shown in the message
  const char* what;
  bool gpu = false;  // a GPU's id, checked against the GPUs too (kokkos_device_error)
};
inline constexpr KokkosNumber kKokkosNumbers[] = {
    {"--kokkos-num-threads", "KOKKOS_NUM_THREADS", 1, 2, "a number of threads"},
    {"--kokkos-threads", nullptr, 1, 2, "a number of threads"},
    {"--kokkos-device-id", "KOKKOS_DEVICE_ID", 0, 0, "a GPU's id", true},
    {"--kokkos-device", nullptr, 0, 0, "a GPU's id", true},
    {"--kokkos-num-devices", nullptr, 0, 1, "a number of GPUs"},
    {"--kokkos-numa", nullptr, 0, 1, "a number of NUMA regions"},
};

/// What is wrong with `value` for the Kokkos setting `s` ("a number of threads, 1 or more"),
/// or nothing.
inline std::string kokkos_number_error(const KokkosNumber& s, const std::string& value) {
  const std::string wanted = std::string(s.what) + ", " + std::to_string(s.least) + " or more";
  const bool digits = !value.empty() && value != "-" &&
                      value.find_first_not_of("0123456789", value[0] == '-' ? 1 : 0) == std::string::npos;
  if (!digits) return "Kokkos takes a whole number here: " + wanted;
  if (value[0] == '-') return "Kokkos takes " + wanted;
  const std::string number = value.substr(std::min(value.find_first_not_of('0'), value.size() - 1));
  // Kokkos reads an int.
  if (number.size() > 10 || std::stoll(number) > 2147483647) return "Kokkos takes " + wanted + ", at most 2147483647";
  if (std::stoll(number) < s.least) return "Kokkos takes " + wanted;
  return {};
}

/// A GPU id (a whole number that passed kokkos_number_error) past the GPUs this process sees,
/// or nothing: Kokkos 4 aborts the process on it, with a core dump and a backtrace on every
/// rank. Nothing on a host build, where Kokkos ignores it, nor where CUDA cannot count the
/// GPUs or KOKKOS_VISIBLE_DEVICES renumbers them (Kokkos then says what is wrong).
inline std::string kokkos_device_error(const std::string& value) {
#ifdef KOKKOS_ENABLE_CUDA
  if (std::getenv("KOKKOS_VISIBLE_DEVICES") != nullptr) return {};
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    (void)cudaGetLastError();  // cleared: Kokkos asks again, and says why
    return {};
  }
  if (std::stoll(value) < count) return {};
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return "this process sees " + std::to_string(count) +
         (count == 1 ? " GPU, id 0" : " GPUs, ids 0 to " + std::to_string(count - 1)) +
         (visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string());
#else
  (void)value;
  return {};
#endif
}

/// Kokkos' GPU-to-rank mapping (Kokkos 4): the names it takes.
inline std::string kokkos_map_error(const std::string& value) {
  return value == "mpi_rank" || value == "random" ? std::string() : "Kokkos takes mpi_rank or random";
}

/// What is wrong with the Kokkos settings of the environment, or nothing: the first bad one,
/// as "KOKKOS_NUM_THREADS=abc in the environment: ...". With `unset`, each bad one is taken
/// out of this process's environment, so that Kokkos starts without it.
inline std::string kokkos_environment_error(bool unset = false) {
  std::string first;
  const auto found = [&](const char* var, const std::string& text) {
    if (first.empty()) first = text;
    if (unset) ::unsetenv(var);
  };
  for (const auto& s : kKokkosNumbers) {
    const char* value = s.env != nullptr ? std::getenv(s.env) : nullptr;
    if (value == nullptr) continue;
    std::string why = kokkos_number_error(s, value);
    if (why.empty() && s.gpu) why = kokkos_device_error(value);
    if (!why.empty())
      found(s.env, std::string(s.env) + "=" + value + " in the environment: " + why + "; set it to one (" + s.env +
                       "=" + std::to_string(s.example) + "), or unset it");
  }
  if (const char* value = std::getenv("KOKKOS_MAP_DEVICE_ID_BY"))
    if (const std::string why = kokkos_map_error(value); !why.empty())
      found("KOKKOS_MAP_DEVICE_ID_BY",
            std::string("KOKKOS_MAP_DEVICE_ID_BY=") + value + " in the environment: " + why + ", or unset it");
  return first;
}
}  // namespace detail

/// What an app writes, for what a stop by a signal says of its files: nothing; results
/// written once the run has finished (the benchmarks' --json); or files written step by step
/// beside those written at the end (tessera-train's --metrics, --save).
enum class Outputs { None, AtEnd, StepByStep };

/// SIGINT (Ctrl-C) and SIGTERM (scancel, a job's time limit, the launcher taking a job down):
/// the output files still being written beside the user's are removed, rank 0 says so, and
/// the process ends by the signal. The user's own files are as they were.
inline void handle_stop_signals(const std::string& name, bool say_it, Outputs outputs) {
  const char* names[2] = {"SIGINT", "SIGTERM"};
  const char* files = outputs == Outputs::None ? ""
                      : outputs == Outputs::AtEnd
                          ? "; no results were written, and files you already had are as they were"
                          : "; files you already had are as they were (the copies replacing them were removed); a new "
                            "file written step by step keeps what was written so far";
  for (int k = 0; k < 2; ++k) {
    const int n = std::snprintf(detail::g_stop_message[k], sizeof detail::g_stop_message[k], "\n%s: stopped by %s%s\n",
                                name.c_str(), names[k], files);
    detail::g_stop_length[k] = say_it && n > 0 ? std::min<std::size_t>(static_cast<std::size_t>(n), 511) : 0;
  }
  struct sigaction action {};
  action.sa_handler = detail::on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

/// True when an MPI launcher started this process (not a plain `./app`, which runs as one rank).
inline bool started_by_launcher() noexcept { return detail::g_launched; }

/// Runs `check` on rank 0 and raises what it reports (a ConfigError) on every rank, so that
/// every rank stops alike, before any work (e.g. an output file that cannot be written).
inline void check_on_rank0(Session& session, const std::function<std::string()>& check) {
  std::string error = session.rank() == 0 ? check() : std::string();
  int length = static_cast<int>(error.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  error.resize(static_cast<std::size_t>(length));
  if (length > 0) MPI_Bcast(error.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!error.empty()) throw ConfigError(error);
}

/// Runs body(session) inside a Session after parsing the flags (and the TOML file named by
/// --config, if the app has that option). Kokkos sees only its own --kokkos-* flags, the app
/// all the others (so --help is the app's alone). A flag or config-file error on any rank, or a
/// Kokkos setting (flag or environment variable) Kokkos cannot take, stops every rank with
/// status 2, and rank 0 prints each rank's error (settle_flags). An error
/// during the run that every rank meets (bad input) ends every rank the same way: rank 0
/// prints it and all exit normally with status 1. An error that hits some ranks only is
/// printed by them, and they abort the job so that no rank is left waiting. A stop by a
/// signal says what became of the app's `outputs`.
inline int run_app(int argc, char** argv, CLI::App& app, Outputs outputs, const std::function<int(Session&)>& body) {
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  app.formatter(std::make_shared<HelpFormatter>());
  app.add_flag("--version", "print the version of Tessera and of the libraries this build uses, and exit");
  // Kokkos' own flags are taken out before the app's are read (below): --help says so.
  app.footer(app.get_footer() + (app.get_footer().empty() ? "" : "\n\n") +
             "\nKokkos' own flags go to Kokkos, with their value after '=':\n" +
             (KOKKOS_VERSION >= 30700 ? "--kokkos-num-threads=N" : "--kokkos-threads=N") +
             ", --kokkos-device-id=N, ...; --kokkos-help lists them.");
  group_by_section(app);
  if (app.get_help_ptr() != nullptr) app.get_help_ptr()->description("print this help and exit");
  std::vector<char*> kokkos_argv = {argv[0]}, app_argv = {argv[0]};
  // --kokkos-help (or --kokkos-tools-help): Kokkos' help, printed once (by the launcher's
  // first rank), and nothing run.
  bool kokkos_help = false;
  const char* launcher_rank = nullptr;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (launcher_rank == nullptr) launcher_rank = std::getenv(var);
  const bool first_rank = launcher_rank == nullptr || std::string(launcher_rank) == "0";
  detail::g_launched = launcher_rank != nullptr || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
                       std::getenv("SLURM_STEP_ID");
  bool version = false;
  // A Kokkos setting Kokkos cannot take: the first one, as "NAME: error: " would go on. Kokkos
  // does not see it (Kokkos 4 would abort the process, with a core dump and a backtrace on
  // every rank), and the ranks settle it with their flags once MPI has started, so that
  // where one rank's environment alone is at fault (a node's modules set another value),
  // rank 0 names that rank and every rank stops with status 2.
  std::string kokkos_error;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    kokkos_help = kokkos_help || arg == "--kokkos-help" || arg == "--kokkos-tools-help";
    version = version || arg == "--version";
    const bool kokkos = arg.rfind("--kokkos-", 0) == 0;
    // Kokkos reads a value only after '=': "--kokkos-num-threads 2" would leave the 2 to
    // the app, whose "unexpected argument" would not say why.
    if (kokkos && arg.find('=') == std::string::npos && i + 1 < argc && argv[i + 1][0] != '-') {
      if (kokkos_error.empty())
        kokkos_error = "'" + std::string(argv[i + 1]) + "' after " + arg + ": Kokkos' flags take their value after " +
                       "'=': " + arg + "=" + argv[i + 1] + "\nRun with --help for the options.";
      ++i;
      continue;
    }
    // Kokkos' whole-number flags, and its mapping of GPUs to ranks: see kKokkosNumbers.
    if (kokkos && arg.find('=') != std::string::npos) {
      const std::string key = arg.substr(0, arg.find('=')), value = arg.substr(arg.find('=') + 1);
      std::string why, example;
      for (const auto& s : detail::kKokkosNumbers)
        if (key == s.flag) {
          why = detail::kokkos_number_error(s, value);
          if (why.empty() && s.gpu) why = detail::kokkos_device_error(value);
          example = key + "=" + std::to_string(s.example);
        }
      if (key == "--kokkos-map-device-id-by") {
        why = detail::kokkos_map_error(value);
        example = key + "=mpi_rank";
      }
      if (!why.empty()) {
        if (kokkos_error.empty())
          kokkos_error = arg + ": " + why + " (" + example + ")\nRun with --kokkos-help for Kokkos' flags.";
        continue;
      }
    }
    (kokkos ? kokkos_argv : app_argv).push_back(argv[i]);
  }
  if (version) {  // printed once, starting neither MPI nor Kokkos, whatever else was given
    if (first_rank) std::printf("%s: %s\n", name.c_str(), describe(build_info()).c_str());
    return 0;
  }
  // A bad variable is unset whatever else was found: Kokkos would abort on it.
  if (std::string why = detail::kokkos_environment_error(/*unset=*/true); kokkos_error.empty())
    kokkos_error = std::move(why);
  if (!kokkos_error.empty() && kokkos_help) {  // nothing is started for Kokkos' help
    if (first_rank) std::fprintf(stderr, "%s: error: %s\n", name.c_str(), kokkos_error.c_str());
    return 2;
  }
  int kokkos_argc = static_cast<int>(kokkos_argv.size());
  kokkos_argv.push_back(nullptr);
  char** kokkos_args = kokkos_argv.data();
  if (kokkos_help) {
    // No rank starts MPI: Kokkos 4 ends the process once the help is printed, which in a
    // rank that had started MPI would look to the launcher like a rank that died.
    if (first_rank) {
      Kokkos::initialize(kokkos_argc, kokkos_args);
      if (Kokkos::is_initialized()) Kokkos::finalize();  // Kokkos 3 prints and goes on
    }
    return 0;
  }
  bool started = false;  // the Session (MPI and Kokkos) has started
  try {
    Session session(kokkos_argc, kokkos_args);
    started = true;
    // This rank's flags: -1 to go on, 0 for --help, 2 for a usage error (a config file's too;
    // CLI11's own codes differ by kind: 105, 109, ...), with the error's text.
    int stop = kokkos_error.empty() ? -1 : 2;
    std::string error = kokkos_error;
    // Kokkos takes out of its arguments the flags it knows; one left is a typo it would ignore
    // ("--kokkos-num-thread=2" ran on the default threads without a word).
    for (int i = 1; i < kokkos_argc && stop < 0; ++i) {
      const std::string flag = kokkos_args[i];
      if (flag.rfind("--kokkos-", 0) != 0) continue;
      // The thread count's flag was renamed in Kokkos 3.7; the docs show the new name.
      const std::string older =
          flag.rfind("--kokkos-num-threads", 0) == 0 ? " (Kokkos before 3.7 names it --kokkos-threads)" : "";
      stop = 2;
      error = "Kokkos " + std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
              "." + std::to_string(KOKKOS_VERSION % 100) + ", which this build uses, does not know the flag '" + flag +
              "'" + older + ".\nRun with --kokkos-help for Kokkos' flags, or --help for the options.";
    }
    if (stop < 0) handle_stop_signals(name, session.rank() == 0, outputs);
    ConfigSource config;
    if (stop < 0) {
      try {
        // Flags given twice (a config file's, then the command line's) keep the last value.
        std::vector<std::string> args = expand_config(static_cast<int>(app_argv.size()), app_argv.data(), app, config);
        std::reverse(args.begin() + 1, args.end());  // CLI11 takes the remaining args reversed
        args.erase(args.begin());
        validate_kept_values_only(app);  // only the value kept is judged
        app.parse(args);
      } catch (const CLI::ParseError& e) {
        // --help, or --help with a bad value beside it ("--model.layers 0 --help"): the help,
        // which is what was asked for (CLI11 checks the value first).
        const bool help_asked =
            e.get_exit_code() == 0 || std::any_of(app_argv.begin() + 1, app_argv.end(), [](const char* a) {
              return std::string(a) == "--help" || std::string(a) == "-h";
            });
        if (help_asked) {
          if (session.rank() == 0) e.get_exit_code() == 0 ? app.exit(e) : app.exit(CLI::CallForHelp());
          stop = 0;
        } else {
          detail::quiet_stop_signals();
          stop = 2;
          error = explain(e, app) + config.blame(e.what()) + "\nRun with --help for the options.";
        }
      } catch (const ConfigError& e) {
        detail::quiet_stop_signals();
        stop = 2;
        error = e.message();
      }
    }
    if (const int status = detail::settle_flags(session, name, stop, error); status >= 0) return status;
    // What the app printed goes out before the ranks part: where a pipe holds stdout, the
    // launcher that takes the job down once another rank has exited would lose it.
    try {
      const int status = body(session);
      std::fflush(stdout);
      return status;
    } catch (const std::exception& e) {
      std::fflush(stdout);
      detail::quiet_stop_signals();
      const auto* error = dynamic_cast<const Error*>(&e);
      const std::string text = error != nullptr ? error->message() : e.what();
      if (session.size() == 1) {
        std::fprintf(stderr, "%s: error: %s\n", name.c_str(), text.c_str());
        return 1;
      }
      // Ranks that fail together fail at about the same time; one that fails alone waits 2 s.
      // Where all came, rank 0 prints what they said: once where they agree, and where they
      // differ each text with its ranks (a rank's own failure, and its peers' consequences of
      // it: a Gloo peer that closes its connections fails its neighbours within milliseconds).
      if (const auto texts = session.gather_texts_within(text, std::chrono::seconds(2))) {
        if (session.rank() == 0) detail::print_rank_texts(name, *texts, session.size());
        return 1;
      }
      std::fprintf(stderr, "%s: error: %s [rank %d]\n", name.c_str(), text.c_str(), session.rank());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      return 1;
    }
  } catch (const std::exception& e) {
    if (!started && kokkos_argc > 1) {
      // Kokkos refused a value of its own flags (Kokkos 3: "--kokkos-threads=-3"); every rank
      // was given the same flags, so the first says it.
      if (first_rank) {
        // Kokkos' own text may end in a line about tracebacks, which says nothing here.
        std::string why = e.what();
        why = why.substr(0, why.find("\nTraceback"));
        while (!why.empty() && std::isspace(static_cast<unsigned char>(why.back()))) why.pop_back();
        std::string flags;
        for (int i = 1; i < kokkos_argc; ++i) flags += std::string(flags.empty() ? "" : " ") + kokkos_argv[i];
        std::fprintf(stderr,
                     "%s: error: Kokkos did not start with the flags %s (%s); give each a value Kokkos takes: "
                     "--kokkos-help lists them\n",
                     name.c_str(), flags.c_str(), why.c_str());
      }
      return 2;
    }
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}

/// The same for an app that writes files step by step (tessera-train).
inline int run_app(int argc, char** argv, CLI::App& app, const std::function<int(Session&)>& body) {
  return run_app(argc, argv, app, Outputs::StepByStep, body);
}

}  // namespace tessera::apps
