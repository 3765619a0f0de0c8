// The NCCL backend on device memory. Runs where a CUDA device is usable and skips with the
// reason otherwise. One GPU can hold only one NCCL rank, so ctest runs it on 1 rank; on a
// multi-GPU node `mpiexec -n <gpus> nccl_device` checks the cross-rank math too.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <tessera/tessera.hpp>

#include "comm/backend.hpp"
#include "test_support.hpp"

namespace {
using namespace tessera;
using comm::ReduceOp;

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw Error("cudaMalloc failed");
  }
  DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { upload(v); }
  ~DeviceArray() { cudaFree(ptr_); }
  // From pageable memory cudaMemcpy may return once the data is staged, before it lands, and
  // NCCL's streams are not ordered after the stream it runs on: without the wait, an op could
  // write its result before a NaN-fill still landing overwrote it.
  void upload(const std::vector<T>& v) {
    cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    cudaMemcpy(v.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  comm::Buffer buffer() { return comm::Buffer(ptr_, n_, dtype_of<T>::value, MemoryKind::Device); }

 private:
  T* ptr_ = nullptr;
  std::size_t n_;
};

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!comm::detail::nccl_usable()) {
      int devices = 0;
      const cudaError_t rc = cudaGetDeviceCount(&devices);
      GTEST_SKIP() << "SKIPPED: NCCL tests need a usable CUDA device; this machine has none ("
                   << (rc == cudaSuccess ? "0 devices" : cudaGetErrorString(rc)) << ")";
    }
    static std::unique_ptr<comm::Communicator> c =
        comm::Communicator::create(comm::Backend::Nccl, test::test_options("nccl"));
    comm_ = c.get();
  }
  comm::Communicator* comm_ = nullptr;
};

double in(int r, std::size_t i) { return static_cast<double>((static_cast<std::size_t>(r) + i) % 5 + 1); }

TEST_F(Nccl, AllReduceSumAvgMaxInFloatBf16AndInt64) {
  auto& c = *comm_;
  const std::size_t n = 1031;
  const int p = c.size();
  auto sum = [&](std::size_t i) {
    double s = 0;
    for (int r = 0; r < p; ++r) s += in(r, i);
    return s;
  };
  std::vector<float> f(n);
  std::vector<bfloat16> b(n);
  std::vector<std::int64_t> l(n);
  for (std::size_t i = 0; i < n; ++i) {
    f[i] = static_cast<float>(in(c.rank(), i));
    b[i] = bfloat16(static_cast<float>(in(c.rank(), i)));
    l[i] = static_cast<std::int64_t>(in(c.rank(), i));
  }
  // Out of place, into outputs that hold what no op could give (NaN, a negative count): at
  // one rank, in place, an op that did nothing would leave the right answer behind.
  DeviceArray<float> df(f), dout(std::vector<float>(n, std::nanf("")));
  DeviceArray<bfloat16> db(b), dbo(std::vector<bfloat16>(n, bfloat16(std::nanf(""))));
  DeviceArray<std::int64_t> dl(l), dlo(std::vector<std::int64_t>(n, -12345));
  c.all_reduce(df.buffer(), dout.buffer(), ReduceOp::Sum);
  c.all_reduce(db.buffer(), dbo.buffer(), ReduceOp::Avg);
  c.all_reduce(dl.buffer(), dlo.buffer(), ReduceOp::Max);
  auto fo = dout.download();
  auto bo = dbo.download();
  auto lo = dlo.download();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(fo[i], static_cast<float>(sum(i)));
    ASSERT_NEAR(static_cast<float>(bo[i]), sum(i) / p, sum(i) / p / 128);
    double mx = 0;
    for (int r = 0; r < p; ++r) mx = std::max(mx, in(r, i));
    ASSERT_EQ(lo[i], static_cast<std::int64_t>(mx));
  }
}

