#include <tessera/core/session.hpp>

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <tessera/core/memory.hpp>

#include "core/device_copy.hpp"
#include "core/fnv1a.hpp"
#include "core/kokkos_start.hpp"
#include "core/log.hpp"
#include "core/mpi_check.hpp"
#include "core/mpi_fence.hpp"
#include "core/node_share.hpp"
#include "core/rank_ranges.hpp"

namespace tessera {
namespace detail {
bool kokkos_host_is_threaded() noexcept {
#if defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS) || defined(KOKKOS_ENABLE_HPX)
  return true;
#else
  return false;
#endif
}

namespace {
std::atomic<bool> g_kokkos_threads_left_to_blas{false};
}
bool kokkos_threads_left_to_blas() noexcept { return g_kokkos_threads_left_to_blas.load(); }

int kokkos_host_threads(int cores, int blas_threads, bool blas_pool_of_its_own) noexcept {
  return blas_pool_of_its_own && blas_threads > 1 ? 1 : std::max(1, cores);
}

std::string kokkos_threads_flag(int argc, const char* const* argv, int cores) {
  for (const char* var : {"OMP_NUM_THREADS", "KOKKOS_NUM_THREADS"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return {};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--kokkos-num-threads", 0) == 0 || arg.rfind("--kokkos-threads", 0) == 0) return {};
  }
#if KOKKOS_VERSION >= 30700
  return "--kokkos-num-threads=" + std::to_string(std::max(1, cores));
#else
  return "--kokkos-threads=" + std::to_string(std::max(1, cores));
#endif
}
}  // namespace detail

namespace {
std::atomic<Session*> g_session{nullptr};
MPI_Comm g_control = MPI_COMM_NULL;
std::atomic<bool> g_comm_failed{false};
// Each communicator's timeout as last made or set (note_comm_timeout), by its id: the end of
// the job waits as long as the longest (a communicator set to wait forever around a long
// write, and set back, counts as set back).
std::mutex g_comm_timeouts_mutex;
std::unordered_map<std::uint64_t, long long> g_comm_timeouts;
std::mutex g_finalizers_mutex;
std::vector<std::function<void()>> g_finalizers;

/// The cores this rank may use: those it is bound to, and no more than its share of the
/// node's among `ranks_on_node` ranks (at least 1).
int cores_of_rank(int ranks_on_node) {
  const int online = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : online;
  return std::max(1, std::min(allowed, online / std::max(1, ranks_on_node)));
}

/// The same, as far as can be told before MPI starts (Open MPI's launcher says how many
/// ranks share the node; other launchers bind, or the share is the node's).
int cores_per_rank_before_mpi() {
  int local = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); v != nullptr) local = std::max(1, std::atoi(v));
  return cores_of_rank(local);
}

/// Starts Kokkos with `args` (Kokkos removes the flags it reads) and, where its host backend
/// is threaded and the user did not choose, the rank's cores as its thread count, as the BLAS
/// gets them: left to itself, every rank of a node starts one thread per core of the node.
/// Where the BLAS runs several threads of its own (OpenBLAS built with pthreads), Kokkos gets
/// one: with both on 2 cores, one rank's step took 89-127 ms against 34-43 ms (MLP 8 x 1024,
/// batch 128, Kokkos 4.4 with OpenMP), as the BLAS's threads and OpenMP's spinning idle
/// ones took turns.
/// OMP_PROC_BIND, if unset, is set to false, the OpenMP runtimes' default, which Kokkos
/// otherwise warns about on every rank; a user who binds threads sets it.
void start_kokkos(int& argc, char** argv, int cores) {
#ifdef KOKKOS_ENABLE_OPENMP
  setenv("OMP_PROC_BIND", "false", 0);
#endif
  // The BLAS's threads, as host_threads() will choose them.
  const char* var = detail::blas_threads_variable();
  const int blas = var != nullptr ? std::max(1, std::atoi(std::getenv(var))) : cores;
  const int threads = detail::kokkos_host_threads(cores, blas, detail::blas_runs_own_threads());
  std::string flag = detail::kokkos_host_is_threaded() ? detail::kokkos_threads_flag(argc, argv, threads) : "";
  detail::g_kokkos_threads_left_to_blas = !flag.empty() && threads < blas;
  if (flag.empty()) {
    Kokkos::initialize(argc, argv);
    return;
  }
  // Kokkos reads a copy with the flag added; the caller's arguments lose what it took.
  std::vector<char*> copy(argv, argv + argc);
  copy.push_back(flag.data());
  int n = static_cast<int>(copy.size());
  copy.push_back(nullptr);
  Kokkos::initialize(n, copy.data());
  int kept = 0;
  for (int i = 0; i < argc; ++i)
    if (std::find(copy.begin(), copy.begin() + n, argv[i]) != copy.begin() + n) argv[kept++] = argv[i];
  if (kept < argc) argv[kept] = nullptr;
  argc = kept;
}

bool probe_cuda_aware_mpi() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

constexpr int kFinalizeTag = 7200;    // + round, on the control communicator
constexpr int kRendezvousTag = 7300;  // + round, on the control communicator
constexpr int kTextsTag = 7400;       // on the control communicator

/// How long the end of the job waits for every rank: as long as the longest timeout of the
/// job's communicators (0 waits forever), or where it made none, TESSERA_COMM_TIMEOUT's
/// (default 600 s); and once a communicator failed, when a rank may never come, half of it,
/// from 1 to 10 s.
std::chrono::milliseconds finalize_timeout() {
  std::chrono::milliseconds limit = std::chrono::minutes(10);
  std::unique_lock<std::mutex> lock(g_comm_timeouts_mutex);
  if (!g_comm_timeouts.empty()) {
    long long longest = 0;
    bool forever = false;
    for (const auto& [id, ms] : g_comm_timeouts) {
      forever = forever || ms <= 0;
      longest = std::max(longest, ms);
    }
    limit = std::chrono::milliseconds(forever ? 0 : longest);
  } else if (const char* text = std::getenv("TESSERA_COMM_TIMEOUT"); text != nullptr && *text != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end != text && *end == '\0' && seconds >= 0)
      limit = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  }
  if (detail::communication_failed()) {
    // A rank may never come now: wait half the timeout, from 1 to 10 s.
    const auto half = limit.count() == 0 ? std::chrono::milliseconds(std::chrono::seconds(10)) : limit / 2;
    limit = std::clamp<std::chrono::milliseconds>(half, std::chrono::seconds(1), std::chrono::seconds(10));
  }
  return limit;
}
}  // namespace

