// Configure-time check (TesseraKokkosCheck.cmake): destroying a default-constructed View
// must do nothing. A miscompiled Kokkos allocation tracker makes it dereference a null
// record, and this program crash.
#include <Kokkos_Core.hpp>

int main() {
  { Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> unallocated; }
  return 0;
}
