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
  static cudaStream_t make_stream() {
    cudaStream_t s = nullptr;
    TESSERA_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  Impl() : stream(make_stream()), space(stream, Kokkos::Impl::ManageStream::yes) {
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
  Kokkos::DefaultExecutionSpace space;
  void follow_default() {}
};
#endif

SideQueue::SideQueue() : impl_(std::make_unique<Impl>()) {}
SideQueue::~SideQueue() = default;
const Kokkos::DefaultExecutionSpace& SideQueue::space() const noexcept { return impl_->space; }
void SideQueue::follow_default() { impl_->follow_default(); }

}  // namespace tessera::kernels
