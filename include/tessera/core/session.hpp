#pragma once
/// \file
/// tessera::Session: the RAII owner of MPI and Kokkos for one process.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

/// Initialises MPI (thread level MPI_THREAD_MULTIPLE, errors returned rather than fatal)
/// and then Kokkos, and finalises them in reverse order. Exactly one Session may be alive
/// per process. Works under mpiexec/srun with any number of ranks and as a plain process
/// (one rank). MPI or Kokkos already initialised by the caller are used as they are and
/// left for the caller to finalise.
class Session {
 public:
  /// Starts MPI and Kokkos; Kokkos sees the command line (e.g. --kokkos-num-threads).
  Session(int& argc, char**& argv);
  /// Starts MPI and Kokkos with no command line.
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// This process's rank in MPI_COMM_WORLD.
  int rank() const noexcept { return rank_; }
  /// Number of ranks in MPI_COMM_WORLD.
  int size() const noexcept { return size_; }
  /// Number of ranks of this job on this rank's node (they share its cores and GPUs).
  int local_size() const noexcept { return local_size_; }
  /// This rank's index among them.
  int local_rank() const noexcept { return local_rank_; }
  /// The cores this rank may run on: those it is bound to, at most its share of the node's
  /// (the node's cores / local_size()), at least 1.
  int cores() const noexcept { return cores_; }
  /// Ranks of this job on this node that use this rank's GPU, itself included (GPUs told
  /// apart by PCI bus id, so also when each rank sees only its own through
  /// CUDA_VISIBLE_DEVICES); 0 when data lives in host memory or the GPU could not be asked.
  int ranks_on_gpu() const noexcept { return ranks_on_gpu_; }
  /// This rank's GPU as CUDA numbers it here (after CUDA_VISIBLE_DEVICES), or -1 when data
  /// lives in host memory.
  int gpu_id() const noexcept { return gpu_id_; }
  /// Its product name ("NVIDIA H100 80GB HBM3"); empty when data lives in host memory or the
  /// GPU could not be asked.
  const std::string& gpu_name() const noexcept { return gpu_name_; }
  /// "GPU 0 (NVIDIA H100 80GB HBM3)", or empty when data lives in host memory.
  std::string gpu() const;
  /// True when the MPI library reports CUDA-aware support (probed at start).
  bool cuda_aware_mpi() const noexcept { return cuda_aware_mpi_; }

  /// Collective with a deadline: waits until every rank has called it, or `wait` passes.
  /// True on every rank when every rank came in time. (An app uses it to tell an error that
  /// every rank met, after which all can end normally, from one that some ranks met alone.)
  bool all_arrive_within(std::chrono::milliseconds wait);

  /// What the ranks said: one text and the ranks that gave it ("1", "0, 2-5"). Texts that
  /// differ only in their numbers are one, in the words of its lowest rank.
  struct RankText {
    std::string text;
    std::vector<int> ranks;
    std::string ranks_text;
    bool same_words = true;  ///< false: some of the ranks gave other numbers
  };
  /// all_arrive_within, with each rank's `text` (an app's error) brought to rank 0. Nullopt
  /// when some rank did not come within `wait` (each rank keeps its own deadline: a rank that
  /// came last, near another's deadline, may see all arrive where that one did not; the app
  /// then aborts the job either way). Otherwise rank 0 gets each
  /// distinct text with the ranks that gave it, those given by the fewest ranks first (most
  /// often the failure one rank met, before its peers met its consequences), then by lowest
  /// rank, and the other ranks an empty list. Texts are cut to 4 KiB; the texts of ranks that
  /// have not sent theirs within another `wait` are left out.
  std::optional<std::vector<RankText>> gather_texts_within(const std::string& text, std::chrono::milliseconds wait);

  /// True while a Session is alive.
  static bool active() noexcept;
  /// The live Session; throws tessera::Error when there is none.
  static Session& current();

  /// Runs fn just before MPI is finalised (used by layers above core to release MPI
  /// resources in order). Callbacks run in reverse order of registration.
  static void at_finalize(std::function<void()> fn);

 private:
  void start(int* argc, char*** argv);
  void start_runtimes(int* argc, char*** argv);
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int cores_ = 1;
  int ranks_on_gpu_ = 0;
  int gpu_id_ = -1;
  std::string gpu_name_;
  bool cuda_aware_mpi_ = false;
};

}  // namespace tessera
