// tessera-bench-collectives: collective bandwidth in nccl-tests' terms (time, algbw,
// busbw, #wrong), with the raw library call (MPI_Allreduce, Gloo's algorithm, ncclAllReduce)
// timed on the same buffers in the same run, so each row shows Tessera / raw. The flags it
// shares with nccl-tests mean what they mean there (-o is the reduction op, -r the root);
// the collective, which nccl-tests takes from the program's name, is --coll.
//
//   mpiexec -n 2 tessera-bench-collectives --coll all_reduce -b 64K -e 64M -f 4 -o sum --backend all --json out.json

#include <tessera/tessera.hpp>

#include <mpi.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../apps/common/app_main.hpp"
#include "../apps/common/machine_json.hpp"
#include "raw_baseline.hpp"

namespace {
using namespace tessera;
using comm::Communicator;
using comm::ReduceOp;

const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter",
                                       "broadcast",  "reduce",     "all_to_all"};

/// A size flag's value in bytes; errors name the flag (`flag`, as "-b"; none where empty).
std::size_t parse_size(const std::string& flag, const std::string& text) {
  const std::string said = flag.empty() ? "" : flag + ": ";
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw ConfigError(said + "size '" + text + "' is not a number of bytes (e.g. 64K, 8M, 1G)");
  }
  std::string unit = text.substr(pos);
  double mult = 1;
  if (unit == "K" || unit == "k")
    mult = 1024;
  else if (unit == "M" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    throw ConfigError(said + "size '" + text + "' has an unknown unit; use K, M or G");
  if (!(v > 0)) throw ConfigError(said + "size '" + text + "' must be above 0 bytes");
  if (v * mult >= 9.2e18) throw ConfigError(said + "size '" + text + "' is too large");
  return static_cast<std::size_t>(v * mult);
}

/// The most elements MPI's own calls take (their counts are int).
constexpr std::size_t kMpiCountMax = 2147483647;

/// Whether MPI's own call of `op` on `count` elements in all (a row's count) over `ranks`
/// counts in an int: each rank's block for the ops that spread the buffer over the ranks,
/// and a reduce-scatter's whole input too, which Open MPI counts in an int.
bool raw_mpi_fits(const std::string& op, std::size_t count, int ranks) {
  const bool spread = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
  const std::size_t per_rank = spread ? count / static_cast<std::size_t>(ranks) : count;
  return per_rank <= kMpiCountMax && (op != "reduce_scatter" || count <= kMpiCountMax);
}

/// nccl-tests' bus-bandwidth factor: busbw = algbw * factor.
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return static_cast<double>(n - 1) / n;
  return 1.0;
}

/// Small integers: exact in every dtype, so checks are exact whatever the reduction order.
double input_value(int rank, std::size_t i) {
  return static_cast<double>((static_cast<std::size_t>(rank) + i) % 5 + 1);
}

struct Case {
  std::string op;
  DType dtype;
  ReduceOp redop;
  int root;
  std::size_t bytes;     // nccl-tests "size": the largest of the op's buffers
  std::size_t count;     // elements of that buffer
  std::size_t per_rank;  // elements each rank contributes / receives
};

/// Buffers for one case in the backend's memory, with host images for filling and checking.
struct Buffers {
  MemoryKind where = MemoryKind::Host;
  void* send = nullptr;
  void* recv = nullptr;
  std::size_t send_count = 0, recv_count = 0, esz = 0;
  std::vector<char> host_send, host_recv;
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    if (send) perf::release(send, where);
    if (recv) perf::release(recv, where);
  }
  void upload() {
    perf::copy(send, host_send.data(), host_send.size(), where, MemoryKind::Host);
    perf::copy(recv, host_recv.data(), host_recv.size(), where, MemoryKind::Host);
  }
  void download() { perf::copy(host_recv.data(), recv, host_recv.size(), MemoryKind::Host, where); }
};

void put(void* base, DType t, std::size_t i, double v) {
  switch (t) {
    case DType::Float32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::Float64:
      static_cast<double*>(base)[i] = v;
      break;
    case DType::Int32:
      static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v);
      break;
    case DType::Int64:
      static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v);
      break;
    case DType::BFloat16:
      static_cast<bfloat16*>(base)[i] = bfloat16(static_cast<float>(v));
      break;
    case DType::Float16:
      static_cast<float16*>(base)[i] = float16(static_cast<float>(v));
      break;
  }
}
double get(const void* base, DType t, std::size_t i) {
  switch (t) {
    case DType::Float32:
      return static_cast<const float*>(base)[i];
    case DType::Float64:
      return static_cast<const double*>(base)[i];
    case DType::Int32:
      return static_cast<const std::int32_t*>(base)[i];
    case DType::Int64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case DType::BFloat16:
      return static_cast<float>(static_cast<const bfloat16*>(base)[i]);
    case DType::Float16:
      return static_cast<float>(static_cast<const float16*>(base)[i]);
  }
  return 0;
}

/// Sizes c (count, per_rank, bytes) for a row of `bytes`: whole elements, per rank for the
/// ops that spread the buffer over the ranks; one element (per rank) at least.
void size_case(Case& c, std::size_t bytes, int p) {
  const std::size_t esz = dtype_size(c.dtype), ranks = static_cast<std::size_t>(p);
  const bool spread = c.op == "all_gather" || c.op == "reduce_scatter" || c.op == "all_to_all";
  c.count = spread ? std::max<std::size_t>(bytes / esz / ranks, 1) * ranks : std::max<std::size_t>(bytes / esz, 1);
  c.per_rank = spread ? c.count / ranks : c.count;
  c.bytes = c.count * esz;
}

