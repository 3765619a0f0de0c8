#include <tessera/core/files.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

namespace tessera {
namespace {

// A fixed table, so that a signal handler can walk it: no allocation, no lock, only atomic
// loads and unlink(). A slot is free (0), being filled or emptied (1), or tracked (2).
constexpr int kSlots = 64;
constexpr std::size_t kPathBytes = 4096;
std::array<std::atomic<int>, kSlots> g_state{};
std::array<std::array<char, kPathBytes>, kSlots> g_path{};

}  // namespace

UnfinishedFile::UnfinishedFile(const std::string& name) {
  // Absolute, so that the path still names the file whatever the directory is by then.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(name, ec);
  const std::string path = ec ? name : absolute.string();
  if (path.empty() || path.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i) {
    int free_slot = 0;
    if (g_state[i].compare_exchange_strong(free_slot, 1)) {
      std::memcpy(g_path[i].data(), path.c_str(), path.size() + 1);
      g_state[i].store(2);
      slot_ = i;
      return;
    }
  }
}

UnfinishedFile::~UnfinishedFile() {
  if (slot_ < 0) return;
  g_state[slot_].store(1);
  g_path[slot_][0] = '\0';
  g_state[slot_].store(0);
}

void remove_unfinished_files() noexcept {
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load() == 2) ::unlink(g_path[i].data());
}

namespace {
/// Flushes `path` (a file or a directory) to the disk; errno's error where it cannot be.
std::error_code sync_path(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return {errno, std::generic_category()};
  std::error_code ec;
  if (::fsync(fd) != 0) ec = {errno, std::generic_category()};
  if (::close(fd) != 0 && !ec) ec = {errno, std::generic_category()};
  return ec;
}
}  // namespace

int open_copy(const std::filesystem::path& copy, const std::filesystem::path& target) {
  struct stat had {};
  const bool replaces = ::stat(target.c_str(), &had) == 0;
  // Owner-only until it has the target's permissions.
  const int fd = ::open(copy.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, replaces ? 0600 : 0666);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "could not create '" + copy.string() + "'");
  if (replaces) {
    // The mode first: a copy given away (chown) may no longer be this process's to change.
    // Then the owner and group, where this process may give them (root, or a group it is in;
    // otherwise the copy stays this user's), and the mode again, which chown clears of its
    // set-user-id and set-group-id bits.
    if (::fchmod(fd, had.st_mode & 07777) != 0) {
      const int e = errno;
      ::close(fd);
      throw std::system_error(
          e, std::generic_category(),
          "'" + copy.string() + "' could not be given the permissions of '" + target.string() + "'");
    }
    if (::fchown(fd, had.st_uid, had.st_gid) == 0 && (had.st_mode & 06000) != 0) {
      if (::fchmod(fd, had.st_mode & 07777) != 0) {
        // Kept without those bits: this process may no longer change the copy's mode.
      }
    }
  }
  return fd;
}

void replace_file(const std::filesystem::path& written, const std::filesystem::path& target) {
  if (const auto ec = sync_path(written, O_RDONLY))
    throw std::system_error(ec, "'" + written.string() + "' could not be flushed to the disk");
  std::filesystem::rename(written, target);  // throws filesystem_error, leaving the target as it was
  // The rename's own durability: where the directory cannot be opened or synced (some file
  // systems refuse fsync on a directory), the new file is in place all the same.
  const auto dir = target.parent_path();
  (void)sync_path(dir.empty() ? std::filesystem::path(".") : dir, O_RDONLY | O_DIRECTORY);
}

static_assert(std::atomic<int>::is_always_lock_free, "the table is read from signal handlers");

}  // namespace tessera
