#include "core/mpi_fence.hpp"

#include <algorithm>
#include <thread>

#include <tessera/core/error.hpp>

#include "core/mpi_check.hpp"

namespace tessera::detail {

bool wait_all_until(MPI_Request* requests, int count, std::chrono::steady_clock::time_point deadline, bool forever,
                    MPI_Status* statuses, int* code) {
  using Clock = std::chrono::steady_clock;
  if (code != nullptr && count != 1) throw Error("internal: wait_all_until returns the error code of one request only");
  // The clock is read only once the requests did not complete at once: a fence between
  // ranks that are in step costs no clock reads (each is about 25 ns).
  Clock::time_point start{};
  for (std::uint64_t spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Testall(count, requests, &done, statuses);
    if (rc != MPI_SUCCESS && code != nullptr) {
      *code = rc;
      return true;
    }
    TESSERA_CHECK_MPI(rc);
    if (done) return true;
    if ((spins & 63) == 63) {
      const auto now = Clock::now();
      if (!forever && now >= deadline) return false;
      if (spins == 63) start = now;
      const auto waited = now - start;
      if (waited > std::chrono::milliseconds(20)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      } else if (waited > std::chrono::microseconds(200)) {
        std::this_thread::yield();
      }
    }
  }
}

FenceResult fence(MPI_Comm comm, int rank, int size, std::uint64_t hash, FenceBuffers& b, int tag,
                  std::chrono::steady_clock::time_point deadline, bool forever) {
  std::uint64_t lo = hash, hi = hash;
  for (int k = 1, round = 0; k < size; k <<= 1, ++round) {
    b.out[0] = lo;
    b.out[1] = hi;
    MPI_Request r[2];
    TESSERA_CHECK_MPI(MPI_Irecv(b.in, 2, MPI_UINT64_T, (rank - k + size) % size, tag + round, comm, &r[0]));
    TESSERA_CHECK_MPI(MPI_Isend(b.out, 2, MPI_UINT64_T, (rank + k) % size, tag + round, comm, &r[1]));
    if (!wait_all_until(r, 2, deadline, forever)) {
      for (auto& q : r) {
        if (q == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&q);
        MPI_Request_free(&q);
      }
      return FenceResult::Expired;
    }
    lo = std::min(lo, b.in[0]);
    hi = std::max(hi, b.in[1]);
  }
  return lo == hi ? FenceResult::Agree : FenceResult::Differ;
}

}  // namespace tessera::detail