/// The elements of a case's input and output on each rank.
std::pair<std::size_t, std::size_t> send_recv_counts(const Case& c, int p) {
  const std::size_t n = c.per_rank, all = n * static_cast<std::size_t>(p);
  if (c.op == "all_gather") return {n, all};
  if (c.op == "reduce_scatter") return {all, n};
  if (c.op == "all_to_all") return {all, all};
  return {n, n};
}

void make_buffers(Buffers& b, const Case& c, int p, MemoryKind where) {
  std::tie(b.send_count, b.recv_count) = send_recv_counts(c, p);
  b.where = where;
  b.esz = dtype_size(c.dtype);
  b.host_send.assign(b.send_count * b.esz, 0);
  b.host_recv.assign(b.recv_count * b.esz, 0);
  b.send = perf::allocate(b.send_count * b.esz, where);
  b.recv = perf::allocate(b.recv_count * b.esz, where);
  b.upload();
}

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

/// Refuses, before any buffer is allocated, a largest size (-e) whose buffers would not fit:
/// each row allocates the op's input and output in the backend's memory (GPU memory for
/// NCCL) and their images in host memory, and a rank that asked for more than the node has
/// was ended by the kernel's out-of-memory killer, perhaps with other work on the node.
void check_memory(const std::vector<std::string>& ops, DType dtype, std::size_t hi, const std::string& max_text,
                  Session& session, const std::vector<comm::Backend>& backends) {
  double largest = 0;  // bytes of the largest row's input and output, over the ops
  std::string largest_op;
  for (const auto& op : ops) {
    Case c{op, dtype, ReduceOp::Sum, 0, 0, 0, 0};
    size_case(c, hi, session.size());
    const auto [send, recv] = send_recv_counts(c, session.size());
    const double bytes = static_cast<double>(send + recv) * static_cast<double>(dtype_size(dtype));
    if (bytes > largest) largest = bytes, largest_op = op;
  }
  bool host_buffers = false, device_buffers = false;
  for (const auto backend : backends) {
    const bool nccl = backend == comm::Backend::Nccl || (backend == comm::Backend::Auto && perf::nccl_usable());
    (nccl ? device_buffers : host_buffers) = true;
  }
  // `what`: the memory and what it holds.
  const auto refuse = [&](double need, const MemoryBudget& have, const std::string& what) {
    if (have.bytes <= 0 || need <= have.bytes) return;
    throw ConfigError("-e " + max_text + " needs about " + gigabytes(need) + " of " + what +
                      "), and this rank may take " + gigabytes(have.bytes) + " (" + have.source +
                      "); give a smaller -e");
  };
  const std::string held = " per rank at its largest size (" + largest_op + "'s input and output";
  refuse(largest * (host_buffers ? 2 : 1), host_memory_budget(),
         "host memory" + held + ", and their host images, to fill and check them");
  if (device_buffers && memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device)
    refuse(largest, memory_budget(), "GPU memory" + held);
}

/// Whether the collective combines values with a reduction op (the others move them only).
bool reduces(const std::string& op) { return op == "all_reduce" || op == "reduce_scatter" || op == "reduce"; }

/// Runs the case once through Tessera.
void run_tessera(Communicator& comm, const Case& c, Buffers& b) {
  comm::Buffer s(b.send, b.send_count, c.dtype, b.where), r(b.recv, b.recv_count, c.dtype, b.where);
  if (c.op == "all_reduce")
    comm.all_reduce(s, r, c.redop);
  else if (c.op == "all_gather")
    comm.all_gather(s, r);
  else if (c.op == "reduce_scatter")
    comm.reduce_scatter(s, r, c.redop);
  else if (c.op == "broadcast")
    comm.broadcast(r, c.root);
  else if (c.op == "reduce")
    comm.reduce(s, r, c.redop, c.root);
  else
    comm.all_to_all(s, r);
}

