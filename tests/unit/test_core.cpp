// Single-process tests of the core layer, run as a plain process (no mpiexec): dtypes and
// their conversions, parsing, error messages, options from the environment.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

#include "comm/rank_list.hpp"
#include "core/device_copy.hpp"
#include "core/kokkos_start.hpp"
#include "test_support.hpp"

namespace {
using namespace tessera;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Float16, KnownIeeeEncodings) {
  EXPECT_EQ(float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float16(-2.0f).bits, 0xc000);
  EXPECT_EQ(float16(65504.0f).bits, 0x7bff);               // largest finite half
  EXPECT_EQ(float16(1e5f).bits, 0x7c00);                   // overflows to +inf
  EXPECT_EQ(float16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float16(std::ldexp(1.0f, -14)).bits, 0x0400);  // smallest normal
  EXPECT_EQ(float16(0.0f).bits, 0x0000);
  EXPECT_EQ(float16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::isnan(static_cast<float>(float16(std::nanf("")))));
  EXPECT_EQ(static_cast<float>(float16(0.1f)), 0.0999755859375f);  // 0x2e66
}

TEST(BFloat16, KnownEncodings) {
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(bfloat16(from_bits(0x3f808000u)).bits, 0x3f80);  // tie, rounds to even
  EXPECT_EQ(bfloat16(from_bits(0x3f818000u)).bits, 0x3f82);  // tie, rounds to even (up)
  EXPECT_EQ(bfloat16(from_bits(0x3f808001u)).bits, 0x3f81);  // above the tie
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(std::nanf("")))));
}

TEST(Float16, EveryHalfSurvivesARoundTrip) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    float16 h;
    h.bits = static_cast<std::uint16_t>(b);
    const float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float16(f).bits, b) << "half bits " << b;
    bfloat16 g;
    g.bits = static_cast<std::uint16_t>(b);
    const float gf = static_cast<float>(g);
    if (!std::isnan(gf)) {
      ASSERT_EQ(bfloat16(gf).bits, b) << "bfloat16 bits " << b;
    }
  }
}

// Rounding is to the nearest representable value: no neighbour of the result is closer.
TEST(Float16, ConversionRoundsToNearest) {
  std::mt19937 gen(7);
  // Up to just below 65504, the largest finite half; beyond it lies the overflow to inf.
  std::uniform_real_distribution<float> exponent(-26.0f, 15.99f);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(exponent(gen)) * (i % 2 ? 1.0f : -1.0f);
    const float16 h(x);
    const double err = std::fabs(static_cast<double>(static_cast<float>(h)) - x);
    for (int step : {-1, 1}) {
      float16 n;
      n.bits = static_cast<std::uint16_t>(h.bits + step);
      const float nf = static_cast<float>(n);
      if (std::isnan(nf) || std::isinf(nf) || (n.bits & 0x7fff) == 0x7fff) continue;
      if (((h.bits ^ n.bits) & 0x8000) != 0) continue;  // crossed zero
      ASSERT_LE(err, std::fabs(static_cast<double>(nf) - x)) << "x = " << x;
    }
    const bfloat16 b(x);
    const double berr = std::fabs(static_cast<double>(static_cast<float>(b)) - x);
    ASSERT_LE(berr, std::fabs(x) * std::ldexp(1.0, -8)) << "x = " << x;
  }
}

TEST(Parsing, NamesAndBadNames) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BFloat16);
  EXPECT_EQ(parse_dtype("FLOAT32"), DType::Float32);
  EXPECT_THROW_WITH(parse_dtype("float8"), ConfigError, "unknown dtype 'float8'; use one of");
  EXPECT_EQ(comm::parse_backend("Gloo"), comm::Backend::Gloo);
  EXPECT_THROW_WITH(comm::parse_backend("ucx"), ConfigError,
                    "unknown communication backend 'ucx'; use auto, mpi, gloo or nccl");
  EXPECT_EQ(comm::parse_reduce_op("avg"), comm::ReduceOp::Avg);
  EXPECT_THROW_WITH(comm::parse_reduce_op("xor"), ConfigError, "unknown reduce op 'xor'");
  EXPECT_EQ(dtype_size(DType::Float16), 2u);
  EXPECT_STREQ(dtype_name(DType::Int64), "int64");
}

