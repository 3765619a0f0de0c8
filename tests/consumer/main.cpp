// Uses only the installed headers and Tessera::tessera.
#include <tessera/tessera.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  tessera::Session session(argc, argv);
  auto comm = tessera::comm::Communicator::create(tessera::comm::Backend::Mpi);
  tessera::View1D<double> x("x", 4);
  Kokkos::deep_copy(x, 1.0);
  comm->all_reduce(x, tessera::comm::ReduceOp::Sum);
  auto h = Kokkos::create_mirror_view(x);
  Kokkos::deep_copy(h, x);
  const bool ok = h(3) == comm->size();
  std::printf("consumer: Tessera %s, all_reduce %s\n", TESSERA_VERSION_STRING, ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
