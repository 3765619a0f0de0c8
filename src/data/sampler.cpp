#include <tessera/core/error.hpp>
#include <tessera/core/rng.hpp>
#include <tessera/data/dataset.hpp>

#include <numeric>

namespace tessera::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, std::int64_t global_batch, int rank, int ranks,
                                       std::uint64_t seed)
    : size_(dataset_size), global_batch_(global_batch), rank_(rank), ranks_(ranks), seed_(seed) {
  // (rank, ranks) given the other way round, (comm.size(), comm.rank()), would divide by 0 on
  // rank 0 and hand every other rank another's samples.
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw ConfigError("DistributedSampler: rank " + std::to_string(rank) + " is not a rank of " +
                      std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
                      "; give (..., comm.rank(), comm.size(), seed), in that order");
  if (global_batch <= 0) throw ConfigError("the global batch must be >= 1 (got " + std::to_string(global_batch) + ")");
  if (global_batch % ranks != 0)
    throw ConfigError("a global batch of " + std::to_string(global_batch) + " does not divide across " +
                      std::to_string(ranks) + " data-parallel ranks; choose a multiple of " + std::to_string(ranks));
  if (dataset_size < global_batch)
    throw ConfigError("the dataset has " + std::to_string(dataset_size) + (dataset_size == 1 ? " sample" : " samples") +
                      ", fewer than one global batch of " + std::to_string(global_batch));
  local_.resize(static_cast<std::size_t>(global_batch / ranks));
}

void DistributedSampler::shuffle() {
  // Fisher-Yates driven by Philox on (seed, epoch): the same order on every rank.
  order_.resize(static_cast<std::size_t>(size_));
  std::iota(order_.begin(), order_.end(), 0);
  const std::uint64_t key = stream_key(seed_, "sampler.epoch." + std::to_string(state_.epoch));
  for (std::int64_t i = size_ - 1; i > 0; --i) {
    const auto r = Philox4x32::generate(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), 2u, 0u,
                                        static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
    const std::uint64_t wide = (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
    const auto j = static_cast<std::int64_t>(wide % static_cast<std::uint64_t>(i + 1));
    std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
  }
  shuffled_epoch_ = state_.epoch;
}

const std::vector<std::int64_t>& DistributedSampler::next() {
  if (state_.batch >= batches_per_epoch()) {
    ++state_.epoch;
    state_.batch = 0;
  }
  if (shuffled_epoch_ != state_.epoch) shuffle();
  const std::int64_t local = global_batch_ / ranks_;
  const std::int64_t begin = state_.batch * global_batch_ + rank_ * local;
  for (std::int64_t i = 0; i < local; ++i)
    local_[static_cast<std::size_t>(i)] = order_[static_cast<std::size_t>(begin + i)];
  ++state_.batch;
  return local_;
}

void DistributedSampler::restore(State s) {
  if (s.epoch < 0 || s.batch < 0 || s.batch > batches_per_epoch())
    throw ConfigError("sampler state (epoch " + std::to_string(s.epoch) + ", batch " + std::to_string(s.batch) +
                      ") is out of range for " + std::to_string(batches_per_epoch()) + " batches per epoch");
  state_ = s;
}

}  // namespace tessera::data
