#pragma once
// tessera-train --trace FILE: every rank's timeline in one Chrome trace JSON file (ranks as
// processes, tracks as threads), which Perfetto (ui.perfetto.dev) and chrome://tracing open.

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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
  // Rank 0 says what comes next: 0 write, 1 keep the user's old file, 2 the file cannot be
  // opened (rank 0 throws; the others too, instead of waiting in the gather below).
  std::unique_ptr<OutputFile> file;
  std::exception_ptr opening;
  int next = 0;
  if (rank == 0) {
    try {
      file = std::make_unique<OutputFile>("--trace", path);
      next = !finished && file->existed() ? 1 : 0;
    } catch (...) {
      opening = std::current_exception();
      next = 2;
    }
  }
  MPI_Bcast(&next, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (opening) std::rethrow_exception(opening);
  if (next == 2) throw Error("rank 0 could not open --trace '" + path + "' (its message says why)");
  if (next == 1) return rank == 0 ? "; " + file->abandon() : std::string();
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
  const std::string text = mine.dump();  // "[{...},{...}]"
  // Each rank's events go to rank 0 as text in pieces of at most 1 GiB (MPI counts are int),
  // and rank 0 writes them as they come, without parsing: the file's size is not bounded by
  // rank 0's memory or by 2 GiB. Every rank leaves together, once rank 0 has written the file,
  // and knows whether it could: writing can take longer than the window in which the ranks
  // of a failed run must stop alike.
  constexpr std::size_t kPiece = std::size_t(1) << 30;
  const auto events_of = [](const std::string& array) {  // the array's elements, without "[" "]"
    return array.size() > 2 ? std::string_view(array).substr(1, array.size() - 2) : std::string_view();
  };
  int written = 1;
  if (rank != 0) {
    const auto size = static_cast<std::uint64_t>(text.size());
    MPI_Send(&size, 1, MPI_UINT64_T, 0, 0, MPI_COMM_WORLD);
    for (std::size_t at = 0; at < text.size(); at += kPiece)
      MPI_Send(text.data() + at, static_cast<int>(std::min(kPiece, text.size() - at)), MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    MPI_Bcast(&written, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!written) throw Error("rank 0 could not write --trace '" + path + "' (its message says why)");
    return {};
  }
  auto& out = file->stream();
  bool first = true;
  const auto put = [&](std::string_view part) {
    if (part.empty()) return;
    if (!first) out << ',';
    out << part;
    first = false;
  };
  out << R"({"displayTimeUnit":"ms","traceEvents":[)";
  put(events_of(text));
  std::string part;
  for (int r = 1; r < ranks; ++r) {
    std::uint64_t size = 0;
    MPI_Recv(&size, 1, MPI_UINT64_T, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    part.resize(static_cast<std::size_t>(size));
    for (std::size_t at = 0; at < part.size(); at += kPiece)
      MPI_Recv(part.data() + at, static_cast<int>(std::min(kPiece, part.size() - at)), MPI_CHAR, r, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    put(events_of(part));
  }
  out << "]}\n";
  std::exception_ptr writing;
  try {
    file->commit();
  } catch (...) {
    writing = std::current_exception();
    written = 0;
  }
  MPI_Bcast(&written, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (writing) std::rethrow_exception(writing);
  return finished ? std::string() : "; --trace '" + path + "' holds the steps up to the failure";
}

}  // namespace tessera::apps
