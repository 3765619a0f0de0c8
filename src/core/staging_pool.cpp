#include <algorithm>

#include "core/device_copy.hpp"

namespace tessera::detail {

void StagingPool::Return::operator()(Staging* s) const noexcept {
  if (pool != nullptr)
    pool->give_back(s);
  else
    delete s;
}

StagingPool::Lease StagingPool::take(MemoryKind kind, std::size_t bytes) {
  std::unique_ptr<Staging> chosen;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    // A buffer that fits beats one that must grow; among those that fit the smallest, among
    // the others the largest (the least to add).
    auto better = [bytes](const Staging& a, const Staging& b) {
      const bool a_fits = a.capacity() >= bytes, b_fits = b.capacity() >= bytes;
      if (a_fits != b_fits) return a_fits;
      return a_fits ? a.capacity() < b.capacity() : a.capacity() > b.capacity();
    };
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if ((*it)->kind() == kind && (best == idle_.end() || better(**it, **best))) best = it;
    if (best != idle_.end()) {
      chosen = std::move(*best);
      idle_.erase(best);
    }
  }
  if (!chosen) chosen = std::make_unique<Staging>(kind);
  chosen->reserve(bytes);  // outside the lock: allocating can take milliseconds
  return Lease(chosen.release(), Return{this});
}

std::size_t StagingPool::idle(MemoryKind kind) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<std::size_t>(
      std::count_if(idle_.begin(), idle_.end(), [&](const auto& s) { return s->kind() == kind; }));
}

void StagingPool::give_back(Staging* s) noexcept {
  std::unique_ptr<Staging> owned(s);
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto same_kind =
      std::count_if(idle_.begin(), idle_.end(), [&](const auto& b) { return b->kind() == s->kind(); });
  if (static_cast<std::size_t>(same_kind) >= keep_) return;  // freed here
  try {
    idle_.push_back(std::move(owned));
  } catch (...) {
    // No room to keep it: free it instead.
  }
}

}  // namespace tessera::detail