/// Fills inputs, runs once through Tessera, counts wrong output elements on this rank.
std::size_t check(Communicator& comm, const Case& c, Buffers& b) {
  const int p = comm.size(), me = comm.rank();
  const std::size_t n = c.per_rank;
  for (std::size_t i = 0; i < b.send_count; ++i) put(b.host_send.data(), c.dtype, i, input_value(me, i));
  for (std::size_t i = 0; i < b.recv_count; ++i)
    put(b.host_recv.data(), c.dtype, i, c.op == "broadcast" && me == c.root ? input_value(c.root, i) : -7);
  b.upload();
  run_tessera(comm, c, b);
  b.download();
  auto reduced = [&](std::size_t i) {
    double acc =
        c.redop == ReduceOp::Prod ? 1 : (c.redop == ReduceOp::Min ? 1e300 : (c.redop == ReduceOp::Max ? -1e300 : 0));
    for (int r = 0; r < p; ++r) {
      const double v = input_value(r, i);
      if (c.redop == ReduceOp::Sum || c.redop == ReduceOp::Avg)
        acc += v;
      else if (c.redop == ReduceOp::Prod)
        acc *= v;
      else if (c.redop == ReduceOp::Min)
        acc = std::min(acc, v);
      else
        acc = std::max(acc, v);
    }
    return c.redop == ReduceOp::Avg ? acc / p : acc;
  };
  std::size_t wrong = 0;
  auto expect = [&](std::size_t at, double e) {
    const double got = get(b.host_recv.data(), c.dtype, at);
    // avg is the one op whose result may not be exact in the dtype (e.g. x/3).
    const double tol = c.redop == ReduceOp::Avg ? std::fabs(e) * 1e-2 : 0.0;
    if (std::fabs(got - e) > tol) ++wrong;
  };
  if (c.op == "all_reduce")
    for (std::size_t i = 0; i < n; ++i) expect(i, reduced(i));
  else if (c.op == "reduce") {
    if (me == c.root)
      for (std::size_t i = 0; i < n; ++i) expect(i, reduced(i));
  } else if (c.op == "broadcast")
    for (std::size_t i = 0; i < n; ++i) expect(i, input_value(c.root, i));
  else if (c.op == "reduce_scatter")
    for (std::size_t i = 0; i < n; ++i) expect(i, reduced(n * static_cast<std::size_t>(me) + i));
  else if (c.op == "all_gather") {
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < n; ++i) expect(n * static_cast<std::size_t>(r) + i, input_value(r, i));
  } else {
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < n; ++i)
        expect(n * static_cast<std::size_t>(r) + i, input_value(r, n * static_cast<std::size_t>(me) + i));
  }
  return wrong;
}

nlohmann::json microseconds(const std::vector<double>& seconds) {
  nlohmann::json out = nlohmann::json::array();
  for (double s : seconds) out.push_back(s * 1e6);
  return out;
}

/// How a row's time is combined over the ranks: nccl-tests' -a (0 rank 0's, 1 the mean, 2 the
/// fastest rank's, 3 the slowest rank's).
const char* const kAverageNames[] = {"rank0", "mean", "fastest", "slowest"};
const char* const kAverageWords[] = {"rank 0's median", "the mean of the ranks' medians", "the fastest rank's median",
                                     "the slowest rank's median"};

double combine(const std::vector<double>& per_rank, int average) {
  switch (average) {
    case 0:
      return per_rank.front();
    case 1:
      return std::accumulate(per_rank.begin(), per_rank.end(), 0.0) / static_cast<double>(per_rank.size());
    case 2:
      return *std::min_element(per_rank.begin(), per_rank.end());
    default:
      return *std::max_element(per_rank.begin(), per_rank.end());
  }
}

/// nccl-tests flags with no counterpart here: accepted at nccl-tests' default (or a value
/// that changes nothing for one thread per rank), refused otherwise with what to do instead,
/// rather than rejected as unknown.
struct ForeignFlag {
  const char* names;                    // CLI11 names, the short one first
  std::array<const char*, 2> accepted;  // values that change nothing here (none: nullptr)
  const char* what;                     // what it does in nccl-tests
  const char* instead;                  // why it has no counterpart, and what to do
  /// The accepted values as "a or b", empty where there are none.
  std::string accepted_text() const {
    std::string text;
    for (const char* a : accepted)
      if (a != nullptr) text += (text.empty() ? "" : " or ") + std::string(a);
    return text;
  }
};
const ForeignFlag kForeignFlags[] = {
    {"-z,--blocking",
     {"2"},
     "collective blocking mode",
     "this benchmark waits for every call and times each on its own, without a barrier between calls, as nccl-tests' "
     "-z 2 blocks (though it reports each rank's median call where nccl-tests reports the mean); leave -z out or "
     "give -z 2"},
    {"-m,--agg_iters",
     {"1"},
     "aggregation of several operations per iteration",
     "every call is issued and timed on its own; leave -m out or give -m 1"},
    {"-N,--run_cycles", {"1"}, "repeated cycles of the run", "run the benchmark again instead"},
    {"-p,--parallel_init",
     {"0", "1"},
     "parallel NCCL initialization by threads",
     "a Tessera rank drives one GPU from one thread; leave -p out"},
    {"-G,--cudagraph",
     {"0"},
     "CUDA graph capture and replay",
     "this benchmark times Tessera's own calls, as a training step makes them; leave -G out or give -G 0"},
    {"-C,--report_cputime", {"0"}, "CPU time reporting", "leave -C out or give -C 0"},
    {"-I,--per_iter_timing",
     {"0"},
     "per-iteration timing",
     "each rank's time of every row is in the JSON (--json: rank_time_us); leave -I out or give -I 0"},
    {"-K,--per_iter_skip", {"0"}, "samples skipped by -I", "leave -K out or give -K 0"},
    {"-R,--local_register",
     {"0"},
     "NCCL buffer registration",
     "Tessera does not register buffers with NCCL; leave -R out or give -R 0"},
    {"-D,--device_implementation",
     {"0"},
     "NCCL device API implementation",
     "Tessera calls NCCL's host API; leave -D out or give -D 0"},
    {"-V,--device_cta_count", {"16"}, "CTA count of the device API", "leave -V out"},
    {"-S,--report_timestamps", {"0"}, "timestamps on rows", "leave -S out or give -S 0"},
    {"-M,--memory", {"0"}, "memory usage report", "leave -M out or give -M 0"},
    {"-u,--unalign", {"0"}, "buffer misalignment", "the buffers are allocated aligned; leave -u out or give -u 0"},
    {"-y,--stream_null",
     {"0"},
     "collectives on the NULL stream",
     "Tessera runs NCCL on a stream of its own; leave -y out or give -y 0"},
    {"-x,--cta_policy", {}, "NCCL CTA policy", "Tessera leaves NCCL's CTA policy at its default; leave -x out"},
};