TEST(Options, FromEnvironmentAndBadValues) {
  setenv("TESSERA_COMM_TIMEOUT", "2.5", 1);
  setenv("TESSERA_COMM_CHECK", "1", 1);
  auto o = comm::CommOptions::from_env();
  EXPECT_EQ(o.timeout.count(), 2500);
  EXPECT_TRUE(o.check);
  setenv("TESSERA_COMM_TIMEOUT", "ten", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError,
                    "TESSERA_COMM_TIMEOUT='ten' is not a number of seconds");
  setenv("TESSERA_COMM_TIMEOUT", "-1", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError, "TESSERA_COMM_TIMEOUT='-1'");
  // Kept to the millisecond: a finer limit is refused (0.0001 was kept as 1 ms in silence).
  setenv("TESSERA_COMM_TIMEOUT", "0.0001", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError,
                    "TESSERA_COMM_TIMEOUT='0.0001' is less than a millisecond, finer than a timeout is kept; give "
                    "at least 0.001, or 0 to wait forever");
  setenv("TESSERA_COMM_TIMEOUT", "0.001", 1);
  EXPECT_EQ(comm::CommOptions::from_env().timeout.count(), 1) << "a millisecond is the finest limit";
  setenv("TESSERA_COMM_TIMEOUT", "0.0016", 1);
  EXPECT_EQ(comm::CommOptions::from_env().timeout.count(), 2) << "to the nearest millisecond";
  EXPECT_THROW_WITH(comm::CommOptions::timeout_from_seconds(0.0004, "-T 0.0004"), ConfigError,
                    "-T 0.0004 is less than a millisecond");
  EXPECT_EQ(comm::CommOptions::timeout_from_seconds(0).count(), 0) << "0: no limit";
  setenv("TESSERA_COMM_TIMEOUT", "1e12", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError, "is more than a year");
  setenv("TESSERA_COMM_TIMEOUT", "0", 1);
  setenv("TESSERA_COMM_CHECK", "maybe", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError,
                    "TESSERA_COMM_CHECK='maybe' must be 0 or 1 (or off/on, false/true, no/yes)");
  unsetenv("TESSERA_COMM_TIMEOUT");
  unsetenv("TESSERA_COMM_CHECK");
  o = comm::CommOptions::from_env();
  EXPECT_EQ(o.timeout, std::chrono::minutes(10));
  EXPECT_FALSE(o.check);
}

// A communicator's set-up may take longer than an op (NCCL's on many GPUs takes minutes): by
// default twice the timeout, at least 5 minutes, none where the timeout is none; or its own.
TEST(Options, SetUpLimit) {
  comm::CommOptions o;
  EXPECT_EQ(o.set_up_limit(), std::chrono::minutes(20)) << "twice the default 10 minutes";
  o.timeout = std::chrono::seconds(3);
  EXPECT_EQ(o.set_up_limit(), std::chrono::minutes(5)) << "a short timeout must not cut a slow set-up short";
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(o.set_up_limit().count(), 0) << "no timeout: no limit";
  o.set_up_timeout = std::chrono::seconds(4);
  EXPECT_EQ(o.set_up_limit(), std::chrono::seconds(4));
  setenv("TESSERA_COMM_SETUP_TIMEOUT", "90", 1);
  EXPECT_EQ(comm::CommOptions::from_env().set_up_limit(), std::chrono::seconds(90));
  setenv("TESSERA_COMM_SETUP_TIMEOUT", "0", 1);
  EXPECT_EQ(comm::CommOptions::from_env().set_up_limit(), std::chrono::minutes(20)) << "0: the default";
  setenv("TESSERA_COMM_SETUP_TIMEOUT", "soon", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError,
                    "TESSERA_COMM_SETUP_TIMEOUT='soon' is not a number of seconds >= 0 (0 takes twice "
                    "TESSERA_COMM_TIMEOUT, at least 5 minutes)");
  setenv("TESSERA_COMM_SETUP_TIMEOUT", "1e12", 1);
  EXPECT_THROW_WITH(comm::CommOptions::from_env(), ConfigError,
                    "TESSERA_COMM_SETUP_TIMEOUT='1e12' is more than a year; TESSERA_COMM_TIMEOUT=0 waits forever");
  unsetenv("TESSERA_COMM_SETUP_TIMEOUT");
}

