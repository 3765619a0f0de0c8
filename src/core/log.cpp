#include "core/log.hpp"

#include <mpi.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

namespace tessera::detail {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("tessera", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    int rank = 0, initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    l->set_pattern("[tessera rank " + std::to_string(rank) + "] %l: %v");
    l->set_level(spdlog::level::warn);
    if (const char* env = std::getenv("TESSERA_LOG_LEVEL"); env != nullptr && *env != '\0') {
      std::string name = env;
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      // spdlog reads a name it does not know as "off", which would hide every warning.
      const auto level = spdlog::level::from_str(name);
      if (level != spdlog::level::off || name == "off")
        l->set_level(level);
      else if (rank == 0)
        l->warn("TESSERA_LOG_LEVEL='{}' is not a log level; use trace, debug, info, warn, error or off (keeping warn)",
                env);
    }
    return l;
  }();
  return *logger;
}

}  // namespace tessera::detail