/// Refuses, while the command line is read (a usage error), a foreign flag given a value that
/// would change what nccl-tests measures.
CLI::Validator foreign_flag_check(const ForeignFlag& f) {
  return CLI::Validator(
      [f](std::string& value) -> std::string {
        for (const char* a : f.accepted)
          if (a != nullptr && value == a) return {};
        return "'" + value + "' (nccl-tests' " + f.what +
               ") has no counterpart in tessera-bench-collectives: " + f.instead;
      },
      "");
}

/// nccl-tests' -g and -t (GPUs and threads per process) accept only 1 here: a Tessera rank
/// drives one GPU from one thread. The launch to use instead counts the job's ranks (MPI has
/// started when the flags are read).
CLI::Validator one_per_rank(const char* flag, const char* what) {
  return CLI::Validator(
      [flag, what](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long n = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno == ERANGE || n > (1 << 20))
          return "'" + value + "' is not a whole number of " + what + "; leave " + flag + " out or give " + flag + " 1";
        if (n < 1) return "must be 1, not " + value + ": a Tessera rank drives one GPU from one thread";
        if (n == 1) return {};
        int started = 0, ranks = 1;
        MPI_Initialized(&started);
        if (started != 0) MPI_Comm_size(MPI_COMM_WORLD, &ranks);
        return value + " " + what +
               ": a Tessera rank drives one GPU from one thread; start one rank per GPU instead (mpiexec -n " +
               std::to_string(static_cast<long long>(ranks) * n) + ") and leave " + flag + " at 1";
      },
      "");
}

/// Seconds per call of fn on each rank: the median over `iters` calls (the median, unlike the
/// mean, ignores the scheduler's outliers on a shared machine), every rank's, in rank order.
/// Tessera and the raw call are measured the same way.
std::vector<double> time_batch(MPI_Comm sync, int iters, const std::function<void()>& fn) {
  std::vector<double> t(static_cast<std::size_t>(iters));
  MPI_Barrier(sync);
  for (auto& x : t) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    x = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  const double median = t[static_cast<std::size_t>(iters / 2)];
  int ranks = 1;
  MPI_Comm_size(sync, &ranks);
  std::vector<double> all(static_cast<std::size_t>(ranks));
  MPI_Allgather(&median, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, sync);
  return all;
}

/// The fastest of the rounds: its combined time, and every rank's time in that round.
struct Timing {
  double time = 1e300;
  std::vector<double> per_rank;
  void keep_best(std::vector<double> round, int average) {
    const double combined = combine(round, average);
    if (combined < time) {
      time = combined;
      per_rank = std::move(round);
    }
  }
};
/// nccl-tests' "all" sweep (-o all, -d all, -r all) is refused by name: this benchmark runs
/// one of each per invocation.
CLI::Validator no_sweep(const std::string& what, const std::string& values) {
  return CLI::Validator(
      [what, values](std::string& text) -> std::string {
        if (text != "all") return {};
        return "'all' (nccl-tests' sweep over every " + what + ") is not offered here; run once per " + what + " (" +
               values + ")";
      },
      "");
}

