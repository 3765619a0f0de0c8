#pragma once
// Internal: the fence that every rank of an MPI communicator passes before an operation that
// cannot time out by itself (a blocking collective, a split, communicator creation,
// MPI_Finalize): a dissemination exchange, polled against a deadline, that also tells
// whether every rank came for the same thing.

#include <mpi.h>

#include <chrono>
#include <cstdint>

namespace tessera::detail {

/// What a fence exchanges, owned by whoever runs it: after a timeout its requests stay
/// posted and may still write here, so it must outlive them (a communicator, or the process).
struct FenceBuffers {
  std::uint64_t out[2] = {0, 0};  // the lowest and highest hash this rank has seen
  std::uint64_t in[2] = {0, 0};
};

enum class FenceResult { Agree, Differ, Expired };

/// Waits until every rank of `comm` has called this with its `hash`, or `deadline` passes
/// (never, with `forever`): ceil(log2 p) rounds of 16-byte messages, after which every rank
/// holds the lowest and highest hash of all ranks, so every rank returns the same answer.
/// Uses tags tag .. tag + ceil(log2 p) - 1. On Expired the posted requests are cancelled.
FenceResult fence(MPI_Comm comm, int rank, int size, std::uint64_t hash, FenceBuffers& buffers, int tag,
                  std::chrono::steady_clock::time_point deadline, bool forever);

/// Polls the requests until all complete (true) or the deadline passes (false, requests
/// left pending). Spins briefly, then yields and sleeps, so a rank waiting for a late peer
/// does not starve the peer's core. With `statuses` and `code` (one request only: of
/// several, some could still be pending beside one that failed), fills the status and puts
/// in *code, rather than raising it, an error the request ended with (MPI_ERR_IN_STATUS: see
/// the status).
bool wait_all_until(MPI_Request* requests, int count, std::chrono::steady_clock::time_point deadline, bool forever,
                    MPI_Status* statuses = MPI_STATUSES_IGNORE, int* code = nullptr);

}  // namespace tessera::detail
