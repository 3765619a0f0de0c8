// The host loops for CPUs with AVX512 (compiled with its flags: src/CMakeLists.txt).
#define TESSERA_HOST_LOOPS_ISA avx512
#include "kernels/host_loops_body.hpp"

namespace tessera::kernels {
extern const HostLoops k_avx512_loops;
const HostLoops k_avx512_loops = {"avx512", avx512::gelu_forward, avx512::gelu_backward};
}  // namespace tessera::kernels
