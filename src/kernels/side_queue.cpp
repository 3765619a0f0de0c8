#include "kernels/side_queue.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include "core/cuda_check.hpp"
#endif

namespace tessera::kernels {

#ifdef KOKKOS_ENABLE_CUDA
struct SideQueue::Impl {
  cudaStream_t stream = nullptr;
  cudaEvent_t mark = nullptr;
  Kokkos::Cuda space;
  static cudaStream_t make_stream(bool urgent) {
    int least = 0, greatest = 0;
    TESSERA_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    TESSERA_CHECK_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, urgent ? greatest : least));
    return s;
  }
  explicit Impl(bool urgent) : stream(make_stream(urgent)), space(stream, Kokkos::Impl::ManageStream::yes) {
    TESSERA_CHECK_CUDA(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
  }
  ~Impl() { cudaEventDestroy(mark); }
  void follow_default() {
    TESSERA_CHECK_CUDA(cudaEventRecord(mark, Kokkos::DefaultExecutionSpace().cuda_stream()));
    TESSERA_CHECK_CUDA(cudaStreamWaitEvent(stream, mark, 0));
  }
};
#else
struct SideQueue::Impl {
  explicit Impl(bool) {}
  Kokkos::DefaultExecutionSpace space;
  void follow_default() {}
};
#endif

SideQueue::SideQueue(bool urgent) : impl_(std::make_unique<Impl>(urgent)) {}
SideQueue::~SideQueue() = default;
const Kokkos::DefaultExecutionSpace& SideQueue::space() const noexcept { return impl_->space; }
void SideQueue::follow_default() { impl_->follow_default(); }

}  // namespace tessera::kernels
