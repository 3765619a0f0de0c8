#pragma once
// Internal: checks an MPI call's return code and throws a tessera::CommError naming the
// call, the rank and the place. Requires MPI_ERRORS_RETURN on the communicator (Session
// sets it on MPI_COMM_WORLD; duplicates inherit it).

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>

#include <tessera/core/error.hpp>

namespace tessera::detail {
/// A private duplicate of MPI_COMM_WORLD made when the Session started (so making it cannot
/// hang later): the watchdog's questions and the fence before communicator creation use it.
MPI_Comm control_comm();
/// Records that a communicator failed (a timeout, a mismatch, a backend error). MPI may then
/// be waiting for a rank that will never come, so the Session will not call MPI_Finalize,
/// which would wait for it too, and the process can exit.
void note_communication_failure() noexcept;
bool communication_failed() noexcept;
/// Records the timeout of communicator `comm_id` (zero: none), as it is made or set: the end
/// of the job waits for every rank as long as the longest of the communicators' last ones
/// (TESSERA_COMM_TIMEOUT's where the job made none), so that a timeout set in code or by an
/// app's flag holds there too.
void note_comm_timeout(std::uint64_t comm_id, std::chrono::milliseconds timeout) noexcept;

/// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string mpi_error_string(int code);
[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line);
}  // namespace tessera::detail

#define TESSERA_CHECK_MPI(call)                                                       \
  do {                                                                                \
    const int tessera_mpi_rc_ = (call);                                               \
    if (tessera_mpi_rc_ != MPI_SUCCESS)                                               \
      ::tessera::detail::throw_mpi_error(#call, tessera_mpi_rc_, __FILE__, __LINE__); \
  } while (0)
