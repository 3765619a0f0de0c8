// Uses only the installed headers and Tessera::tessera.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  tessera::Session session(argc, argv);
  auto comm = tessera::comm::Communicator::create(tessera::comm::Backend::Mpi);
  // Rank r sends r + 1 into a result that starts as NaN: a call that moved nothing fails too.
  tessera::View1D<double> send("send", 4), recv("recv", 4);
  Kokkos::deep_copy(send, comm->rank() + 1.0);
  Kokkos::deep_copy(recv, std::nan(""));
  comm->all_reduce(send, recv, tessera::comm::ReduceOp::Sum);
  auto h = Kokkos::create_mirror_view(recv);
  Kokkos::deep_copy(h, recv);
  const double n = comm->size();
  const bool ok = h(0) == n * (n + 1) / 2 && h(3) == n * (n + 1) / 2;
  std::printf("consumer: Tessera %s, %d rank(s), all_reduce %s\n", TESSERA_VERSION_STRING, comm->size(),
              ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
