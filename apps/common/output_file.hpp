#pragma once
// The files an app writes (--metrics, --trace, --save, --json): checked before any work, and
// written so that a run that fails leaves a file the user already had as it was.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <tessera/core/error.hpp>
#include <tessera/core/files.hpp>

namespace tessera::apps {

/// The time now, UTC, in ISO 8601 ("2026-11-26T15:55:30Z"): when the run a results file
/// describes began, so that two files can be told apart later.
inline std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

/// Empty when a file can be created (or replaced) at `path`; otherwise what prevents it,
/// starting with `flag`. Nothing is left behind. `always_beside`: the file is always written
/// beside its target first (a model file), not only when the target exists (OutputFile).
inline std::string cannot_write(const std::string& flag, const std::string& path, bool always_beside = false) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = write_target(path);
  const std::string what = flag + " '" + path + "': ";
  const std::string via = target.string() == path ? "" : "its link leads to '" + target.string() + "', which ";
  // write_target follows 40 links at most: one still a link then is a loop (the save failed
  // only after the training, "Too many levels of symbolic links").
  if (fs::is_symlink(target, ec))
    return what + "its symbolic links form a loop (or a chain of more than 40); point the link at a file";
  if (fs::is_directory(target, ec)) return what + via + "is a directory; give a file name in it";
  if (fs::exists(target, ec) && !fs::is_regular_file(target, ec))
    return what + via +
           "is not a regular file (a device, FIFO or socket), which the run would replace; give a file name";
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) {
    for (fs::path up = dir; !up.empty() && up != up.parent_path(); up = up.parent_path())
      if (fs::exists(up, ec) && !fs::is_directory(up, ec))
        return what + "'" + up.string() + "' is a file, not a directory";
    return what + "the directory '" + dir.string() + "' does not exist; create it first";
  }
  if (!fs::is_directory(dir, ec)) return what + "'" + dir.string() + "' is a file, not a directory";
  // A file written beside its target as NAME.tmp.PID and renamed into place: a name the file
  // system takes whose copy's name is too long failed only once the run had finished. The
  // name suggested leaves room for any process id (7 digits).
  const std::string copy = target.filename().string() + ".tmp." + std::to_string(getpid());
  const long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  if ((always_beside || fs::exists(target, ec)) && name_max > 0 && static_cast<long>(copy.size()) > name_max)
    return what + "its name is " + std::to_string(target.filename().string().size()) +
           " characters long, and the file is first written beside it as '" + copy.substr(0, 12) + "....tmp." +
           std::to_string(getpid()) + "', " + std::to_string(copy.size()) + " characters, more than the " +
           std::to_string(name_max) + " this file system takes; give a name of at most " +
           std::to_string(name_max - static_cast<long>(std::string(".tmp.1234567").size())) + " characters";
  // In a directory whose sticky bit is set (as /tmp), only a file's owner (or the
  // directory's) may replace it: the rename into place failed after the run.
  struct stat dir_stat {};
  struct stat target_stat {};
  if (stat(dir.c_str(), &dir_stat) == 0 && (dir_stat.st_mode & S_ISVTX) != 0 &&
      stat(target.c_str(), &target_stat) == 0 && geteuid() != 0 && target_stat.st_uid != geteuid() &&
      dir_stat.st_uid != geteuid())
    return what + via + "is another user's file, in a directory where only a file's owner may replace it (its sticky " +
           "bit is set, as on /tmp); give a name of your own";
  const fs::path probe = dir / (".tessera-write-check-" + std::to_string(getpid()));
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return what + "cannot create files in '" + dir.string() + "' (" + std::strerror(errno) + ")";
  close(fd);
  fs::remove(probe, ec);
  if (fs::exists(target, ec) && access(target.c_str(), W_OK) != 0)
    return what + "the file exists and cannot be replaced (" + std::strerror(errno) + ")";
  return {};
}

/// Empty when every file the run writes (`outputs`: flag and path) is a file of its own: not
/// one another, and not a file the run reads (`inputs`); otherwise what collides. Empty paths
/// are not given.
inline std::string same_file_twice(const std::vector<std::pair<std::string, std::string>>& outputs,
                                   const std::vector<std::pair<std::string, std::string>>& inputs) {
  namespace fs = std::filesystem;
  const auto key = [](const std::string& path) {
    std::error_code ec;
    const fs::path p = fs::weakly_canonical(fs::absolute(write_target(path), ec), ec);
    return ec ? fs::absolute(path).lexically_normal() : p;
  };
  // One file by its path, or by two paths (hard links to one file, which replacing one of
  // them would part).
  const auto same = [&](const std::string& a, const std::string& b) {
    std::error_code ec;
    return key(a) == key(b) || (fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec);
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path.empty()) continue;
    for (std::size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[j].second.empty() && same(outputs[j].second, path))
        return flag + " '" + path + "' is also the " + outputs[j].first + " file; give it a name of its own";
    for (const auto& [input_flag, input] : inputs)
      if (!input.empty() && same(input, path))
        return flag + " '" + path + "' is the " + input_flag + " file this run reads; give it a name of its own";
  }
  return {};
}

