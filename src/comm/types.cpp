#include <tessera/comm/types.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <thread>

#include "comm/backend.hpp"
#include "core/mpi_check.hpp"
#include "core/mpi_fence.hpp"

namespace tessera::comm {
namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

const char* backend_name(Backend backend) noexcept {
  switch (backend) {
    case Backend::Auto:
      return "auto";
    case Backend::Mpi:
      return "mpi";
    case Backend::Gloo:
      return "gloo";
    case Backend::Nccl:
      return "nccl";
  }
  return "unknown";
}

Backend parse_backend(const std::string& name) {
  const std::string s = lower(name);
  if (s == "auto") return Backend::Auto;
  if (s == "mpi") return Backend::Mpi;
  if (s == "gloo") return Backend::Gloo;
  if (s == "nccl") return Backend::Nccl;
  throw ConfigError("unknown communication backend '" + name + "'; use auto, mpi, gloo or nccl");
}

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
  }
  return "unknown";
}

ReduceOp parse_reduce_op(const std::string& name) {
  const std::string s = lower(name);
  if (s == "sum") return ReduceOp::Sum;
  if (s == "prod" || s == "product") return ReduceOp::Prod;
  if (s == "min") return ReduceOp::Min;
  if (s == "max") return ReduceOp::Max;
  if (s == "avg" || s == "mean") return ReduceOp::Avg;
  throw ConfigError("unknown reduce op '" + name + "'; use sum, prod, min, max or avg");
}

std::chrono::milliseconds CommOptions::timeout_from_seconds(double seconds, const std::string& given) {
  const std::string what = given.empty() ? "a timeout of " + std::to_string(seconds) + " s" : given;
  if (!std::isfinite(seconds) || seconds < 0)
    throw ConfigError(what + " is not a number of seconds >= 0 (0 disables the timeout)");
  if (seconds > 3.0e7) throw ConfigError(what + " is more than a year; use 0 to wait forever");
  // 0.0001 s was kept as 1 ms without a word: the limit is kept to the millisecond.
  if (seconds > 0 && seconds < 0.001)
    throw ConfigError(what +
                      " is less than a millisecond, finer than a timeout is kept; give at least 0.001, or "
                      "0 to wait forever");
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000)));
}

std::chrono::milliseconds CommOptions::set_up_limit() const noexcept {
  if (set_up_timeout.count() > 0) return set_up_timeout;
  if (timeout.count() <= 0) return std::chrono::milliseconds(0);
  return std::max<std::chrono::milliseconds>(2 * timeout, std::chrono::minutes(5));
}

namespace {
/// The environment variable `name` as a number of seconds >= 0, where it is set; `zero` says
/// what 0 means, `forever` how to wait forever.
std::optional<std::chrono::milliseconds> seconds_from_env(const char* name, const char* zero, const char* forever) {
  const char* t = std::getenv(name);
  if (t == nullptr || *t == '\0') return std::nullopt;
  char* end = nullptr;
  const double seconds = std::strtod(t, &end);
  if (end == t || *end != '\0' || !std::isfinite(seconds) || seconds < 0)
    throw ConfigError(std::string(name) + "='" + t + "' is not a number of seconds >= 0 (0 " + zero + ")");
  if (seconds > 3.0e7) throw ConfigError(std::string(name) + "='" + t + "' is more than a year; " + forever);
  return CommOptions::timeout_from_seconds(seconds, std::string(name) + "='" + t + "'");
}
}  // namespace

CommOptions CommOptions::from_env() {
  CommOptions options;
  if (const auto t = seconds_from_env("TESSERA_COMM_TIMEOUT", "disables the timeout", "use 0 to wait forever"))
    options.timeout = *t;
  if (const auto t =
          seconds_from_env("TESSERA_COMM_SETUP_TIMEOUT", "takes twice TESSERA_COMM_TIMEOUT, at least 5 minutes",
                           "TESSERA_COMM_TIMEOUT=0 waits forever"))
    options.set_up_timeout = *t;
  if (const char* c = std::getenv("TESSERA_COMM_CHECK"); c != nullptr && *c != '\0') {
    const std::string v = lower(c);
    if (v == "1" || v == "on" || v == "true" || v == "yes") {
      options.check = true;
    } else if (v == "0" || v == "off" || v == "false" || v == "no") {
      options.check = false;
    } else {
      throw ConfigError(std::string("TESSERA_COMM_CHECK='") + c + "' must be 0 or 1 (or off/on, false/true, no/yes)");
    }
  }
  return options;
}

namespace detail {

const char* op_name(OpType type) noexcept {
  switch (type) {
    case OpType::Broadcast:
      return "broadcast";
    case OpType::Scatter:
      return "scatter";
    case OpType::Gather:
      return "gather";
    case OpType::Reduce:
      return "reduce";
    case OpType::AllReduce:
      return "all_reduce";
    case OpType::AllGather:
      return "all_gather";
    case OpType::ReduceScatter:
      return "reduce_scatter";
    case OpType::AllToAll:
      return "all_to_all";
    case OpType::Barrier:
      return "barrier";
    case OpType::Send:
      return "send";
    case OpType::Recv:
      return "recv";
    case OpType::Split:
      return "split";
  }
  return "unknown";
}

std::string describe(const Op& op) {
  std::string s = op_name(op.type);
  if (op.type == OpType::Barrier || op.type == OpType::Split) return s;
  s += " (" + std::to_string(op.count) + " x " + dtype_name(op.dtype);
  if (is_reduction(op.type)) s += std::string(", ") + reduce_op_name(op.reduce);
  if (op.type == OpType::Broadcast || op.type == OpType::Scatter || op.type == OpType::Gather ||
      op.type == OpType::Reduce)
    s += ", root " + std::to_string(op.root);
  if (op.type == OpType::Send) s += ", to rank " + std::to_string(op.peer) + ", tag " + std::to_string(op.tag);
  if (op.type == OpType::Recv) s += ", from rank " + std::to_string(op.peer) + ", tag " + std::to_string(op.tag);
  return s + ")";
}

std::chrono::milliseconds Deadline::remaining() const noexcept {
  if (none) return std::chrono::hours(24 * 365);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

void wait_mpi_all(MPI_Request* requests, int count, const Deadline& deadline, const char* what) {
  if (!tessera::detail::wait_all_until(requests, count, deadline.at, deadline.none)) throw DeadlineExceeded{what};
}

void wait_mpi(MPI_Request& request, const Deadline& deadline, const char* what) {
  wait_mpi_all(&request, 1, deadline, what);
}

int wait_mpi_status(MPI_Request& request, const Deadline& deadline, const char* what, MPI_Status& status) {
  int code = MPI_SUCCESS;
  if (!tessera::detail::wait_all_until(&request, 1, deadline.at, deadline.none, &status, &code))
    throw DeadlineExceeded{what};
  return code;
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::BFloat16:
    case DType::Float16:
      return MPI_UINT16_T;
  }
  throw ConfigError(std::string("no MPI datatype for ") + dtype_name(dtype));
}

}  // namespace detail
}  // namespace tessera::comm