TEST(Errors, CarryRankFileAndLine) {
  try {
    TESSERA_THROW(CommError, "MPI_Allreduce failed: MPI_ERR_TRUNCATE");
    ADD_FAILURE() << "TESSERA_THROW did not throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.message(), "MPI_Allreduce failed: MPI_ERR_TRUNCATE");
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(m.find("[rank 0, tests/unit/test_core.cpp:"), std::string::npos) << m;
  }
}

TEST(Errors, NameFilesRelativeToTheSourceTreeWhereverItIs) {
  EXPECT_STREQ(detail::short_path(__FILE__), "tests/unit/test_core.cpp");
  // A checkout under a folder named src, or an installed header: the last top-level name counts.
  EXPECT_STREQ(detail::short_path("/home/me/src/tessera/src/comm/communicator.cpp"), "src/comm/communicator.cpp");
  EXPECT_STREQ(detail::short_path("/opt/src/include/tessera/core/error.hpp"), "include/tessera/core/error.hpp");
  EXPECT_STREQ(detail::short_path("main.cpp"), "main.cpp");
}

TEST(Session, OnlyOnePerProcessAndItIsAPlainProcessHere) {
  EXPECT_TRUE(Session::active());
  EXPECT_EQ(Session::current().size(), 1);
  EXPECT_EQ(Session::current().rank(), 0);
  EXPECT_THROW_WITH(Session(), Error, "a tessera::Session is already alive");
  EXPECT_TRUE(Session::active());
}

// A process alone on its node may use every core it is bound to (DDP's overlap and the BLAS
// threads follow from it).
TEST(Session, APlainProcessHasEveryCoreItIsBoundTo) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(Session::current().local_size(), 1);
  EXPECT_EQ(Session::current().cores(), std::min(CPU_COUNT(&set), static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))));
}

// Kokkos' own host threads (an OpenMP or Threads build) follow the rank's cores, as the
// BLAS's do, unless the user chose a count.
TEST(Session, KokkosThreadsFlagUnlessTheUserChose) {
  struct Unset {  // the variables as they were, put back afterwards
    std::vector<std::pair<std::string, std::string>> saved;
    Unset() {
      for (const char* var : {"OMP_NUM_THREADS", "KOKKOS_NUM_THREADS"}) {
        if (const char* v = std::getenv(var)) saved.emplace_back(var, v);
        unsetenv(var);
      }
    }
    ~Unset() {
      for (const char* var : {"OMP_NUM_THREADS", "KOKKOS_NUM_THREADS"}) unsetenv(var);
      for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
    }
  } unset;
  const bool started_without_choice = unset.saved.empty();
#if KOKKOS_VERSION >= 30700
  const std::string flag = "--kokkos-num-threads=";
#else
  const std::string flag = "--kokkos-threads=";
#endif
  const char* plain[] = {"app", "--other"};
  EXPECT_EQ(detail::kokkos_threads_flag(2, plain, 3), flag + "3");
  EXPECT_EQ(detail::kokkos_threads_flag(2, plain, 0), flag + "1");
  const char* num_threads[] = {"app", "--kokkos-num-threads=5"};
  EXPECT_EQ(detail::kokkos_threads_flag(2, num_threads, 3), "");
  const char* threads[] = {"app", "--kokkos-threads", "2"};
  EXPECT_EQ(detail::kokkos_threads_flag(3, threads, 3), "");
  for (const char* var : {"OMP_NUM_THREADS", "KOKKOS_NUM_THREADS"}) {
    setenv(var, "4", 1);
    EXPECT_EQ(detail::kokkos_threads_flag(2, plain, 3), "") << var;
    unsetenv(var);
  }
  (void)started_without_choice;
}

