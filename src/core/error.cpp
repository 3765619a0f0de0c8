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
  // Keep the part from the project's top-level folders on, so messages do not carry
  // the build machine's absolute paths.
  for (const char* marker : {"/src/", "/include/", "/apps/", "/perf/", "/tests/"}) {
    if (const char* p = std::strstr(file, marker)) return p + 1;
  }
  return file;
}
}  // namespace detail
}  // namespace tessera
