#pragma once
// Shared helpers for Tessera's tests.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <tessera/comm/communicator.hpp>
#include <tessera/core/memory.hpp>
#include <tessera/nn/parameter.hpp>
#include <tessera/parallel/zero.hpp>
#include <tessera/train/trainer.hpp>

namespace tessera::test {

/// Caps this process's address space at what it uses now and `room` bytes more, until the
/// cap ends: an allocation larger than that, and than glibc's largest mmap threshold (32 MB,
/// above which every allocation takes new address space), then fails, as on a node whose
/// memory is full.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(std::size_t room) {
    if (getrlimit(RLIMIT_AS, &before_) != 0) throw std::runtime_error("getrlimit failed");
    std::ifstream status("/proc/self/status");
    std::string key;
    long long kib = 0;
    while (status >> key && key != "VmSize:") status.ignore(1 << 20, '\n');
    if (!(status >> kib)) throw std::runtime_error("no VmSize in /proc/self/status");
    rlimit capped = before_;
    capped.rlim_cur = static_cast<rlim_t>((static_cast<std::size_t>(kib) << 10) + room);
    if (setrlimit(RLIMIT_AS, &capped) != 0) throw std::runtime_error("setrlimit failed");
  }
  ~AddressSpaceCap() { setrlimit(RLIMIT_AS, &before_); }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit before_{};
};

/// The small synthetic run the parity tests share: 10 steps of a global batch of 24 from 480
/// samples of a 2-layer teacher; each suite picks the model's shape and the seed.
inline train::TrainConfig small_run(std::size_t layers, std::size_t dim, std::uint64_t seed) {
  train::TrainConfig c;
  c.layers = layers;
  c.dim = dim;
  c.global_batch = 24;
  c.steps = 10;
  c.synthetic_samples = 480;
  c.teacher_layers = 2;
  c.seed = seed;
  return c;
}

/// The backend under test, from TESSERA_TEST_BACKEND (set by ctest); mpi by default.
inline comm::Backend backend_under_test() {
  const char* b = std::getenv("TESSERA_TEST_BACKEND");
  if (b == nullptr || std::string(b) == "none" || *b == '\0') return comm::Backend::Mpi;
  return comm::parse_backend(b);
}

/// Options with a short timeout, so a test that hangs fails in seconds.
inline comm::CommOptions test_options(const std::string& name = "world") {
  comm::CommOptions o;
  o.timeout = std::chrono::seconds(60);
  o.name = name;
  return o;
}

/// Holder of the program-wide communicator (released by the test main before MPI ends).
inline std::unique_ptr<comm::Communicator>& world_holder() {
  static std::unique_ptr<comm::Communicator> w;
  return w;
}

/// One communicator over all ranks for the whole test program.
inline comm::Communicator& world() {
  auto& w = world_holder();
  if (!w) w = comm::Communicator::create(backend_under_test(), test_options());
  return *w;
}

/// A host copy of a view's contents, wherever the view lives (results are read through it,
/// never from the view itself, which may be in GPU memory).
template <class View>
auto host_copy(const View& v) {
  // Kokkos copies between memory spaces only contiguous spans: a strided view (a column
  // block) would work on the host and throw on a GPU, so it fails here on both.
  if (!v.span_is_contiguous())
    throw std::logic_error("host_copy of the strided view '" + v.label() +
                           "': copy it into a contiguous view in its own memory space first");
  auto h = Kokkos::create_mirror(Kokkos::HostSpace(), v);
  Kokkos::deep_copy(h, v);
  return h;
}

/// A 1-D view in the default memory space holding `values`.
template <class T>
View1D<T> device_array(const std::vector<T>& values, const std::string& label = "test") {
  View1D<T> d(label, values.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < values.size(); ++i) h(i) = values[i];
  Kokkos::deep_copy(d, h);
  return d;
}

/// A rows x cols matrix in the default memory space holding `values` (row-major).
inline View2D<float> device_matrix(std::size_t rows, std::size_t cols, const std::vector<float>& values) {
  View2D<float> d("test", rows, cols);
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) h(i, j) = values.at(i * cols + j);
  Kokkos::deep_copy(d, h);
  return d;
}

/// True when the default memory space is a GPU's (a CUDA build).
constexpr bool device_build() { return memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device; }