// Registered on its own (ctest: unit_core_kokkos_host_threads), so that where Kokkos runs host
// kernels on the calling thread (Debian's Kokkos 3.4, a Serial+CUDA Kokkos) ctest reports it
// as skipped rather than as passed.
TEST(Session, KokkosGetsTheRanksCoresUnlessTheUserChoseThem) {
  const bool started_without_choice =
      std::getenv("OMP_NUM_THREADS") == nullptr && std::getenv("KOKKOS_NUM_THREADS") == nullptr;
  if (!detail::kokkos_host_is_threaded()) GTEST_SKIP() << "this Kokkos runs host kernels on the calling thread";
  if (!started_without_choice) GTEST_SKIP() << "OMP_NUM_THREADS or KOKKOS_NUM_THREADS was set for this process";
  const int cores = Session::current().cores();
  const int want = detail::kokkos_host_threads(cores, host_threads().threads, detail::blas_runs_own_threads());
  EXPECT_EQ(Kokkos::DefaultHostExecutionSpace().concurrency(), want);
  EXPECT_EQ(host_threads().kokkos_threads, want);
  EXPECT_EQ(!host_threads().kokkos_reason.empty(), want < host_threads().threads) << host_threads().kokkos_reason;
  EXPECT_EQ(detail::kokkos_threads_left_to_blas(), want < host_threads().threads);
}

TEST(Session, KokkosHostThreadsLeaveTheCoresToABlasPoolOfItsOwn) {
  // The BLAS in a pool of its own (OpenBLAS with pthreads) with several threads: Kokkos one.
  EXPECT_EQ(detail::kokkos_host_threads(8, 8, true), 1);
  EXPECT_EQ(detail::kokkos_host_threads(2, 2, true), 1);
  // Otherwise the rank's cores: a BLAS with one thread, or one on OpenMP's threads, or none.
  EXPECT_EQ(detail::kokkos_host_threads(8, 1, true), 8);
  EXPECT_EQ(detail::kokkos_host_threads(8, 8, false), 8);
  EXPECT_EQ(detail::kokkos_host_threads(0, 4, false), 1);
}

TEST(Session, SingleRankCommunicatorWorksWithoutMpiexec) {
  auto c = comm::Communicator::create(comm::Backend::Mpi);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> x(3, 2.0f), y(3);
  c->all_reduce({x.data(), 3}, {y.data(), 3}, comm::ReduceOp::Avg);
  EXPECT_EQ(y[2], 2.0f);
}

TEST(BuildInfo, ReportsTheLibrariesInUse) {
  const auto info = build_info();
  EXPECT_EQ(info.tessera_version, TESSERA_VERSION_STRING);
  EXPECT_FALSE(info.mpi_library.empty());
  EXPECT_EQ(info.kokkos_version.substr(0, 1), std::to_string(KOKKOS_VERSION / 10000));
  EXPECT_EQ(info.hdf5, TESSERA_HAVE_HDF5 != 0);
  if (info.hdf5) {
    EXPECT_NE(info.hdf5_version.find('.'), std::string::npos);
  }
  EXPECT_FALSE(info.kokkos_space.empty());
}

TEST(BuildInfo, DescribesItInOneLine) {
  const auto info = build_info();
  const std::string line = describe(info);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("Tessera " + std::string(TESSERA_VERSION_STRING) + " | Kokkos " + info.kokkos_version + " (" +
                           info.kokkos_space + ") | ",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find(info.mpi_library), std::string::npos) << line;
  EXPECT_EQ(line.find(", gloo") != std::string::npos, TESSERA_HAVE_GLOO != 0) << line;
  EXPECT_EQ(line.find(", nccl") != std::string::npos, TESSERA_HAVE_NCCL != 0) << line;
  EXPECT_NE(line.find(info.hdf5 ? "HDF5 " + info.hdf5_version : "HDF5 off"), std::string::npos) << line;
}
}  // namespace

