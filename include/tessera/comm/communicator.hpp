#pragma once
/// \file
/// tessera::comm::Communicator: every collective and point-to-point operation, blocking
/// and asynchronous, over MPI, Gloo or NCCL.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tessera/comm/types.hpp>
#include <tessera/comm/work.hpp>

namespace tessera::comm {
namespace detail {
class Backend;
class CommState;
struct Op;
}  // namespace detail

/// A group of ranks and the backend that moves data between them.
///
/// Every operation is collective over the communicator (except send/recv) and must be
/// called by all its ranks in the same order. Each blocking call X has an asynchronous
/// twin X_async returning a Work handle. A communicator is driven by one thread at a time.
///
/// Element counts follow the inputs: for all_gather, `send` holds n elements and `recv`
/// needs size()*n; for reduce_scatter and all_to_all, `send` holds size()*n; for scatter,
/// `recv` holds n and the root's `send` needs size()*n. Outputs may be larger than needed,
/// never smaller. Allowed in-place forms: `send == recv` (all_reduce, reduce, broadcast has
/// one buffer), all_gather with `send == recv + rank*n`, reduce_scatter with
/// `recv == send + rank*n`, gather with `send == recv + root*n` at the root, scatter with
/// `recv == send + root*n` at the root. Any other overlap is an error.
class Communicator {
 public:
  /// A communicator over all ranks of MPI_COMM_WORLD (collective; needs a live Session).
  static std::unique_ptr<Communicator> create(Backend backend = Backend::Auto,
                                              CommOptions options = CommOptions::from_env());
  /// Runs the collectives still queued first, each within its own limit (their buffers must
  /// live until then); stops the receives still posted. Wait for every Work first.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  /// The concrete backend (never Auto).
  Backend backend() const noexcept;
  const std::string& name() const noexcept;
  /// The world rank of this communicator's rank r.
  int world_rank(int r) const;

  std::chrono::milliseconds timeout() const noexcept;
  /// Changes the limit of the ops issued after it (zero: wait forever); an op issued before,
  /// queued or running, keeps the limit it was issued with.
  void set_timeout(std::chrono::milliseconds timeout);
  bool check_enabled() const noexcept;
  /// Turns the cross-rank op comparison on or off. Collective: every rank calls it, with the
  /// same value; ranks that differ each get a MismatchError that names them, and the mode
  /// stays as it was.
  void set_check(bool enabled);
  /// Number of operations issued so far (the next op's sequence number).
  std::uint64_t ops_issued() const noexcept;
  /// Bytes this rank has sent so far, as modelled: each op counts what one rank sends, on
  /// average over the ranks, on a bandwidth-optimal schedule (a ring for all_reduce, which
  /// sends 2(n-1)/n of the buffer, and for all_gather, reduce_scatter and all_to_all, (n-1)/n
  /// of the whole; a pipelined chain for broadcast and reduce, (n-1)/n of the buffer). It
  /// counts ops as issued, not what the backend's own algorithm puts on the wire. Strategies
  /// compare their traffic with it (ZeRO stage 3 sends 1.5 x what DDP sends).
  double bytes_sent() const noexcept;
  /// False after a failure (timeout, mismatch, backend error); every later op then throws.
  bool usable() const noexcept;

  /// Splits into groups of ranks sharing `color`, ordered by (`key`, rank). A negative color
  /// leaves this rank out: it gets nullptr. Collective over this communicator. The child
  /// uses the same backend and options, with `name` (default: "<parent>.<color>").
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name = "");

  // -- blocking operations -------------------------------------------------------------
  void broadcast(Buffer buffer, int root);
  void scatter(Buffer send, Buffer recv, int root);
  void gather(Buffer send, Buffer recv, int root);
  void reduce(Buffer send, Buffer recv, ReduceOp op, int root);
  void all_reduce(Buffer send, Buffer recv, ReduceOp op = ReduceOp::Sum);
  /// In place: buffer is both input and output.
  void all_reduce(Buffer buffer, ReduceOp op = ReduceOp::Sum);
  void all_gather(Buffer send, Buffer recv);
  void reduce_scatter(Buffer send, Buffer recv, ReduceOp op = ReduceOp::Sum);
  void all_to_all(Buffer send, Buffer recv);
  void barrier();
  /// Sends buffer to rank `peer`; matched by a recv on `peer` with the same tag (>= 0).
  void send(Buffer buffer, int peer, int tag = 0);
  void recv(Buffer buffer, int peer, int tag = 0);

  // -- asynchronous operations -----------------------------------------------------------
  Work broadcast_async(Buffer buffer, int root);
  Work scatter_async(Buffer send, Buffer recv, int root);
  Work gather_async(Buffer send, Buffer recv, int root);
  Work reduce_async(Buffer send, Buffer recv, ReduceOp op, int root);
  Work all_reduce_async(Buffer send, Buffer recv, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(Buffer buffer, ReduceOp op = ReduceOp::Sum);
  Work all_gather_async(Buffer send, Buffer recv);
  Work reduce_scatter_async(Buffer send, Buffer recv, ReduceOp op = ReduceOp::Sum);
  Work all_to_all_async(Buffer send, Buffer recv);
  Work barrier_async();
  Work send_async(Buffer buffer, int peer, int tag = 0);
  Work recv_async(Buffer buffer, int peer, int tag = 0);

  /// Internal: the backend object (for Tessera's own benchmarks and tests).
  detail::Backend& backend_impl() noexcept;

  /// Internal: used by backends' factories.
  Communicator(std::unique_ptr<detail::Backend> backend, CommOptions options, std::string path);

 private:
  Work submit(detail::Op op, bool async);
  Work submit_transfer(detail::Op op, bool async);
  std::unique_ptr<detail::CommState> state_;
};

}  // namespace tessera::comm
