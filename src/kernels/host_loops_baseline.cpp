// The host loops for the build's own target (any CPU it runs on).
#define TESSERA_HOST_LOOPS_ISA baseline
#include "kernels/host_loops_body.hpp"

namespace tessera::kernels {
extern const HostLoops k_baseline_loops;
const HostLoops k_baseline_loops = {"baseline", baseline::gelu_forward, baseline::gelu_backward};
}  // namespace tessera::kernels