namespace detail {
MPI_Comm control_comm() {
  if (g_control == MPI_COMM_NULL) throw Error("no tessera::Session is alive; create one at the top of main()");
  return g_control;
}
void note_communication_failure() noexcept { g_comm_failed.store(true); }
bool communication_failed() noexcept { return g_comm_failed.load(); }
void note_comm_timeout(std::uint64_t comm_id, std::chrono::milliseconds timeout) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(g_comm_timeouts_mutex);
    g_comm_timeouts[comm_id] = timeout.count();
  } catch (...) {  // out of memory: the end of the job keeps the limit it had
  }
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

void throw_mpi_error(const char* call, int code, const char* file, int line) {
  std::string name(call);
  name = name.substr(0, name.find('('));
  throw CommError(name + " failed: " + mpi_error_string(code), file, line);
}
}  // namespace detail

Session::Session(int& argc, char**& argv) { start(&argc, &argv); }
Session::Session() { start(nullptr, nullptr); }

void Session::start(int* argc, char*** argv) {
  Session* expected = nullptr;
  if (!g_session.compare_exchange_strong(expected, this))
    throw Error("a tessera::Session is already alive in this process; create exactly one");
  try {
    start_runtimes(argc, argv);
  } catch (...) {
    g_session = nullptr;  // the destructor will not run for a constructor that threw
    throw;
  }
}

