#pragma once
// Internal: ranks named compactly in messages ("0-3, 5, 7-9"), for the communicators' and
// the Session's own (comm/rank_list.hpp adds the world ranks of a sub-communicator's).

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace tessera::detail {

/// "3", "0, 1", "0-3, 5, 7-9": the ranks in ascending order, runs of three or more as ranges.
inline std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j == i + 1) text += ", " + std::to_string(ranks[j]);
    if (j > i + 1) text += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace tessera::detail
