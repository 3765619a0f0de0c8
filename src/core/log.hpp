#pragma once
// Internal: the library's logger. Level from TESSERA_LOG_LEVEL (trace, debug, info, warn,
// error, off; default warn), written to stderr with the rank.

#include <spdlog/spdlog.h>

namespace tessera::detail {
spdlog::logger& logger();
}  // namespace tessera::detail
