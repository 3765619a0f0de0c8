#pragma once
/// \file
/// Vocabulary of the communication layer: backends, reduce ops, buffers, options.

#include <chrono>
#include <cstddef>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include <tessera/core/dtype.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/memory.hpp>

namespace tessera::comm {

/// Which library moves the data.
enum class Backend {
  Auto,  ///< NCCL when it is compiled in, the default memory space is a GPU's and every rank
         ///< has a GPU of its own; MPI otherwise
  Mpi,   ///< MPI (host memory; device memory directly if CUDA-aware, else staged)
  Gloo,  ///< Gloo over TCP, bootstrapped from MPI (host memory; device memory staged)
  Nccl,  ///< NCCL (device memory; host memory staged), bootstrapped from MPI; one GPU per rank
};
/// "mpi", "gloo", "nccl", "auto".
const char* backend_name(Backend backend) noexcept;
/// Parses a backend name; throws ConfigError for anything else.
Backend parse_backend(const std::string& name);
/// True when the backend was compiled into this build (Auto and Mpi always are).
bool backend_compiled(Backend backend) noexcept;

/// Reduction applied element-wise across ranks.
enum class ReduceOp { Sum, Prod, Min, Max, Avg };
/// "sum", "prod", "min", "max", "avg".
const char* reduce_op_name(ReduceOp op) noexcept;
/// Parses a reduce op name; throws ConfigError for anything else.
ReduceOp parse_reduce_op(const std::string& name);

/// A typed span of memory handed to a collective: pointer, element count (its capacity),
/// dtype, and where it lives. Built implicitly from a contiguous Kokkos view, or from a
/// pointer and a count.
struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::Float32;
  MemoryKind memory = MemoryKind::Host;
  /// Host-readable memory that kernels of the default execution space can write too (a view
  /// in Kokkos::CudaUVMSpace or CudaHostPinnedSpace): the communicator waits for those
  /// kernels before it reads it, as for device memory.
  bool device_written = false;

  Buffer() = default;
  /// Fully explicit form, for type-erased callers.
  Buffer(void* ptr, std::size_t n, DType type, MemoryKind where) : data(ptr), count(n), dtype(type), memory(where) {}
  /// Pointer and element count; the memory kind is asked of the CUDA runtime when present.
  template <class T, std::enable_if_t<is_dtype<std::remove_const_t<T>>::value, int> = 0>
  Buffer(T* ptr, std::size_t n)
      : data(const_cast<std::remove_const_t<T>*>(ptr)),
        count(n),
        dtype(dtype_of<std::remove_const_t<T>>::value),
        memory(memory_kind_of(ptr)) {}
  /// Any contiguous Kokkos view of a supported element type; its memory space picks the path.
  template <class... P>
  Buffer(const Kokkos::View<P...>& view)  // NOLINT(google-explicit-constructor)
      : data(const_cast<typename Kokkos::View<P...>::non_const_value_type*>(view.data())),
        count(view.size()),
        dtype(dtype_of<typename Kokkos::View<P...>::non_const_value_type>::value),
        memory(memory_kind_of_space<typename Kokkos::View<P...>::memory_space>()),
        device_written(memory == MemoryKind::Host && memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device &&
                       Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace,
                                                  typename Kokkos::View<P...>::memory_space>::accessible) {
    static_assert(is_dtype<typename Kokkos::View<P...>::non_const_value_type>::value,
                  "tessera::comm::Buffer: view element type must be float, double, int32_t, "
                  "int64_t, tessera::bfloat16 or tessera::float16");
    if (!view.span_is_contiguous())
      throw ConfigError("tessera::comm::Buffer: view '" + view.label() +
                        "' is not contiguous; communicate a contiguous copy or subview");
  }
  /// Size in bytes of count elements.
  std::size_t bytes() const noexcept { return count * dtype_size(dtype); }
};

/// Per-communicator settings. Defaults come from the environment (see from_env()).
struct CommOptions {
  /// Deadline of every blocking wait; zero disables it. Env: TESSERA_COMM_TIMEOUT (seconds).
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  /// Limit of a communicator's set-up (its backend's, after every rank came to the create or
  /// split: NCCL's ncclCommInitRank, Gloo's connections), which no library call of it can
  /// interrupt, so the process ends past it with a diagnosis; zero (the default): twice
  /// `timeout`, and at least 5 minutes (none where `timeout` is zero). set_up_limit() says
  /// which applies. Env: TESSERA_COMM_SETUP_TIMEOUT (seconds).
  std::chrono::milliseconds set_up_timeout{0};
  /// Ranks compare (op, count, dtype, root) before moving data. Env: TESSERA_COMM_CHECK=1.
  bool check = false;
  /// Name shown in errors and traces; an empty one reads "(unnamed)".
  std::string name = "world";
  /// What a timeout's message names as the setting of `timeout` ("... sets the limit in
  /// seconds"): the environment variable by default. A program that sets `timeout` from a
  /// flag of its own names that flag ("-T"), so that the message points at what set it.
  std::string timeout_setting = "TESSERA_COMM_TIMEOUT";
  /// Reads TESSERA_COMM_TIMEOUT, TESSERA_COMM_SETUP_TIMEOUT and TESSERA_COMM_CHECK; throws
  /// ConfigError on bad values.
  static CommOptions from_env();
  /// The limit of a communicator's set-up (see set_up_timeout); zero: none.
  std::chrono::milliseconds set_up_limit() const noexcept;
  /// A limit of `seconds` as a timeout, to the nearest millisecond; 0 disables it. Throws
  /// ConfigError for a value below 0, above a year, or between 0 and a millisecond (finer
  /// than a limit is kept); the message starts with `given`, the setting as the user gave it
  /// ("TESSERA_COMM_TIMEOUT='0.0001'", "-T 0.0001"), where there is one.
  static std::chrono::milliseconds timeout_from_seconds(double seconds, const std::string& given = "");
};

}  // namespace tessera::comm
