#pragma once
/// \file
/// Paths of the files Tessera writes (model files, and the apps' metrics, traces and results).

#include <filesystem>
#include <string>
#include <system_error>

namespace tessera {

/// Where a write to `path` lands: symbolic links followed (a link to a scratch file system is
/// written through, not replaced), also when the last one points at a file not made yet.
inline std::filesystem::path write_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p;
}

}  // namespace tessera
