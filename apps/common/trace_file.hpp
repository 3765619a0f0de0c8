#pragma once
// tessera-train --trace FILE: every rank's timeline in one Chrome trace JSON file (ranks as
// processes, tracks as threads), which Perfetto (ui.perfetto.dev) and chrome://tracing open.

#include <mpi.h>

#include <algorithm>
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
  mine.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  mine.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  // Spans on one thread of a trace must nest: Perfetto drops those that overlap partly. Sends
  // and receives in flight at once do, so each track is laid out in lanes ("comm world.pp",
  // "comm world.pp (2)", ...): a span goes on the first lane where it starts after the spans
  // there end, or inside the one still open.
  struct Lane {
    int tid;
    std::vector<double> open_ends;  // ends of the spans still open on it, outermost first
  };
  std::map<std::string, std::vector<Lane>> lanes;
  std::vector<const trace::Event*> order;
  for (const auto& e : events) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const trace::Event* a, const trace::Event* b) {
    return a->start_us != b->start_us ? a->start_us < b->start_us : a->duration_us > b->duration_us;
  });
  int tids = 0;
  for (const trace::Event* e : order) {
    const double end = e->start_us + e->duration_us;
    auto& track = lanes[e->track];
    Lane* lane = nullptr;
    for (auto& l : track) {
      while (!l.open_ends.empty() && l.open_ends.back() <= e->start_us) l.open_ends.pop_back();
      if (l.open_ends.empty() || end <= l.open_ends.back()) {
        lane = &l;
        break;
      }
    }
    if (lane == nullptr) {
      track.push_back({tids++, {}});
      lane = &track.back();
      const std::string name = track.size() == 1 ? e->track : e->track + " (" + std::to_string(track.size()) + ")";
      mine.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", lane->tid}, {"args", {{"name", name}}}});
    }
    lane->open_ends.push_back(end);
    mine.push_back({{"ph", "X"},
                    {"name", e->name},
                    {"cat", e->category},
                    {"pid", rank},
                    {"tid", lane->tid},
                    {"ts", e->start_us},
                    {"dur", e->duration_us}});
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
