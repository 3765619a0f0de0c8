#pragma once
// Shared top of every Tessera app: start the Session, parse flags, run, and turn any error
// into one clear message and a non-zero exit on every rank (aborting the job when ranks
// may disagree, so none is left hanging).

#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

#include <tessera/core/error.hpp>
#include <tessera/core/session.hpp>

#include "config_file.hpp"

namespace tessera::apps {

/// Runs body(session) inside a Session after parsing the flags (and the TOML file named by
/// --config, if the app has that option). Kokkos sees only its own --kokkos-* flags, the app
/// all the others (so --help is the app's alone). Flag and config-file errors are the same on
/// every rank, so every rank exits with the same code and rank 0 prints the message. Errors
/// during the run may hit one rank only: that rank prints and aborts the whole job.
inline int run_app(int argc, char** argv, CLI::App& app, const std::function<int(Session&)>& body) {
  const char* name = argv[0];
  std::vector<char*> kokkos_argv = {argv[0]}, app_argv = {argv[0]};
  for (int i = 1; i < argc; ++i)
    (std::string(argv[i]).rfind("--kokkos-", 0) == 0 ? kokkos_argv : app_argv).push_back(argv[i]);
  int kokkos_argc = static_cast<int>(kokkos_argv.size());
  kokkos_argv.push_back(nullptr);
  char** kokkos_args = kokkos_argv.data();
  try {
    Session session(kokkos_argc, kokkos_args);
    try {
      // Flags given twice (a config file's, then the command line's) keep the last value.
      std::vector<std::string> args = expand_config(static_cast<int>(app_argv.size()), app_argv.data(), app);
      std::reverse(args.begin() + 1, args.end());  // CLI11 takes the remaining args reversed
      args.erase(args.begin());
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      if (session.rank() == 0) return app.exit(e);
      return e.get_exit_code();
    } catch (const ConfigError& e) {
      if (session.rank() == 0) std::fprintf(stderr, "%s: error: %s\n", name, e.message().c_str());
      return 2;
    }
    try {
      return body(session);
    } catch (const std::exception& e) {
      // When every rank fails alike (bad input), rank 0's abort ends the job before the
      // others print, so the user reads one message; a rank failing alone still reports.
      if (session.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::fprintf(stderr, "%s: error: %s\n", name, e.what());
      std::fflush(stderr);
      if (session.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace tessera::apps
