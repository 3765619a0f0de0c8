#pragma once
/// \file
/// Tessera's exception hierarchy. Library code throws these rather than printing an error or
/// exiting, but for the two ends of a process that MPI leaves no other way out of
/// (docs/architecture.md: a backend call stuck past its deadline, a receive that timed out
/// with its data partly received); apps catch them at the top.

#include <stdexcept>
#include <string>

namespace tessera {

/// Base of every error Tessera raises. what() reads like
/// "MPI_Allreduce failed on rank 3 (src/comm/mpi/mpi_communicator.cpp:88): MPI_ERR_TRUNCATE".
class Error : public std::runtime_error {
 public:
  /// \param message what went wrong and, where it helps, how to fix it
  /// \param file, line where it was detected (nullptr for none)
  Error(const std::string& message, const char* file = nullptr, int line = 0);
  /// The message without the rank/location decoration.
  const std::string& message() const noexcept { return message_; }
  /// World rank that raised it, or -1 if unknown (before the Session started).
  int rank() const noexcept { return rank_; }

 private:
  std::string message_;
  int rank_;
};

/// A configuration, argument or layout the user can fix (bad flag, bad sizes, bad env var).
class ConfigError : public Error {
  using Error::Error;
};

/// A failure inside a communication library or a broken communicator.
class CommError : public Error {
  using Error::Error;
};

/// A blocking wait that passed its deadline (see TESSERA_COMM_TIMEOUT).
class TimeoutError : public CommError {
  using CommError::CommError;
};

/// Ranks disagreed about which collective they were running (TESSERA_COMM_CHECK=1).
class MismatchError : public CommError {
  using CommError::CommError;
};

/// A value that must stay finite (a loss, a gradient norm) became NaN or infinite.
class NonFiniteError : public Error {
  using Error::Error;
};

/// A failure reading or writing a checkpoint or dataset.
class CheckpointError : public Error {
  using Error::Error;
};

/// A feature whose backend was not compiled into this build.
class NotCompiledError : public ConfigError {
  using ConfigError::ConfigError;
};

namespace detail {
/// Records the world rank used to decorate errors (set by Session).
void set_error_rank(int rank) noexcept;
/// Path relative to the source tree, for messages.
const char* short_path(const char* file) noexcept;
}  // namespace detail

}  // namespace tessera

/// Throws ExceptionType with the message and the current file and line.
#define TESSERA_THROW(ExceptionType, message) throw ExceptionType((message), __FILE__, __LINE__)

/// Throws tessera::ConfigError unless cond holds.
#define TESSERA_REQUIRE(cond, message)                           \
  do {                                                           \
    if (!(cond)) TESSERA_THROW(::tessera::ConfigError, message); \
  } while (0)