void Session::start_runtimes(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Where a rank has fewer than two cores, a communicator's progress thread shares one
    // with the thread that computes. Open MPI's blocking calls spin while they wait; told
    // to yield, they leave that core to the computation (measured on 2 ranks of 2 cores: a
    // DDP step 62.0 -> 54.5 ms). With a core to spare, spinning answers sooner, and each
    // yield is a system call. Only a default: a value the user set is kept.
    if (cores_per_rank_before_mpi() < 2) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    // Async collectives run on a progress thread per communicator while the caller keeps
    // using MPI, so every thread may call MPI at once.
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommError("MPI_Init_thread failed: " + detail::mpi_error_string(rc), __FILE__, __LINE__);
    }
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // Errors come back as codes, which TESSERA_CHECK_MPI turns into exceptions.
  TESSERA_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TESSERA_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  TESSERA_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  detail::set_error_rank(rank_);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_mpi_) MPI_Finalize();
    detail::set_error_rank(-1);
    throw ConfigError("the MPI library does not provide MPI_THREAD_MULTIPLE (got level " + std::to_string(provided) +
                      "), which Tessera's asynchronous collectives need; use an MPI built with thread support "
                      "(Cray MPICH: export MPICH_MAX_THREAD_SAFETY=multiple)");
  }
  TESSERA_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &g_control));
  MPI_Comm node;
  TESSERA_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  cores_ = cores_of_rank(local_size_);
  cuda_aware_mpi_ = probe_cuda_aware_mpi();

  if (!Kokkos::is_initialized()) {
    if (argc != nullptr) {
      start_kokkos(*argc, *argv, cores_);
    } else {
      char name[] = "tessera";
      char* args[] = {name, nullptr};
      int count = 1;
      start_kokkos(count, args, cores_);
    }
    owns_kokkos_ = true;
  }
  if (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    // Kokkos has chosen this rank's GPU: which ranks of the node chose the same one.
#ifdef KOKKOS_ENABLE_CUDA
    gpu_id_ = Kokkos::DefaultExecutionSpace().cuda_device();
#endif
    const std::string gpu = detail::device_pci_bus_id(gpu_id_);
    gpu_name_ = detail::device_name(gpu_id_);
    const auto share = detail::share_on_node(MPI_COMM_WORLD, gpu);
    ranks_on_gpu_ = gpu.empty() ? 0 : share.same;
  }
  const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  detail::logger().debug("session started: {} ranks, CUDA-aware MPI: {}, Open MPI yields while it waits: {}", size_,
                         cuda_aware_mpi_, yield != nullptr && std::string(yield) == "1" ? "yes" : "no");
}

std::string Session::gpu() const {
  if (gpu_id_ < 0) return {};
  return "GPU " + std::to_string(gpu_id_) + (gpu_name_.empty() ? "" : " (" + gpu_name_ + ")");
}

Session::~Session() {
  std::vector<std::function<void()>> finalizers;
  {
    std::lock_guard<std::mutex> lock(g_finalizers_mutex);
    finalizers.swap(g_finalizers);
  }
  for (auto it = finalizers.rbegin(); it != finalizers.rend(); ++it) {
    try {
      (*it)();
    } catch (const std::exception& e) {
      detail::logger().error("while finalizing: {}", e.what());
    }
  }
  if (owns_kokkos_ && Kokkos::is_initialized()) Kokkos::finalize();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_mpi_ && !finalized) {
    // MPI_Finalize waits for every rank, also one that stopped or died: a fence with a
    // deadline first, and without every rank there, no MPI_Finalize (the launcher then ends
    // the job as for a failed rank) rather than a process that never exits.
    static detail::FenceBuffers buffers;  // a request that expired may still write here
    const auto limit = finalize_timeout();
    const auto result = detail::fence(g_control, rank_, size_, 0x7e55e7aull, buffers, kFinalizeTag,
                                      std::chrono::steady_clock::now() + limit, limit.count() == 0);
    if (result == detail::FenceResult::Agree) {
      MPI_Comm_free(&g_control);
      MPI_Finalize();
    } else {
      detail::logger().warn(
          "rank {}: not every rank reached the end of the job within {} s; leaving without "
          "MPI_Finalize",
          rank_, limit.count() / 1000.0);
    }
  } else if (!finalized && g_control != MPI_COMM_NULL) {
    MPI_Comm_free(&g_control);
  }
  g_control = MPI_COMM_NULL;
  g_session = nullptr;
}

namespace {
/// The arrival fences' rounds: every rank calls all_arrive_within and gather_texts_within
/// the same number of times, in the same order.
std::uint64_t g_arrival_round = 0;
detail::FenceBuffers g_arrival_buffers;  // a request that expired may still write here

}  // namespace

bool Session::all_arrive_within(std::chrono::milliseconds wait) {
  const auto result = detail::fence(g_control, rank_, size_, g_arrival_round++, g_arrival_buffers, kRendezvousTag,
                                    std::chrono::steady_clock::now() + wait, false);
  return result == detail::FenceResult::Agree;
}

