#pragma once
// tessera-train --trace FILE: every rank's timeline in one Chrome trace JSON file (ranks as
// processes, tracks as threads), which Perfetto (ui.perfetto.dev) and chrome://tracing open.

#include <mpi.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <tessera/core/error.hpp>
#include <tessera/core/trace.hpp>

#include "output_file.hpp"

namespace tessera::apps {

/// Starts the trace on every rank at once (collective over MPI_COMM_WORLD).
inline void start_trace() {
  MPI_Barrier(MPI_COMM_WORLD);
  trace::start();
}

/// Stops the trace and writes every rank's events to `path` from rank 0 (collective). For a
/// run that did not finish, a file the user already had stays as it was (and no rank builds
/// a trace that would be thrown away). Returns, on rank 0, what a failed run's message should
/// add about the file.
inline std::string write_trace(const std::string& path, bool finished) {
  const auto events = trace::stop();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::unique_ptr<OutputFile> file;
  int keep_old = 0;
  if (rank == 0) {
    file = std::make_unique<OutputFile>("--trace", path);
    keep_old = !finished && file->existed();
  }
  MPI_Bcast(&keep_old, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (keep_old) return rank == 0 ? "; " + file->abandon() : std::string();
  nlohmann::json mine = nlohmann::json::array();
  std::map<std::string, int> tracks;
  mine.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  mine.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  for (const auto& e : events) {
    auto [it, added] = tracks.emplace(e.track, static_cast<int>(tracks.size()));
    if (added)
      mine.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", it->second}, {"args", {{"name", e.track}}}});
    mine.push_back({{"ph", "X"},
                    {"name", e.name},
                    {"cat", e.category},
                    {"pid", rank},
                    {"tid", it->second},
                    {"ts", e.start_us},
                    {"dur", e.duration_us}});
  }
  const std::string text = mine.dump();
  int size = static_cast<int>(text.size());
  std::vector<int> sizes(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks));
  MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<char> all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < ranks; ++r) {
      offsets[static_cast<std::size_t>(r)] = total;
      total += sizes[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(text.data(), size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank != 0) return {};
  nlohmann::json out = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
  for (int r = 0; r < ranks; ++r) {
    const auto part =
        nlohmann::json::parse(all.begin() + offsets[static_cast<std::size_t>(r)],
                              all.begin() + offsets[static_cast<std::size_t>(r)] + sizes[static_cast<std::size_t>(r)]);
    for (const auto& e : part) out["traceEvents"].push_back(e);
  }
  file->stream() << out.dump() << "\n";
  file->commit();
  return finished ? std::string() : "; --trace '" + path + "' holds the steps up to the failure";
}

}  // namespace tessera::apps
