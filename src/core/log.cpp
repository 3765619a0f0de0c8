#include "core/log.hpp"

#include <mpi.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

namespace tessera::detail {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("tessera", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    int rank = 0, initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    l->set_pattern("[tessera rank " + std::to_string(rank) + "] %l: %v");
    const char* level = std::getenv("TESSERA_LOG_LEVEL");
    l->set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
    return l;
  }();
  return *logger;
}

}  // namespace tessera::detail
