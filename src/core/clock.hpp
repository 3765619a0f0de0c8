#pragma once
// Internal: the clock of Tessera's own timings (the step's parts, exposed communication).

#include <chrono>

namespace tessera {

using Clock = std::chrono::steady_clock;

/// Seconds from `t` to now.
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace tessera
