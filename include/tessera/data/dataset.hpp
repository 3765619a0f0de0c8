#pragma once
/// \file
/// Supervised datasets and the deterministic distributed sampler.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tessera/core/memory.hpp>

namespace tessera::data {

/// N samples: inputs [N, input_dim] float32, and either targets [N, target_dim] float32
/// (regression, mean squared error) or labels [N] int64 (classification, cross-entropy).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const noexcept = 0;
  virtual std::size_t input_dim() const noexcept = 0;
  /// Target features, or 0 when the dataset has labels.
  virtual std::size_t target_dim() const noexcept = 0;
  bool has_labels() const noexcept { return target_dim() == 0; }
  /// Number of classes for labelled data (max label + 1), 0 otherwise.
  virtual std::int64_t classes() const noexcept { return 0; }
  /// Where the largest label is (e.g. "/labels row 7 holds label 9"), for messages about
  /// the number of classes; empty when the dataset cannot say.
  virtual std::string top_label() const { return {}; }
  /// Fills row r of `inputs` and of `targets` or `labels` with sample indices[r]. Throws
  /// ConfigError, before reading anything, for an index outside [0, size()) or a view of
  /// other columns than the dataset's or fewer rows than `indices` (a view too narrow was
  /// written past its end, one too wide filled with rows out of line). Rows past the last
  /// sample are left as they were, in host and device memory alike.
  void load(const std::vector<std::int64_t>& indices, const View2D<float>& inputs, const View2D<float>& targets,
            const View1D<std::int64_t>& labels);
  virtual std::string describe() const = 0;

 protected:
  /// load() for arguments it has checked, with views of exactly indices.size() rows (those
  /// of the other kind, targets or labels, empty): what each dataset implements.
  virtual void read(const std::vector<std::int64_t>& indices, const View2D<float>& inputs, const View2D<float>& targets,
                    const View1D<std::int64_t>& labels) = 0;
};

/// The default task: inputs x drawn from N(0, 1) by (seed, global sample index), targets
/// y = teacher(x) for a fixed random teacher MLP of `teacher_layers` layers of width `dim`
/// (initialised from the seed like the student, from another stream). Needs no files; a
/// student MLP learns it. The set is generated once, at construction.
std::unique_ptr<Dataset> make_teacher_student(std::int64_t samples, std::size_t dim, std::size_t teacher_layers,
                                              std::uint64_t seed);

/// An HDF5 file with /inputs [N, d_in] float32 and /targets [N, d_out] float32 or
/// /labels [N] int64. Throws ConfigError naming the file and the problem when it is missing
/// or malformed.
std::unique_ptr<Dataset> open_hdf5(const std::string& path);

/// Cuts each global batch across the data-parallel ranks, in a shuffled order drawn anew
/// from the seed every epoch. The same (seed, epoch, position) gives the same batches on
/// any number of ranks: rank r of n takes rows [r*B/n, (r+1)*B/n) of the global batch.
class DistributedSampler {
 public:
  struct State {
    std::int64_t epoch = 0;
    std::int64_t batch = 0;  ///< next batch within the epoch
  };
  DistributedSampler(std::int64_t dataset_size, std::int64_t global_batch, int rank, int ranks, std::uint64_t seed);
  /// This rank's sample indices of the next global batch (global_batch / ranks of them).
  const std::vector<std::int64_t>& next();
  std::int64_t batches_per_epoch() const noexcept { return size_ / global_batch_; }
  State state() const noexcept { return state_; }
  void restore(State s);

 private:
  void shuffle();
  std::int64_t size_, global_batch_;
  int rank_, ranks_;
  std::uint64_t seed_;
  State state_;
  std::int64_t shuffled_epoch_ = -1;
  std::vector<std::int64_t> order_, local_;
};

}  // namespace tessera::data