std::optional<std::vector<Session::RankText>> Session::gather_texts_within(const std::string& text,
                                                                           std::chrono::milliseconds wait) {
  constexpr std::size_t kMaxText = 4096;
  const std::string said = text.empty() ? std::string("an error with no message") : text.substr(0, kMaxText);
  // The round and the text's hash: ranks that all came with the same text agree.
  const std::uint64_t round = g_arrival_round++;
  const auto result = detail::fence(g_control, rank_, size_, detail::fnv1a(said) ^ (round * 0x9e3779b97f4a7c15ull),
                                    g_arrival_buffers, kRendezvousTag, std::chrono::steady_clock::now() + wait, false);
  if (result == detail::FenceResult::Expired) return std::nullopt;
  std::vector<std::string> texts;  // rank 0: by rank; empty where none came
  if (result == detail::FenceResult::Agree) {
    if (rank_ == 0) texts.assign(static_cast<std::size_t>(size_), said);
  } else {
    // Every rank is here and they differ: the texts go to rank 0. Buffers a request may still
    // use after the deadline are kept for the process.
    const auto deadline = std::chrono::steady_clock::now() + wait;
    if (rank_ != 0) {
      auto* mine = new std::string(said);
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Isend(mine->data(), static_cast<int>(mine->size()), MPI_CHAR, 0, kTextsTag, g_control, &request);
      if (detail::wait_all_until(&request, 1, deadline, false))
        delete mine;
      else
        MPI_Request_free(&request);  // MPI may still read `mine`, kept for the process
      return std::vector<RankText>{};
    }
    auto* buffer = new std::vector<char>(kMaxText * static_cast<std::size_t>(size_ - 1));
    std::vector<MPI_Request> requests(static_cast<std::size_t>(size_ - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < size_; ++r)
      MPI_Irecv(buffer->data() + kMaxText * static_cast<std::size_t>(r - 1), static_cast<int>(kMaxText), MPI_CHAR, r,
                kTextsTag, g_control, &requests[static_cast<std::size_t>(r - 1)]);
    // Each on its own, so that one rank's silence loses its text alone.
    texts.assign(static_cast<std::size_t>(size_), std::string());
    texts[0] = said;
    bool all = true;
    for (int r = 1; r < size_; ++r) {
      MPI_Status status;
      auto& request = requests[static_cast<std::size_t>(r - 1)];
      if (!detail::wait_all_until(&request, 1, deadline, false, &status)) {
        MPI_Cancel(&request);
        MPI_Request_free(&request);  // its buffer is kept for the process
        all = false;
        continue;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_CHAR, &count);
      texts[static_cast<std::size_t>(r)].assign(buffer->data() + kMaxText * static_cast<std::size_t>(r - 1),
                                                static_cast<std::size_t>(std::max(count, 0)));
    }
    if (all) delete buffer;
  }
  if (rank_ != 0) return std::vector<RankText>{};
  // Texts that differ only in their numbers (a rank's own number, a port) are one group, in
  // its lowest rank's words: at scale the peers of a failed rank would otherwise each be a
  // group of one, and the failure itself hard to find among them.
  const auto shape = [](const std::string& t) {
    std::string key;
    for (std::size_t i = 0; i < t.size(); ++i)
      if (!std::isdigit(static_cast<unsigned char>(t[i])))
        key += t[i];
      else if (key.empty() || key.back() != '#')
        key += '#';
    return key;
  };
  std::vector<RankText> groups;
  std::vector<std::string> shapes;
  for (int r = 0; r < size_; ++r) {
    const auto& t = texts[static_cast<std::size_t>(r)];
    if (t.empty()) continue;  // its text did not come in time
    const auto key = shape(t);
    const auto k = static_cast<std::size_t>(std::find(shapes.begin(), shapes.end(), key) - shapes.begin());
    if (k == shapes.size()) {
      shapes.push_back(key);
      groups.push_back(RankText{t, {}, {}, true});
    }
    groups[k].ranks.push_back(r);
    groups[k].same_words = groups[k].same_words && groups[k].text == t;
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const RankText& a, const RankText& b) { return a.ranks.size() < b.ranks.size(); });
  for (auto& g : groups) g.ranks_text = detail::rank_ranges(g.ranks);
  return groups;
}

bool Session::active() noexcept { return g_session.load() != nullptr; }

Session& Session::current() {
  Session* s = g_session.load();
  if (s == nullptr) throw Error("no tessera::Session is alive; create one at the top of main() before using Tessera");
  return *s;
}

void Session::at_finalize(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(g_finalizers_mutex);
  g_finalizers.push_back(std::move(fn));
}

}  // namespace tessera
