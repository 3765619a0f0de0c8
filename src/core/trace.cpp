#include <tessera/core/trace.hpp>

#include <atomic>
#include <mutex>

namespace tessera::trace {
namespace {
std::atomic<bool> on{false};
std::mutex mutex;
std::vector<Event> events;
Clock::time_point origin;

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
}  // namespace

bool enabled() noexcept { return on.load(std::memory_order_relaxed); }

void start() {
  std::lock_guard<std::mutex> lock(mutex);
  events.clear();
  origin = Clock::now();
  on.store(true);
}

std::vector<Event> stop() {
  on.store(false);
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<Event> out;
  out.swap(events);
  return out;
}

void record(const char* category, std::string name, std::string track, Clock::time_point begin, Clock::time_point end) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mutex);
  events.push_back({std::move(name), category, std::move(track), us(begin - origin), us(end - begin)});
}

}  // namespace tessera::trace
