// The NCCL backend on device memory. Runs where a CUDA device is usable and skips with the
// reason otherwise. One GPU can hold only one NCCL rank, so ctest runs it on 1 rank; on a
// multi-GPU node `mpiexec -n <gpus> nccl_device` checks the cross-rank math too.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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
  void upload(const std::vector<T>& v) { cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); }
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
  DeviceArray<float> df(f), dout(n);
  DeviceArray<bfloat16> db(b);
  DeviceArray<std::int64_t> dl(l);
  c.all_reduce(df.buffer(), dout.buffer(), ReduceOp::Sum);
  c.all_reduce(db.buffer(), ReduceOp::Avg);
  c.all_reduce(dl.buffer(), ReduceOp::Max);
  auto fo = dout.download();
  auto bo = db.download();
  auto lo = dl.download();
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

  c.gather(dm.buffer(), dall.buffer(), 0);
  c.scatter(dblocks.buffer(), dout.buffer(), 0);
  auto sc = dout.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sc[i], in(0, me * n + i));

  c.broadcast(dm.buffer(), 0);
  auto bc = dm.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bc[i], in(0, i));
  c.barrier();
}

TEST_F(Nccl, AsyncOpsInFlightTogether) {
  auto& c = *comm_;
  std::vector<float> v(64, 1.0f);
  DeviceArray<float> d(v);
  auto w1 = c.all_reduce_async(d.buffer());
  auto w2 = c.all_reduce_async(d.buffer());
  w2.wait();
  w1.wait();
  auto out = d.download();
  EXPECT_EQ(out[0], static_cast<float>(c.size() * c.size()));
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
