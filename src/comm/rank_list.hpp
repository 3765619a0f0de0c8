#pragma once
// Internal: ranks named compactly in messages. On hundreds of ranks a timeout's message
// would otherwise list each of them, with the same words after each: runs of ranks become
// ranges ("4-1023"), and ranks with the same state share one entry.

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/rank_ranges.hpp"

namespace tessera::comm::detail {

using tessera::detail::rank_ranges;

/// Ranks of a communicator, as rank_ranges names them, and where their numbers in the job
/// differ (a sub-communicator's), the world ranks too, which the launcher and "[rank N]"
/// count. Up to `paired` ranks, each is listed and its world rank at the same place:
/// "1, 2 (world ranks 3, 0)"; more as ranges of both: "0-99 (world ranks 100-199)".
/// `detail` joins the parentheses: "1 (world rank 3; alive)".
inline std::string rank_list(const std::vector<int>& world_ranks, std::vector<int> ranks,
                             const std::string& detail = "", std::size_t paired = 8) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<int> world;
  bool differ = false;
  for (int r : ranks) {
    world.push_back(world_ranks[static_cast<std::size_t>(r)]);
    differ = differ || world.back() != r;
  }
  std::string locals = rank_ranges(ranks), inside;
  if (differ) {
    std::string worlds;
    if (ranks.size() <= paired) {
      locals.clear();
      for (std::size_t i = 0; i < ranks.size(); ++i) {
        locals += (i ? ", " : "") + std::to_string(ranks[i]);
        worlds += (i ? ", " : "") + std::to_string(world[i]);
      }
    } else {
      worlds = rank_ranges(world);
    }
    inside = (world.size() > 1 ? "world ranks " : "world rank ") + worlds;
  }
  if (!detail.empty()) inside += (inside.empty() ? "" : "; ") + detail;
  return locals + (inside.empty() ? "" : " (" + inside + ")");
}

/// Ranks with what is known of each, those with the same words in one entry, the entries in
/// the order of their lowest ranks: "0-3, 7 (did not answer within 1 s: ...); 5 (alive, ...)". At
/// most `entries` entries; the ranks of the rest are counted ("; and 12 more ranks").
inline std::string grouped_ranks(const std::vector<int>& world_ranks,
                                 const std::vector<std::pair<int, std::string>>& ranks, std::size_t entries = 8) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::map<std::string, std::size_t> group_of;  // a state's entry (thousands of ranks, few states)
  for (const auto& entry : ranks) {
    const auto [it, added] = group_of.emplace(entry.second, groups.size());
    if (added) groups.push_back({entry.second, {}});
    groups[it->second].second.push_back(entry.first);
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return *std::min_element(a.second.begin(), a.second.end()) < *std::min_element(b.second.begin(), b.second.end());
  });
  std::string text;
  std::size_t left = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (g < entries)
      text += (g ? "; " : "") + rank_list(world_ranks, groups[g].second, groups[g].first);
    else
      left += groups[g].second.size();
  }
  if (left > 0) text += "; and " + std::to_string(left) + (left == 1 ? " more rank" : " more ranks");
  return text;
}

}  // namespace tessera::comm::detail