/// Copies beside `path`'s target named as OutputFile and model files name theirs
/// (`NAME.tmp.PID`): a run that was killed outright (SIGKILL, a lost node) could not remove
/// its copy. Sorted by name.
inline std::vector<std::filesystem::path> leftover_copies(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> found;
  std::error_code ec;
  const fs::path target = write_target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.parent_path();  // named as the user named it: "m.jsonl.tmp.7", not "./m.jsonl.tmp.7"
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code entry;  // an entry that cannot be read (renamed meanwhile) ends nothing but itself
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos && it->is_regular_file(entry))
      found.push_back(dir / name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

/// One note per output file (`outputs`: flag and path; empty paths are not given) that has
/// such copies beside it, for an app to print: they are not the run's and it leaves them be.
inline std::vector<std::string> leftover_copy_notes(const std::vector<std::pair<std::string, std::string>>& outputs) {
  std::vector<std::string> notes;
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    const auto copies = leftover_copies(path);
    if (copies.empty()) continue;
    std::string names;
    for (const auto& c : copies) names += (names.empty() ? "'" : ", '") + c.string() + "'";
    const char* it = copies.size() == 1 ? "it" : "them";
    notes.push_back(flag + " '" + path + "': " + names +
                    (copies.size() == 1 ? " is an unfinished copy" : " are unfinished copies") +
                    " left behind by a run that was killed before it could clean up (SIGKILL, a lost node); "
                    "this run neither uses nor removes " +
                    it + ": unless another run is writing '" + path + "' now, remove " + it);
  }
  return notes;
}

/// A file an app writes as it runs (e.g. one metrics line per step). A new file is written in
/// place, so it can be watched; a file that exists is written beside it (`PATH.tmp.PID`) and
/// replaces it only when the run finishes (commit). A run that fails keeps what it wrote only
/// where there was no file before.
class OutputFile {
 public:
  OutputFile(std::string flag, std::string path)
      : flag_(std::move(flag)), path_(std::move(path)), target_(write_target(path_)) {
    std::error_code ec;
    writing_ = std::filesystem::exists(target_, ec)
                   ? std::filesystem::path(target_.string() + ".tmp." + std::to_string(getpid()))
                   : target_;
    if (writing_ != target_) {
      unfinished_ = std::make_unique<UnfinishedFile>(writing_.string());
      // Made with the user's file's permissions before anything is written to it.
      try {
        ::close(open_copy(writing_, target_));
      } catch (const std::system_error& e) {
        throw ConfigError("cannot write the " + flag_ + " file '" + path_ + "': " + e.what());
      }
    }
    stream_.open(writing_);
    if (!stream_) throw ConfigError("cannot write the " + flag_ + " file '" + path_ + "'");
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() {
    if (!done_) abandon();
  }

  std::ofstream& stream() { return stream_; }
  /// Whether the file existed when the run began.
  bool existed() const { return writing_ != target_; }

  /// The run finished: the file is complete and in place. Throws when it could not be.
  void commit() {
    done_ = true;
    stream_.close();
    std::string why;
    if (!stream_.fail() && writing_ != target_) {
      try {
        replace_file(writing_, target_);  // on the disk before it replaces the user's file
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (stream_.fail() || !why.empty()) {
      std::error_code ec;
      if (writing_ != target_) std::filesystem::remove(writing_, ec);
      unfinished_.reset();
      throw ConfigError("could not write the " + flag_ + " file '" + path_ + "'" +
                        (why.empty() ? std::string() : " (" + why + ")") +
                        (writing_ != target_ ? "; it was left as it was" : ""));
    }
    unfinished_.reset();
  }

  /// The run failed: a file the user had stays as it was. Returns what became of it, for the
  /// error message.
  std::string abandon() {
    done_ = true;
    stream_.close();
    if (writing_ == target_) return flag_ + " '" + path_ + "' holds the steps before the failure";
    std::error_code ec;
    std::filesystem::remove(writing_, ec);
    unfinished_.reset();
    return flag_ + " '" + path_ + "' was left as it was";
  }

 private:
  std::string flag_, path_;
  std::filesystem::path target_, writing_;
  bool done_ = false;
  std::unique_ptr<UnfinishedFile> unfinished_;  // the copy beside a file the user had, until renamed
  std::ofstream stream_;
};

}  // namespace tessera::apps
