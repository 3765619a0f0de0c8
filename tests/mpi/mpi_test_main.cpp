// main() of every MPI test program: one Session per process; every rank runs every test;
// rank 0 prints the usual GoogleTest report, other ranks print only their failures; the
// exit code is non-zero if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include <tessera/core/session.hpp>

#include "comm/backend.hpp"
#include "test_support.hpp"

namespace {
/// Prints failed assertions of a rank other than 0, prefixed with the rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  tessera::Session session(argc, argv);
  if (tessera::test::backend_under_test() == tessera::comm::Backend::Nccl && !tessera::comm::detail::nccl_usable()) {
    // ctest reads this line as "skipped" (SKIP_REGULAR_EXPRESSION).
    if (session.rank() == 0) std::printf("SKIPPED: the nccl backend needs a usable GPU, and this machine has none\n");
    return 0;
  }
  if (session.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(session.rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  tessera::test::world_holder().reset();
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && !failed && session.rank() == 0) std::fprintf(stderr, "a test failed on another rank\n");
  return any;
}
