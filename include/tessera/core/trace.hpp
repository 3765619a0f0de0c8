#pragma once
/// \file
/// A per-rank timeline of what a step does (forward, backward, optimizer, each collective),
/// recorded only while a trace runs: off, a probe costs one relaxed atomic load.
/// tessera-train --trace writes it for the whole job as Chrome trace JSON (Perfetto opens it).

#include <chrono>
#include <string>
#include <vector>

namespace tessera::trace {

using Clock = std::chrono::steady_clock;

/// One span of time on one track of this rank (microseconds since start()).
struct Event {
  std::string name;      ///< e.g. "forward", "all_reduce (1024 x float32, sum)"
  std::string category;  ///< "step" or "collective"
  std::string track;     ///< the timeline it belongs to: "step", or "comm <communicator>"
  double start_us = 0;
  double duration_us = 0;
};

/// Whether events are being recorded on this rank.
bool enabled() noexcept;
/// Drops earlier events and records from now on; times are measured from this call (call
/// it on every rank right after a barrier, so that the ranks' timelines line up).
void start();
/// Stops recording and hands over this rank's events, in the order they ended.
std::vector<Event> stop();
/// Records [begin, end) (thread-safe; nothing when not enabled).
void record(const char* category, std::string name, std::string track, Clock::time_point begin, Clock::time_point end);

}  // namespace tessera::trace