namespace {
using namespace tessera;

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// Sends and receives that stage their buffers borrow them from a pool (src/comm/communicator.cpp):
// a buffer comes back when its lease ends and is lent again, the smallest that fits first, so
// a steady stream of transfers allocates once; leases held at once get buffers of their own;
// a buffer too small is grown; no more than `keep` idle buffers are kept.
TEST(StagingPool, LendsEachBufferToOneTransferAtATimeAndReusesIt) {
  detail::StagingPool pool(2);
  void* first = nullptr;
  {
    auto a = pool.take(MemoryKind::Host, 1000);
    ASSERT_NE(a->data(), nullptr);
    EXPECT_GE(a->capacity(), 1000u);
    std::memset(a->data(), 1, 1000);  // the whole of it is usable
    first = a->data();
    EXPECT_EQ(pool.idle(MemoryKind::Host), 0u);
  }
  EXPECT_EQ(pool.idle(MemoryKind::Host), 1u);
  void *other_data = nullptr, *big_data = nullptr;
  {
    auto again = pool.take(MemoryKind::Host, 600);  // fits: the same buffer, not a new one
    EXPECT_EQ(again->data(), first);
    auto other = pool.take(MemoryKind::Host, 600);  // the first is lent: a second buffer
    EXPECT_NE(other->data(), first);
    auto big = pool.take(MemoryKind::Host, 5000);
    EXPECT_GE(big->capacity(), 5000u);
    other_data = other->data();
    big_data = big->data();
    EXPECT_EQ(pool.idle(MemoryKind::Host), 0u);
  }  // big and other come back first and are kept; `again` finds the pool full and is freed
  EXPECT_EQ(pool.idle(MemoryKind::Host), 2u);
  {
    auto small = pool.take(MemoryKind::Host, 500);  // both fit: the smaller (600 bytes)
    EXPECT_EQ(small->data(), other_data);
    auto middle = pool.take(MemoryKind::Host, 700);  // only the 5000-byte one is left
    EXPECT_EQ(middle->data(), big_data);
  }
  {
    auto huge = pool.take(MemoryKind::Host, 20000);  // none fits: the largest is grown, no third made
    EXPECT_GE(huge->capacity(), 20000u);
    std::memset(huge->data(), 2, 20000);
    EXPECT_EQ(pool.idle(MemoryKind::Host), 1u);
    auto left = pool.take(MemoryKind::Host, 500);  // the 600-byte one is still there, as it was
    EXPECT_EQ(left->data(), other_data);
    EXPECT_EQ(left->capacity(), 600u);
  }
  EXPECT_EQ(pool.idle(MemoryKind::Host), 2u);
  EXPECT_EQ(pool.idle(MemoryKind::Device), 0u);
  // A lease with no pool owns its buffer outright.
  detail::StagingPool::Lease loose(new detail::Staging(MemoryKind::Host, false), {});
  EXPECT_NE(loose->reserve(64), nullptr);
}

TEST(UnfinishedFile, RemovedOnlyWhileTracked) {
  const std::string tracked = "unfinished_a.tmp", released = "unfinished_b.tmp", never = "unfinished_c.tmp";
  for (const auto& p : {tracked, released, never}) std::ofstream(p) << "partial";
  {
    const UnfinishedFile keep(released);  // its owner renamed it into place: no longer tracked
  }
  const UnfinishedFile a(tracked);
  remove_unfinished_files();
  EXPECT_FALSE(exists(tracked));
  EXPECT_TRUE(exists(released));
  EXPECT_TRUE(exists(never));
  // Tracked by its absolute path: a later change of directory does not matter.
  std::ofstream(tracked) << "partial";
  const auto here = std::filesystem::current_path();
  std::filesystem::current_path(here.parent_path());
  remove_unfinished_files();
  std::filesystem::current_path(here);
  EXPECT_FALSE(exists(tracked));
  std::remove(released.c_str());
  std::remove(never.c_str());
}

// The copy that replaces a user's file has its owner, group and mode before a byte is
// written: a shared project file stays the project's, and a private one is never readable
// by others on its way. Only root may give a file away, so elsewhere this is skipped.
TEST(Files, ACopyTakesItsTargetsOwnerGroupAndMode) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a file to another owner needs root";
  const std::string target = "owned_target.dat", copy = "owned_target.dat.tmp";
  std::ofstream(target) << "the user's data";
  // Another owner and group, and the set-group-id bit, which chown clears (with group
  // execute set) unless the mode is given again after it.
  ASSERT_EQ(::chown(target.c_str(), 4321, 4322), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(target.c_str(), 02750), 0) << std::strerror(errno);
  const int fd = open_copy(copy, target);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  ::close(fd);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4322u);
  EXPECT_EQ(st.st_mode & 07777, 02750u);
  // A new file (no target) is this process's own, with the usual mode.
  std::remove(target.c_str());
  std::remove(copy.c_str());
  const int fresh = open_copy(copy, target);
  ASSERT_EQ(::fstat(fresh, &st), 0);
  ::close(fresh);
  EXPECT_EQ(st.st_uid, 0u);
  std::remove(copy.c_str());
}

