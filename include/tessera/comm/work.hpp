#pragma once
/// \file
/// tessera::comm::Work: the handle of an asynchronous operation.

#include <memory>

namespace tessera::comm {
namespace detail {
struct WorkState;
}

/// Handle to an operation started with one of the *_async calls. The operation's buffers
/// must stay alive and untouched until wait() returns or test() returns true. Several
/// handles may be in flight on one communicator: collectives run in the order they were
/// started, on the communicator's progress thread; sends and receives are posted at once
/// and complete independently of the collectives. Destroying an unfinished handle does not
/// cancel the operation.
class Work {
 public:
  /// An empty handle, already complete.
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  /// Blocks until the operation completes. Throws what the operation raised (CommError,
  /// TimeoutError after the communicator's timeout, MismatchError in check mode).
  void wait();
  /// Returns immediately: true once the operation has completed (throws if it failed).
  /// It never drives progress itself; the communicator's progress thread does.
  bool test();

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace tessera::comm
