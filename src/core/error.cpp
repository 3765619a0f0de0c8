#include <tessera/core/error.hpp>

#include <atomic>
#include <cstring>

namespace tessera {
namespace {
std::atomic<int> g_error_rank{-1};

std::string decorate(const std::string& message, int rank, const char* file, int line) {
  std::string where;
  if (rank >= 0) where = "rank " + std::to_string(rank);
  if (file != nullptr) {
    if (!where.empty()) where += ", ";
    where += std::string(detail::short_path(file)) + ":" + std::to_string(line);
  }
  return where.empty() ? message : message + " [" + where + "]";
}
}  // namespace

Error::Error(const std::string& message, const char* file, int line)
    : std::runtime_error(decorate(message, g_error_rank.load(), file, line)),
      message_(message),
      rank_(g_error_rank.load()) {}

namespace detail {
void set_error_rank(int rank) noexcept { g_error_rank.store(rank); }

const char* short_path(const char* file) noexcept {
  // Messages name files relative to the source tree, not by the build machine's absolute
  // paths. Files of this tree lose its prefix; others (e.g. an installed header compiled
  // into a user's program) keep what follows the last of the tree's top-level folder names,
  // so that a folder called src above the checkout does not cut the path short.
#ifdef TESSERA_SOURCE_DIR
  const std::size_t n = std::strlen(TESSERA_SOURCE_DIR);
  if (std::strncmp(file, TESSERA_SOURCE_DIR, n) == 0 && file[n] == '/') return file + n + 1;
#endif
  const char* best = nullptr;
  for (const char* marker : {"/src/", "/include/", "/apps/", "/perf/", "/tests/"}) {
    for (const char* p = std::strstr(file, marker); p != nullptr; p = std::strstr(p + 1, marker))
      if (best == nullptr || p > best) best = p;
  }
  return best != nullptr ? best + 1 : file;
}
}  // namespace detail
}  // namespace tessera