TEST_F(Nccl, GatherScatterAllGatherReduceScatterAllToAllBroadcast) {
  auto& c = *comm_;
  const auto p = static_cast<std::size_t>(c.size());
  const auto me = static_cast<std::size_t>(c.rank());
  const std::size_t n = 77;
  std::vector<double> mine(n), blocks(n * p);
  for (std::size_t i = 0; i < n; ++i) mine[i] = in(c.rank(), i);
  for (std::size_t i = 0; i < n * p; ++i) blocks[i] = in(c.rank(), i);
  DeviceArray<double> dm(mine), dall(n * p), dblocks(blocks), dout(n), dx(n * p);

  c.all_gather(dm.buffer(), dall.buffer());
  auto g = dall.download();
  for (std::size_t r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(g[r * n + i], in(static_cast<int>(r), i));

  c.reduce_scatter(dblocks.buffer(), dout.buffer());
  auto rs = dout.download();
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (std::size_t r = 0; r < p; ++r) s += in(static_cast<int>(r), me * n + i);
    ASSERT_EQ(rs[i], s);
  }

  c.all_to_all(dblocks.buffer(), dx.buffer());
  auto a = dx.download();
  for (std::size_t r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[r * n + i], in(static_cast<int>(r), me * n + i));

  // The outputs are refilled with NaN first: they still hold the ops' results above, which
  // at one rank are these ops' results too.
  dall.upload(std::vector<double>(n * p, std::nan("")));
  c.gather(dm.buffer(), dall.buffer(), 0);
  if (me == 0) {
    auto ga = dall.download();
    for (std::size_t r = 0; r < p; ++r)
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(ga[r * n + i], in(static_cast<int>(r), i));
  }
  dout.upload(std::vector<double>(n, std::nan("")));
  c.scatter(dblocks.buffer(), dout.buffer(), 0);
  auto sc = dout.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sc[i], in(0, me * n + i));

  // In place: only the other ranks' buffers change (they hold their own values before).
  c.broadcast(dm.buffer(), 0);
  auto bc = dm.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bc[i], in(0, i));
  c.barrier();
}

TEST_F(Nccl, AsyncOpsInFlightTogether) {
  auto& c = *comm_;
  // Two ops in flight on one buffer (in order: the second reduces the first's result) and a
  // third out of place into NaN, so that one that did nothing fails at one rank too.
  std::vector<float> v(64, static_cast<float>(c.rank() + 1));
  DeviceArray<float> d(v), e(v), out_e(std::vector<float>(64, std::nanf("")));
  auto w1 = c.all_reduce_async(d.buffer());
  auto w2 = c.all_reduce_async(d.buffer());
  auto w3 = c.all_reduce_async(e.buffer(), out_e.buffer(), ReduceOp::Max);
  w3.wait();
  w2.wait();
  w1.wait();
  const float p = static_cast<float>(c.size()), sum = p * (p + 1) / 2;
  auto out = d.download();
  for (float x : out) ASSERT_EQ(x, sum * p);  // the sum over ranks, summed again
  auto mx = out_e.download();
  for (float x : mx) ASSERT_EQ(x, p);
}

// Host buffers (a loss, a checksum) go through NCCL too, staged through device memory.
TEST_F(Nccl, HostBuffersAreStagedThroughDeviceMemory) {
  auto& c = *comm_;
  std::vector<double> v(33);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = in(c.rank(), i);
  std::vector<double> out(v.size());
  c.all_reduce({v.data(), v.size()}, {out.data(), out.size()}, ReduceOp::Sum);
  for (std::size_t i = 0; i < v.size(); ++i) {
    double s = 0;
    for (int r = 0; r < c.size(); ++r) s += in(r, i);
    ASSERT_EQ(out[i], s);
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.size()));
  std::int64_t mine = c.rank() + 10;
  c.all_gather({&mine, 1}, {all.data(), all.size()});
  for (int r = 0; r < c.size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], r + 10);
}
}  // namespace
