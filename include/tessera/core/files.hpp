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

/// Puts the finished copy `written` in place of `target` (a file the user had): the copy's
/// data reaches the disk first (fsync), then it is renamed over the target, and the rename is
/// made durable (fsync of the directory). So a crash or a lost node soon after leaves the old
/// file or the new one, never an empty or partly written one; an error (a full or over-quota
/// file system that says so only now, as NFS does) throws std::system_error, with the user's
/// file untouched and `written` still there for the caller to remove.
void replace_file(const std::filesystem::path& written, const std::filesystem::path& target);

/// Creates (or empties) `copy`, the file that will replace `target`, and returns its
/// descriptor, open for writing. Where `target` exists, the copy has its permissions, and its
/// owner and group where this process may set them, before any byte is written: a private
/// file's data is never readable by others on its way. A symbolic link at `copy` is refused,
/// not followed. Throws std::system_error.
int open_copy(const std::filesystem::path& copy, const std::filesystem::path& target);

/// Files being written that are not the user's yet: a copy that is renamed over its target
/// when complete (model files, the apps' outputs). While one is tracked,
/// remove_unfinished_files() deletes it; that call is async-signal-safe, so a SIGINT or
/// SIGTERM handler (Ctrl-C, scancel, a job's time limit) can leave nothing half-written behind.
/// Up to 64 files at once, paths up to 4095 bytes; more are written as before, untracked.
class UnfinishedFile {
 public:
  explicit UnfinishedFile(const std::string& path);
  ~UnfinishedFile();  ///< no longer tracked: renamed into place, or removed by its owner
  UnfinishedFile(const UnfinishedFile&) = delete;
  UnfinishedFile& operator=(const UnfinishedFile&) = delete;

 private:
  int slot_ = -1;
};

/// Deletes every tracked unfinished file (unlink, nothing else: safe in a signal handler).
void remove_unfinished_files() noexcept;

}  // namespace tessera