TEST(UnfinishedFile, ManyAtOnceAreTrackedUpToTheTable) {
  std::vector<std::unique_ptr<UnfinishedFile>> files;
  for (int i = 0; i < 70; ++i) {
    const std::string p = "unfinished_many_" + std::to_string(i) + ".tmp";
    std::ofstream(p) << i;
    files.push_back(std::make_unique<UnfinishedFile>(p));
  }
  remove_unfinished_files();
  int left = 0;
  for (int i = 0; i < 70; ++i) {
    const std::string p = "unfinished_many_" + std::to_string(i) + ".tmp";
    left += exists(p) ? 1 : 0;
    std::remove(p.c_str());
  }
  EXPECT_EQ(left, 70 - 64);  // the table holds 64; the rest are written untracked, as documented
}
// Timeout messages name ranks compactly: on a thousand ranks each would otherwise be listed
// with the same words after it.
TEST(RankList, RunsBecomeRangesAndLikeStatesShareAnEntry) {
  using comm::detail::grouped_ranks;
  using comm::detail::rank_list;
  using comm::detail::rank_ranges;
  EXPECT_EQ(rank_ranges({}), "");
  EXPECT_EQ(rank_ranges({3}), "3");
  EXPECT_EQ(rank_ranges({1, 0}), "0, 1");
  EXPECT_EQ(rank_ranges({9, 0, 1, 2, 3, 5, 7, 8}), "0-3, 5, 7-9");
  std::vector<int> many(1024);
  for (int r = 0; r < 1024; ++r) many[static_cast<std::size_t>(r)] = r;
  std::vector<int> most;
  for (int r = 4; r < 1024; ++r) most.push_back(r);
  EXPECT_EQ(rank_ranges(most), "4-1023");
  // A sub-communicator's ranks are named with their world ranks too; one rank as before.
  const std::vector<int> world = {4, 5, 6, 9};
  EXPECT_EQ(rank_list(world, {1}, "alive"), "1 (world rank 5; alive)");
  // Up to 8, each rank's world rank stands at its place (a reversed group stays readable);
  // past that, ranges of both.
  EXPECT_EQ(rank_list(world, {3, 0, 1, 2}), "0, 1, 2, 3 (world ranks 4, 5, 6, 9)");
  EXPECT_EQ(rank_list({3, 2, 1, 0}, {1, 2}), "1, 2 (world ranks 2, 1)");
  EXPECT_EQ(rank_list(world, {0, 1, 2, 3}, "", 2), "0-3 (world ranks 4-6, 9)");
  EXPECT_EQ(rank_list(many, {0, 1, 2}), "0-2");
  // 1020 silent ranks and two in another state: two entries, in the order of their lowest ranks
  // (given from the highest rank down here).
  std::vector<std::pair<int, std::string>> missing;
  for (int r = 1023; r >= 4; --r) missing.push_back({r, r == 700 || r == 9 ? "alive" : "did not answer"});
  EXPECT_EQ(grouped_ranks(many, missing), "4-8, 10-699, 701-1023 (did not answer); 9, 700 (alive)");
  missing.push_back({2, "alive"});
  EXPECT_EQ(grouped_ranks(many, missing), "2, 9, 700 (alive); 4-8, 10-699, 701-1023 (did not answer)");
  // Past the entries asked for, the ranks left are counted.
  std::vector<std::pair<int, std::string>> varied;
  for (int r = 0; r < 12; ++r) varied.push_back({r, "state " + std::to_string(r % 4)});
  EXPECT_EQ(grouped_ranks(many, varied, 2), "0, 4, 8 (state 0); 1, 5, 9 (state 1); and 6 more ranks");
}

}  // namespace
