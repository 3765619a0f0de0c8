// The host loops for CPUs with AVX2 (compiled with its flags: src/CMakeLists.txt).
#define TESSERA_HOST_LOOPS_ISA avx2
#include "kernels/host_loops_body.hpp"

namespace tessera::kernels {
extern const HostLoops k_avx2_loops;
const HostLoops k_avx2_loops = {"avx2", avx2::gelu_forward, avx2::gelu_backward};
}  // namespace tessera::kernels