/// Asserts that statement throws ExceptionType whose what() contains `needle`.
#define EXPECT_THROW_WITH(statement, ExceptionType, needle)                                            \
  do {                                                                                                 \
    try {                                                                                              \
      statement;                                                                                       \
      ADD_FAILURE() << "expected " #ExceptionType " containing \"" << (needle) << "\"";                \
    } catch (const ExceptionType& e) {                                                                 \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message was: " << e.what(); \
    }                                                                                                  \
  } while (0)

/// This rank alone, as a communicator of one (the single-process reference of parity tests).
inline comm::Communicator& self() {
  static std::unique_ptr<comm::Communicator> s = world().split(world().rank(), 0, "self");
  return *s;
}

/// Parameters of a parallel run against the reference's: max |a - b| <= rel * max |a|.
inline void expect_same_parameters(const std::vector<float>& ref, const std::vector<float>& got, double rel,
                                   const std::string& what = "") {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double max_ref = 0, max_diff = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ref[i]) - got[i]));
  }
  EXPECT_LE(max_diff, rel * max_ref) << what << (what.empty() ? "" : ": ") << "max |a - b| = " << max_diff
                                     << ", max |a| = " << max_ref;
}

/// A run that is allowed to differ from the reference by rounding (e.g. bf16 gradients on
/// the wire): max |got - ref| <= rel * max |ref - init|, against how far training moved the
/// parameters from `init` (a tolerance relative to the parameters themselves can exceed all
/// of training, so a run that skipped the reduction would pass).
inline void expect_close_to_reference(const std::vector<float>& init, const std::vector<float>& ref,
                                      const std::vector<float>& got, double rel, const std::string& what = "") {
  ASSERT_EQ(ref.size(), got.size()) << what;
  ASSERT_EQ(ref.size(), init.size()) << what;
  double moved = 0, max_diff = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    moved = std::max(moved, std::fabs(static_cast<double>(ref[i]) - init[i]));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ref[i]) - got[i]));
  }
  ASSERT_GT(moved, 0.0) << what << ": training did not move the parameters, so the comparison proves nothing";
  EXPECT_LE(max_diff, rel * moved) << what << (what.empty() ? "" : ": ") << "max |got - ref| = " << max_diff
                                   << ", training moved the parameters by up to " << moved;
}

/// The block `p` holds, cut out of the whole tensor's values `whole` (row-major, p.shape).
inline std::vector<float> block_of(const nn::Parameter& p, const std::vector<float>& whole) {
  if (p.shard.parts == 1) return whole;
  const auto held = p.held_shape();
  std::vector<float> out;
  if (p.shape.size() == 1) {
    const auto n = static_cast<std::size_t>(held[0]), at = n * static_cast<std::size_t>(p.shard.index);
    return std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(at),
                              whole.begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  const auto rows = static_cast<std::size_t>(held[0]), cols = static_cast<std::size_t>(held[1]);
  const auto all_cols = static_cast<std::size_t>(p.shape[1]);
  const std::size_t r0 = p.shard.axis == 0 ? rows * static_cast<std::size_t>(p.shard.index) : 0;
  const std::size_t c0 = p.shard.axis == 1 ? cols * static_cast<std::size_t>(p.shard.index) : 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out.push_back(whole[(r0 + r) * all_cols + c0 + c]);
  return out;
}

/// A view's contents as a host vector.
inline std::vector<float> host(const View1D<float>& v) {
  const auto h = host_copy(v);
  return std::vector<float>(h.data(), h.data() + h.size());
}

/// Each parameter's block as `run` holds it (gathered over its data-parallel ranks where ZeRO
/// shards it) against the block of the same parameter, whole, in `reference`.
inline void expect_blocks_match(train::Trainer& reference, train::Trainer& run, const std::string& what) {
  const auto local = parallel::gather_values(run.parameters(), run.data_parallel());
  ASSERT_FALSE(run.parameters().parameters().empty()) << what;
  for (auto& p : run.parameters().parameters()) {
    const std::vector<float> got(local.begin() + static_cast<std::ptrdiff_t>(p.offset),
                                 local.begin() + static_cast<std::ptrdiff_t>(p.offset + p.numel));
    expect_same_parameters(block_of(p, host(reference.parameters().find(p.name).value)), got, 1e-5,
                           what + ", " + p.name);
  }
}

}  // namespace tessera::test