/// The collectives --coll names: one, or all of them.
std::vector<std::string> check_collective(const std::string& name) {
  if (name == "all") return kOps;
  if (std::find(kOps.begin(), kOps.end(), name) == kOps.end())
    throw ConfigError("unknown collective '" + name +
                      "'; use all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all or all" +
                      (name == "sum" || name == "prod" || name == "min" || name == "max" || name == "avg"
                           ? " (the reduction op is -o, as in nccl-tests)"
                           : ""));
  return {name};
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Collective bandwidth benchmark with nccl-tests semantics (-b, -e, -f, -i, -n, -w, -c, -d, -o, -r, -a, -T and "
      "-J mean what they mean in nccl-tests; the defaults differ: a sweep of sizes, and -a 3); compares Tessera "
      "with the raw library call on the same buffers.",
      "mpiexec -n N tessera-bench-collectives"};
  // A flag given twice keeps its last value, as in nccl-tests and tessera-train.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string min_bytes = "64K", max_bytes = "64M", op_name = "all_reduce", dtype_name_arg = "float32",
              redop_name = "sum", backend_arg = "all", json_path;
  int factor = 4, iters = 20, warmup = 5, check_flag = 1, rounds = 3, root = 0, average = 3, gpus = 1, threads = 1;
  bool noise_floor = false;
  std::optional<double> min_busbw, min_ratio, timeout_s;
  std::optional<std::string> step_bytes;
  const auto size = apps::parsed_by([](const std::string& text) { return parse_size("", text); });
  app.add_option("-b,--minbytes", min_bytes, "smallest size in bytes; K, M and G suffixes")
      ->capture_default_str()
      ->check(size);
  app.add_option("-e,--maxbytes", max_bytes, "largest size in bytes")->capture_default_str()->check(size);
  auto* factor_opt = app.add_option("-f,--stepfactor", factor, "multiply the size by this between rows")
                         ->capture_default_str()
                         ->transform(apps::whole(2, 1 << 20));
  app.add_option("-i,--stepbytes", step_bytes, "add this many bytes between rows instead of -f; K, M and G suffixes")
      ->excludes(factor_opt)
      ->check(size);
  app.add_option("--coll", op_name, "the collective, or all of them")
      ->capture_default_str()
      ->option_text("{all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all,all}")
      ->check(apps::parsed_by(check_collective));
  app.add_option("-d,--datatype,--dtype", dtype_name_arg,
                 "float32 or float, float64 or double, int32, int64, bfloat16, float16 or half")
      ->capture_default_str()
      ->check(no_sweep("dtype", "float32, float64, int32, int64, bfloat16 or float16"))
      ->check(apps::parsed_by(parse_dtype));
  app.add_option("-o,--op,--redop", redop_name, "reduction op: sum, prod, min, max, avg")
      ->capture_default_str()
      ->check(no_sweep("reduction op", "sum, prod, min, max or avg"))
      ->check(apps::parsed_by(comm::parse_reduce_op));
  app.add_option("-r,--root", root, "root rank of broadcast and reduce")
      ->capture_default_str()
      ->transform(apps::whole(0, 1 << 30))
      ->transform(no_sweep("root", "0, 1, ..."));  // a transform goes before those given before it
  app.add_option("-n,--iters", iters, "timed iterations per measurement")
      ->capture_default_str()
      ->transform(apps::whole(1, 1 << 30));
  app.add_option("-w,--warmup_iters", warmup, "untimed iterations first")
      ->capture_default_str()
      ->transform(apps::whole(0, 1 << 30));
  app.add_option("-c,--check", check_flag,
                 "N >= 1: verify the results (once per row and backend, whatever N: nccl-tests checks N "
                 "iterations); 0: do not")
      ->capture_default_str()
      ->transform(apps::whole(0, 1 << 30));
  app.add_option("-a,--average", average,
                 "how a row's time is combined over the ranks: 0 rank 0's, 1 the mean, 2 the fastest rank's, 3 the "
                 "slowest rank's, which the job waits for; nccl-tests' default is 1")
      ->capture_default_str()
      ->transform(apps::whole(0, 3));
  app.add_option("-g,--ngpus", gpus, "GPUs per rank; only 1: a Tessera rank drives one GPU, so start one rank per GPU")
      ->capture_default_str()
      ->check(one_per_rank("-g", "GPUs per rank"));
  app.add_option("-t,--nthreads", threads, "threads per rank; only 1: a Tessera rank drives its GPU from one thread")
      ->capture_default_str()
      ->check(one_per_rank("-t", "threads per rank"));
  app.add_option("--rounds", rounds, "alternating Tessera/raw batches per row; the lowest median of each is kept")
      ->capture_default_str()
      ->transform(apps::whole(1, 1000));
  app.add_option("--backend", backend_arg, "mpi, gloo, nccl, or all: every one compiled in and usable")
      ->capture_default_str()
      ->transform(apps::one_of({"mpi", "gloo", "nccl", "all"}, "a backend this benchmark runs", {"auto"}));
  app.add_option("--json,-J,--output_file", json_path, "write the results as JSON to this file")
      ->option_text("FILE")
      ->check(tessera::apps::file_name());
  app.add_option("-T,--timeout", timeout_s,
                 "seconds any one of Tessera's calls may take before every rank stops with a diagnosis (default: "
                 "TESSERA_COMM_TIMEOUT, else 600; 0: no limit); the raw library calls have no limit")
      // Kept to the millisecond: 0.0001 was kept as 1 ms without a word.
      ->check(apps::real([](double v) { return v == 0 || (v >= 0.001 && v <= 1e7); },
                         "0, or from 0.001 (a millisecond, the finest limit) to 10000000", "0, or 0.001 to 10000000"));
  app.add_option("--min-busbw", min_busbw, "exit non-zero if any Tessera row's busbw (GB/s) is below this")
      ->check(apps::positive(1e9));
  app.add_option("--min-ratio", min_ratio,
                 "exit non-zero if any row's Tessera/raw busbw ratio is below this (every row needs the library's "
                 "own call)")
      ->check(apps::positive(1e9));
  app.add_flag("--noise-floor", noise_floor,
               "time the raw call in place of Tessera too (an A/A run): the spread of its ratio around 1 is the "
               "smallest difference this machine can resolve");
  for (std::size_t i = 0; i < std::size(kForeignFlags); ++i)
    app.add_option(kForeignFlags[i].names)
        ->description(std::string("nccl-tests' ") + kForeignFlags[i].what +
                      (kForeignFlags[i].accepted_text().empty()
                           ? std::string("; not offered here")
                           : "; accepted here only as " + kForeignFlags[i].accepted_text()))
        ->check(foreign_flag_check(kForeignFlags[i]))
        ->group("nccl-tests options with no counterpart here");

  // The flags that must fit each other, judged as the flags are read: a usage error (exit 2),
  // as one flag's bad value is.
  DType dtype = DType::Float32;
  ReduceOp redop = ReduceOp::Sum;
  std::size_t lo = 0, hi = 0, step = 0;
  app.callback([&] {
    dtype = parse_dtype(dtype_name_arg);
    redop = comm::parse_reduce_op(redop_name);
    if (redop == ReduceOp::Avg && (dtype == DType::Int32 || dtype == DType::Int64))
      throw ConfigError("-o avg is defined for floating-point dtypes only, not -d " + dtype_name_arg +
                        "; give -d float (or double, half, bfloat16), or -o sum");
    lo = parse_size("-b", min_bytes);
    hi = parse_size("-e", max_bytes);
    step = step_bytes ? parse_size("-i", *step_bytes) : 0;
    if (step_bytes && step == 0)
      throw ConfigError("-i " + *step_bytes + " is less than 1 byte; give the step in whole bytes (-i 1M)");
    if (lo > hi)
      throw ConfigError("-b (" + min_bytes + ") is larger than -e (" + max_bytes +
                        (app.count("-e") == 0 ? ", the default" : "") + "); give a larger -e or a smaller -b");
    if (lo < dtype_size(dtype))
      throw ConfigError("-b " + min_bytes + " is less than one " + tessera::dtype_name(dtype) + " element (" +
                        std::to_string(dtype_size(dtype)) + " bytes); give at least -b " +
                        std::to_string(dtype_size(dtype)));
  });

  return tessera::apps::run_app(argc, argv, app, tessera::apps::Outputs::AtEnd, [&](tessera::Session& session) {
    // The results file is checked before any work.
    // Messages name the results file's flag as typed (--json, or nccl-tests' -J/--output_file), and
    // the timeout's (-T or --timeout).
    std::string json_flag = "--json", timeout_flag = "-T";
    for (int a = 1; a < argc; ++a) {
      const std::string arg = argv[a];
      if (arg == "--") break;
      for (const char* name : {"--json", "--output_file"})
        if (arg == name || arg.rfind(std::string(name) + "=", 0) == 0) json_flag = name;
      if (arg.rfind("-J", 0) == 0) json_flag = "-J";
      if (arg == "--timeout" || arg.rfind("--timeout=", 0) == 0) timeout_flag = "--timeout";
    }
    if (!json_path.empty()) apps::check_on_rank0(session, [&] { return apps::cannot_write(json_flag, json_path); });
    if (session.rank() == 0)
      for (const auto& note : apps::leftover_copy_notes({{json_flag, json_path}}))
        std::fprintf(stderr, "tessera-bench-collectives: note: %s\n", note.c_str());
    const std::vector<std::string> ops = check_collective(op_name);
    if (root < 0 || root >= session.size())
      throw ConfigError("-r " + std::to_string(root) + " is not a rank of this job; use 0.." +
                        std::to_string(session.size() - 1));
    if (min_busbw && session.size() < 2)
      throw ConfigError("--min-busbw needs at least 2 ranks: on 1 rank nothing crosses a bus, so busbw is undefined");
    std::vector<comm::Backend> backends;
    if (backend_arg == "all") {
      backends.push_back(comm::Backend::Mpi);
      if (comm::backend_compiled(comm::Backend::Gloo)) backends.push_back(comm::Backend::Gloo);
      if (perf::nccl_usable()) backends.push_back(comm::Backend::Nccl);
    } else {
      backends.push_back(comm::parse_backend(backend_arg));
    }
    // --min-ratio and --noise-floor need the raw library call of every row (rows without one
    // show n/a, and were let pass the gate, or timed Tessera under the noise floor's name).
    const auto require_raw = [&](comm::Backend backend) {
      if (!min_ratio && !noise_floor) return;
      std::string missing;
      for (const auto& op : ops)
        if (!perf::raw_supports(backend, op, dtype, redop))
          missing += std::string(missing.empty() ? "" : ", ") + comm::backend_name(backend) + " " + op;
      if (backend == comm::Backend::Mpi)
        for (const auto& op : ops)
          if (!raw_mpi_fits(op, hi / dtype_size(dtype), session.size()))
            missing +=
                std::string(missing.empty() ? "" : ", ") + "mpi " + op + " of -e " + max_bytes + " (MPI counts in int)";
      if (missing.empty()) return;
      const bool reducing = std::any_of(ops.begin(), ops.end(), [](const std::string& op) { return reduces(op); });
      const std::string what = std::string(" (-d ") + tessera::dtype_name(dtype) +
                               (reducing ? std::string(", -o ") + comm::reduce_op_name(redop) : std::string()) + ")";
      throw ConfigError(
          std::string(min_ratio ? "--min-ratio compares each row with" : "--noise-floor times") +
          " the library's own call, and there is none for " + missing + what +
          ": MPI and Gloo have no bfloat16 or float16 reduction and no average, Gloo no "
          "reduce_scatter, NCCL no all_to_all. Leave those out (--coll, -d, -o, --backend, -e), or drop " +
          (min_ratio ? "--min-ratio" : "--noise-floor"));
    };
    for (const auto backend : backends)
      if (backend != comm::Backend::Auto) require_raw(backend);
    check_memory(ops, dtype, hi, max_bytes, session, backends);
    MPI_Comm sync;
    MPI_Comm_dup(MPI_COMM_WORLD, &sync);
    const int p = session.size();
    const bool leader = session.rank() == 0;

    nlohmann::json out;
    out["machine"] = apps::machine_json(session);
    // -T: how long any one call may take (TESSERA_COMM_TIMEOUT's, or 10 minutes, without it);
    // a timeout's message then names -T, which wins over the variable.
    comm::CommOptions comm_options = comm::CommOptions::from_env();
    if (timeout_s) {
      comm_options.timeout = comm::CommOptions::timeout_from_seconds(*timeout_s, timeout_flag);
      comm_options.timeout_setting = timeout_flag;
    }
    out["settings"] = {{"iters", iters},
                       {"warmup_iters", warmup},
                       {"rounds", rounds},
                       {"step_factor", step > 0 ? nlohmann::json(nullptr) : nlohmann::json(factor)},
                       {"step_bytes", step > 0 ? nlohmann::json(step) : nlohmann::json(nullptr)},
                       {"timeout_s", nullptr},  // the communicators' own, once they exist
                       {"check", check_flag > 0},
                       {"noise_floor", noise_floor},
                       {"min_busbw_gbps", min_busbw ? nlohmann::json(*min_busbw) : nlohmann::json(nullptr)},
                       {"min_ratio", min_ratio ? nlohmann::json(*min_ratio) : nlohmann::json(nullptr)},
                       {"gloo_loop_sched", std::getenv("TESSERA_GLOO_LOOP_SCHED") != nullptr
                                               ? nlohmann::json(std::getenv("TESSERA_GLOO_LOOP_SCHED"))
                                               : nlohmann::json(nullptr)}};
    out["started_utc"] = apps::utc_now();
    out["results"] = nlohmann::json::array();
    bool below = false, below_ratio = false;
    std::vector<std::string> misses;  // the rows below a threshold, named
    std::size_t total_wrong = 0;

    for (const auto backend : backends) {
      auto comm = Communicator::create(backend, comm_options);
      require_raw(comm->backend());  // auto's choice
      out["settings"]["timeout_s"] = std::chrono::duration<double>(comm->timeout()).count();
      auto raw = perf::RawBaseline::make(*comm, sync);
      for (const auto& op : ops) {
        bool rounded_noted = false;   // a size that ran as another, said once per op
        bool past_int_noted = false;  // a size past MPI's int count, likewise
        if (leader) {
          std::printf(
              "#\n# backend %s, %d rank%s, op %s, dtype %s, redop %s, %d iters x %d rounds, %d warm-up, time: "
              "%s%s%s\n",
              comm::backend_name(comm->backend()), p, p == 1 ? "" : "s", op.c_str(), tessera::dtype_name(dtype),
              reduces(op) ? comm::reduce_op_name(redop) : "none", iters, rounds, warmup, kAverageWords[average],
              noise_floor ? "\n# NOISE FLOOR: the Tessera columns time the raw call too" : "",
              p == 1 ? "\n# 1 rank: nothing crosses a bus, so busbw is undefined (-); tess/raw compares times" : "");
          std::printf("# %12s %12s %9s %6s %10s %8s %8s %7s %10s %9s %8s\n", "size", "count", "type", "redop", "time",
                      "algbw", "busbw", "#wrong", "raw time", "raw busbw", "ratio");
          std::printf("# %12s %12s %9s %6s %10s %8s %8s %7s %10s %9s %8s\n", "(B)", "(elements)", "", "", "(us)",
                      "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "tess/raw");
        }
        // Sizes from -b to -e: multiplied by -f, or -i bytes apart.
        for (std::size_t bytes = lo; bytes <= hi;
             bytes = step > 0 ? bytes + step : bytes * static_cast<std::size_t>(factor)) {
          Case c{op, dtype, redop, root, 0, 0, 0};
          const std::size_t esz = dtype_size(dtype);
          const bool spread = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
          size_case(c, bytes, p);
          // A size that is not whole elements (per rank, for the ops that spread the buffer
          // over the ranks) runs as the nearest below, or as one element per rank.
          if (leader && c.bytes != bytes && !rounded_noted) {
            rounded_noted = true;
            std::printf(
                "# note: %s moves whole %s elements%s: %zu B runs as %zu B (and any size not a multiple "
                "of %zu B likewise)\n",
                op.c_str(), tessera::dtype_name(dtype), spread ? " per rank" : "", bytes, c.bytes,
                esz * (spread ? static_cast<std::size_t>(p) : 1));
          }
          Buffers b;
          make_buffers(b, c, p, comm->backend() == comm::Backend::Nccl ? MemoryKind::Device : MemoryKind::Host);
          std::size_t wrong = 0;
          if (check_flag) wrong = check(*comm, c, b);
          MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, sync);
          total_wrong += wrong;
          for (int i = 0; i < warmup; ++i) run_tessera(*comm, c, b);
          // MPI's calls count in int: a row past that has no raw call to compare with.
          const bool raw_fits = comm->backend() != comm::Backend::Mpi || raw_mpi_fits(op, c.count, p);
          if (leader && !raw_fits && !past_int_noted) {
            past_int_noted = true;
            std::printf("# note: MPI's own %s counts in an int (at most %zu elements): from %zu B, no raw call (n/a)\n",
                        op.c_str(), kMpiCountMax, c.bytes);
          }
          const bool has_raw = raw && raw_fits && perf::raw_supports(comm->backend(), op, dtype, redop);
          if (has_raw)
            for (int i = 0; i < warmup; ++i) raw->run(op, c.dtype, c.redop, c.root, b.send, b.recv, c.per_rank);
          Timing tessera_timing, raw_timing;
          // Alternate which goes first, so neither always inherits the other's cache/scheduler state.
          for (int round = 0; round < rounds; ++round) {
            auto tessera_batch = [&] {
              tessera_timing.keep_best(time_batch(sync, iters,
                                                  [&] {
                                                    if (noise_floor && has_raw)
                                                      raw->run(op, c.dtype, c.redop, c.root, b.send, b.recv,
                                                               c.per_rank);
                                                    else
                                                      run_tessera(*comm, c, b);
                                                  }),
                                       average);
            };
            auto raw_batch = [&] {
              if (has_raw)
                raw_timing.keep_best(
                    time_batch(sync, iters,
                               [&] { raw->run(op, c.dtype, c.redop, c.root, b.send, b.recv, c.per_rank); }),
                    average);
            };
            if (round % 2 == 0) {
              tessera_batch();
              raw_batch();
            } else {
              raw_batch();
              tessera_batch();
            }
          }
          const double t = tessera_timing.time, t_raw = raw_timing.time;
          // busbw is algbw times the share of the data that crosses the bus, which is 0 on one
          // rank; Tessera / raw is the ratio of their times (the same as of their busbw).
          const bool has_bus = p > 1;
          const double algbw = static_cast<double>(c.bytes) / t / 1e9;
          const double busbw = algbw * bus_factor(op, p);
          const double raw_busbw = has_raw ? static_cast<double>(c.bytes) / t_raw / 1e9 * bus_factor(op, p) : 0.0;
          const double ratio = has_raw ? t_raw / t : 0.0;
          const bool row_below = min_busbw && busbw < *min_busbw,
                     row_below_ratio = min_ratio && has_raw && ratio < *min_ratio;
          below = below || row_below;
          below_ratio = below_ratio || row_below_ratio;
          if (row_below || row_below_ratio) {
            char text[160];
            std::snprintf(text, sizeof text, "%s %s %zu B: %s %.3f%s", comm::backend_name(comm->backend()), op.c_str(),
                          c.bytes, row_below ? "busbw" : "Tessera/raw", row_below ? busbw : ratio,
                          row_below ? " GB/s" : "");
            misses.emplace_back(text);
          }
          if (leader) {
            auto gbps = [&](double v, int width) {
              char text[32];
              if (has_bus)
                std::snprintf(text, sizeof text, "%*.2f", width, v);
              else
                std::snprintf(text, sizeof text, "%*s", width, "-");
              return std::string(text);
            };
            std::string raw_cols = "       n/a       n/a      n/a";
            if (has_raw) {
              char text[32];
              std::snprintf(text, sizeof text, "%10.2f", t_raw * 1e6);
              char tail[16];
              std::snprintf(tail, sizeof tail, " %8.3f", ratio);
              raw_cols = text + (" " + gbps(raw_busbw, 9)) + tail;
            }
            // -c 0 checked nothing: N/A, as nccl-tests prints, not a count of 0.
            const std::string wrong_col = check_flag ? std::to_string(wrong) : "N/A";
            std::printf("  %12zu %12zu %9s %6s %10.2f %8.2f %s %7s %s\n", c.bytes, c.count, tessera::dtype_name(dtype),
                        reduces(op) ? comm::reduce_op_name(redop) : "none", t * 1e6, algbw, gbps(busbw, 8).c_str(),
                        wrong_col.c_str(), raw_cols.c_str());
            std::fflush(stdout);
          }
          nlohmann::json row = {
              {"op", op},
              {"backend", comm::backend_name(comm->backend())},
              {"dtype", tessera::dtype_name(dtype)},
              {"redop", reduces(op) ? comm::reduce_op_name(redop) : "none"},
              {"bytes", c.bytes},
              {"count", c.count},
              {"time_us", t * 1e6},
              {"average", kAverageNames[average]},
              {"rank_time_us", microseconds(tessera_timing.per_rank)},
              {"root", c.root},
              {"algbw_gbps", algbw},
              {"busbw_gbps", has_bus ? nlohmann::json(busbw) : nlohmann::json(nullptr)},
              {"raw_busbw_gbps", has_raw && has_bus ? nlohmann::json(raw_busbw) : nlohmann::json(nullptr)},
              {"raw_time_us", has_raw ? nlohmann::json(t_raw * 1e6) : nlohmann::json(nullptr)},
              {"raw_rank_time_us", has_raw ? microseconds(raw_timing.per_rank) : nlohmann::json(nullptr)},
              {"tessera_over_raw", has_raw ? nlohmann::json(ratio) : nlohmann::json(nullptr)},
              {"wrong", check_flag ? nlohmann::json(wrong) : nlohmann::json(nullptr)},
              {"noise_floor", noise_floor}};
          out["results"].push_back(row);
          if (step > 0 ? step > hi - bytes : bytes > hi / static_cast<std::size_t>(factor)) break;  // no overflow
        }
      }
    }
    MPI_Comm_free(&sync);
    if (leader) {
      if (!json_path.empty()) {
        apps::OutputFile file(json_flag, json_path);
        file.stream() << out.dump(2) << "\n";
        file.commit();
        std::printf("# results written to %s\n", json_path.c_str());
      }
      if (total_wrong > 0) std::printf("# %zu WRONG elements: results are incorrect\n", total_wrong);
      if (below) std::printf("# busbw below --min-busbw %.3f GB/s in at least one row\n", *min_busbw);
      if (below_ratio) std::printf("# Tessera/raw below --min-ratio %.3f in at least one row\n", *min_ratio);
      for (const auto& miss : misses) std::printf("#   below: %s\n", miss.c_str());
    }
    return (total_wrong > 0 || below || below_ratio) ? 1 : 0;
  });
}
