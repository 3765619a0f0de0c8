// The Gloo backend: Gloo's algorithms over its TCP transport. The full mesh of TCP pairs is
// set up by exchanging their addresses over the communicator's MPI group, so Gloo needs no
// store or rendezvous server. Gloo's calls take a timeout themselves; the front end's fence
// still comes first, because Gloo aborts the process when ranks disagree about an op.
#include "comm/gloo/gloo_backend.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>
#include <gloo/transport/unbound_buffer.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend.hpp"
#include "core/log.hpp"
#include "core/mpi_check.hpp"

namespace tessera::comm::detail {
namespace {

/// Gloo's collectives take slots counting up from 0; the ring all-reduce's start at 2^41
/// (its step numbers in the low 20 bits); sends and receives take slots from 2^62.
constexpr std::uint64_t kRingSlotBase = 1ull << 41;
constexpr std::uint64_t kP2PSlotBase = 1ull << 62;

/// A send's or receive's slot: its tag (below 2^31) and its size in bytes, folded into 31
/// bits (sizes that differ only above 2 GiB still differ there). Gloo ends the process when
/// a message is larger than the receive posted for it (an exception on its own thread), so
/// the size is part of what matches: a send and a receive of different sizes never meet,
/// and the side that times out first is told the other's size.
std::uint64_t p2p_slot(int tag, std::size_t bytes) {
  constexpr std::uint64_t low31 = (1ull << 31) - 1;
  const std::uint64_t b = bytes;
  const std::uint64_t folded = (b ^ (b >> 31) * 0x9e3779b1u ^ (b >> 62) * 0x85ebca6bu) & low31;
  return kP2PSlotBase | static_cast<std::uint64_t>(tag) << 31 | folded;
}

std::chrono::milliseconds gloo_timeout(std::chrono::milliseconds t) {
  return t.count() > 0 ? t : std::chrono::hours(24 * 365);
}

/// How the TCP device's event-loop thread is scheduled: TESSERA_GLOO_LOOP_SCHED=batch (the
/// default) or normal.
///
/// Why not normal: the loop thread handles a pair's socket only if it can take the pair's
/// lock without waiting; otherwise it returns to epoll_wait, which reports the same socket
/// again at once (level-triggered). The thread that posts a send or receive holds that lock
/// while it writes to the socket. Where the loop thread and the posting thread share a core
/// (one core per rank), data arriving wakes the loop thread, the scheduler lets it preempt
/// the posting thread inside the lock, and the loop thread spins on the lock until the next
/// scheduler tick ends its turn: 4 ms at HZ=250, on every op that waits for a peer. Under
/// SCHED_BATCH a woken thread does not preempt the running one, so the lock holder finishes
/// first. It changes nothing else: the loop thread still gets its fair share of the CPU.
bool loop_thread_batched() {
  const char* text = std::getenv("TESSERA_GLOO_LOOP_SCHED");
  if (text == nullptr || *text == '\0') return true;
  std::string v(text);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "batch") return true;
  if (v == "normal") return false;
  throw ConfigError(std::string("TESSERA_GLOO_LOOP_SCHED='") + text +
                    "' must be batch (the default: Gloo's event-loop thread never preempts the thread that "
                    "posts an op) or normal");
}

/// Runs fn once on the device's event-loop thread: an eventfd registered with the loop, made
/// readable, and waited for.
void run_on_loop_thread(gloo::transport::tcp::Device& device, std::function<void()> fn) {
  struct OnLoop final : gloo::transport::tcp::Handler {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    std::function<void()> fn;
    std::promise<void> ran;
    bool done = false;
    void handleEvents(int) override {
      std::uint64_t value = 0;
      if (::read(fd, &value, sizeof value) != static_cast<ssize_t>(sizeof value) || done) return;
      done = true;
      fn();
      ran.set_value();
    }
  } on_loop;
  if (on_loop.fd < 0) throw CommError(std::string("gloo: eventfd failed: ") + std::strerror(errno));
  on_loop.fn = std::move(fn);
  auto ran = on_loop.ran.get_future();
  device.registerDescriptor(on_loop.fd, EPOLLIN, &on_loop);
  const std::uint64_t one = 1;
  const bool written = ::write(on_loop.fd, &one, sizeof one) == static_cast<ssize_t>(sizeof one);
  // The loop ticks every 10 ms at most; a loop that does not answer in 10 s is not running.
  const bool answered = written && ran.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  device.unregisterDescriptor(on_loop.fd, &on_loop);  // waits for the loop's tick: no call after this
  ::close(on_loop.fd);
  if (!answered) throw CommError("gloo: the TCP device's event loop did not answer within 10 s");
}

/// The network interfaces of this host that have an IP address (what Gloo looks a name up
/// among), each once; empty if they cannot be listed.
std::vector<std::string> interfaces_with_an_address() {
  std::vector<std::string> names;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return names;
  for (const ifaddrs* a = all; a != nullptr; a = a->ifa_next)
    if (a->ifa_addr != nullptr && (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6) &&
        std::find(names.begin(), names.end(), a->ifa_name) == names.end())
      names.emplace_back(a->ifa_name);
  freeifaddrs(all);
  return names;
}

/// One TCP device per process, shared by every Gloo communicator. Its address comes from
/// TESSERA_GLOO_IFNAME (a network interface) or TESSERA_GLOO_HOSTNAME, else the host name.
std::shared_ptr<gloo::transport::Device> tcp_device() {
  static std::mutex mutex;
  static std::shared_ptr<gloo::transport::Device> device;
  std::lock_guard<std::mutex> lock(mutex);
  if (!device) {
    gloo::transport::tcp::attr attr;
    if (const char* ifname = std::getenv("TESSERA_GLOO_IFNAME"); ifname && *ifname) {
      attr.iface = ifname;
      const auto names = interfaces_with_an_address();
      if (!names.empty() && std::find(names.begin(), names.end(), attr.iface) == names.end()) {
        std::string list;
        for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
        throw CommError("gloo: TESSERA_GLOO_IFNAME='" + attr.iface +
                            "' is not a network interface of this host with an IP address (those are: " + list +
                            "); name one of them, or leave it unset to use the host name's address",
                        __FILE__, __LINE__);
      }
    } else if (const char* host = std::getenv("TESSERA_GLOO_HOSTNAME"); host && *host) {
      attr.hostname = host;
    } else {
      char name[256] = {};
      gethostname(name, sizeof name - 1);
      attr.hostname = name;
    }
    // Gloo (Debian 0.0~git20220518) can crash, not throw, when the host name does not resolve: ask
    // the resolver first.
    if (!attr.hostname.empty()) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int rc = getaddrinfo(attr.hostname.c_str(), nullptr, &hints, &found);
      if (found != nullptr) freeaddrinfo(found);
      if (rc != 0)
        throw CommError(std::string("gloo: cannot open a TCP device: the host name '") + attr.hostname +
                            "' cannot be resolved (" + gai_strerror(rc) +
                            "); set TESSERA_GLOO_IFNAME to a network interface or TESSERA_GLOO_HOSTNAME to an "
                            "address of this host",
                        __FILE__, __LINE__);
    }
    const bool batched = loop_thread_batched();
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw CommError(std::string("gloo: cannot open a TCP device (") + e.what() +
                          "); set TESSERA_GLOO_IFNAME to a network interface or TESSERA_GLOO_HOSTNAME "
                          "to an address of this host",
                      __FILE__, __LINE__);
    }
    if (batched) {
      int error = 0;
      run_on_loop_thread(static_cast<gloo::transport::tcp::Device&>(*device), [&] {
        sched_param param{};
        if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) error = errno;
      });
      // Not fatal: the backend works either way, only slower on a shared core.
      if (error != 0)
        tessera::detail::logger().warn(
            "gloo: cannot run the TCP event loop under SCHED_BATCH ({}); ops that wait "
            "for a peer can take a scheduler tick longer where it shares a core",
            std::strerror(error));
    }
  }
  return device;
}

/// A gloo::Context whose pairs are connected by an address exchange over MPI.
class MpiBootstrappedContext final : public gloo::Context {
 public:
  MpiBootstrappedContext(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout)
      : gloo::Context(rank, size) {
    setTimeout(timeout);
    std::vector<std::vector<char>> local(static_cast<std::size_t>(size));
    std::uint64_t length = 0;
    set_up_together(comm, "gloo", [&] {
      device_ = tcp_device();
      transportContext_ = device_->createContext(rank, size);
      transportContext_->setTimeout(timeout);
      for (int i = 0; i < size; ++i) {
        if (i == rank) continue;
        auto& pair = transportContext_->createPair(i);
        local[static_cast<std::size_t>(i)] = pair->address().bytes();
        length = std::max<std::uint64_t>(length, local[static_cast<std::size_t>(i)].size());
      }
    });
    TESSERA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &length, 1, MPI_UINT64_T, MPI_MAX, comm));
    const auto L = static_cast<std::size_t>(length);
    std::vector<char> out(L * static_cast<std::size_t>(size)), in(out.size());
    for (int i = 0; i < size; ++i) {
      const auto& a = local[static_cast<std::size_t>(i)];
      std::copy(a.begin(), a.end(), out.begin() + static_cast<std::ptrdiff_t>(L * static_cast<std::size_t>(i)));
    }
    TESSERA_CHECK_MPI(
        MPI_Alltoall(out.data(), static_cast<int>(L), MPI_BYTE, in.data(), static_cast<int>(L), MPI_BYTE, comm));
    // A pair that cannot connect fails on its rank alone; the communicator's set-up goes on
    // with collective calls.
    set_up_together(comm, "gloo", [&] {
      for (int i = 0; i < size; ++i) {
        if (i == rank) continue;
        const auto begin = in.begin() + static_cast<std::ptrdiff_t>(L * static_cast<std::size_t>(i));
        transportContext_->getPair(i)->connect(std::vector<char>(begin, begin + static_cast<std::ptrdiff_t>(L)));
      }
    });
  }
};

using ReduceFn = void (*)(void*, const void*, const void*, std::size_t);

template <class T>
ReduceFn reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceOp::Prod:
      return static_cast<ReduceFn>(&gloo::product<T>);
    case ReduceOp::Min:
      return static_cast<ReduceFn>(&gloo::min<T>);
    case ReduceOp::Max:
      return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::Avg:
      break;
  }
  throw CommError("the gloo backend got reduce op avg, which the front end should have rewritten");
}

/// Gloo's words where a peer closed or reset its connection (TCP's "closed" or "reset" on a
/// read, "broken pipe" on a write): its communicator failed (a timeout or an error there
/// closes its connections) or its process ended.
bool peer_closed(const char* what) {
  return std::strstr(what, "Connection closed by peer") != nullptr ||
         std::strstr(what, "Connection reset by peer") != nullptr || std::strstr(what, "Broken pipe") != nullptr;
}
/// What `op` is told then, beside Gloo's own words; `who`: "the peer", "a peer".
std::string peer_closed_text(const std::string& op, const char* who, const char* what) {
  return op + " failed: " + who + " closed its connection, as it does when its communicator is destroyed (after a timeout or an " +
         "error there, which it reports) or its process ends (gloo: " + what + ")";
}

/// Gloo's unbound buffers can only be waited for (a timed-out wait poisons the context), so
/// each transfer is waited for on a thread of its own and test() asks that thread. stop()
/// ends that wait at once: Gloo lets an unbound buffer with an op still pending go (its
/// pairs hold only weak references, and its destructor waits out a read or write in
/// progress), so the caller's buffer is safe to free after it.
struct GlooTransfer final : PendingTransfer {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool send = true;
  std::string op;  // describe(op), for its errors
  std::future<void> done;

  void start(std::chrono::milliseconds timeout) {
    done = std::async(std::launch::async, [this, timeout] {
      try {
        const bool completed = send ? buffer->waitSend(timeout) : buffer->waitRecv(timeout);
        if (!completed) throw CommError(op + " was stopped before it completed", __FILE__, __LINE__);
      } catch (const gloo::IoException& e) {
        if (std::strstr(e.what(), "Timed out") != nullptr)
          throw DeadlineExceeded{send ? "in gloo send, waiting for the receiver"
                                      : "in gloo recv, waiting for the sender"};
        if (peer_closed(e.what())) throw CommError(peer_closed_text(op, "the peer", e.what()), __FILE__, __LINE__);
        throw CommError(op + " failed: gloo: " + e.what(), __FILE__, __LINE__);
      } catch (const gloo::Exception& e) {
        throw CommError(std::string("gloo ") + (send ? "send" : "recv") + " failed: " + e.what(), __FILE__, __LINE__);
      }
    });
  }
  void wait(const Deadline&) override { done.get(); }  // the helper applies the deadline
  bool test() override {
    if (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    done.get();
    return true;
  }
  bool stop() noexcept override {
    if (done.valid()) {
      if (send)
        buffer->abortWaitSend();
      else
        buffer->abortWaitRecv();
      done.wait();
    }
    return true;
  }
  ~GlooTransfer() override { stop(); }
};

class GlooBackend final : public Backend {
 public:
  GlooBackend(MPI_Comm group, const CommOptions& options) : comm_(group) {
    TESSERA_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    TESSERA_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    try {
      context_ = std::make_shared<MpiBootstrappedContext>(comm_, rank_, size_, gloo_timeout(options.timeout));
    } catch (const gloo::Exception& e) {
      MPI_Comm_free(&comm_);
      throw CommError(std::string("gloo: connecting the full mesh failed: ") + e.what(), __FILE__, __LINE__);
    } catch (...) {
      MPI_Comm_free(&comm_);
      throw;
    }
  }
  ~GlooBackend() override {
    context_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  comm::Backend kind() const noexcept override { return comm::Backend::Gloo; }
  MPI_Comm group() const noexcept override { return comm_; }
  bool needs_fence() const noexcept override { return true; }
  bool accepts(MemoryKind m) const noexcept override { return m == MemoryKind::Host; }
  std::unique_ptr<Backend> make_child(MPI_Comm group, const CommOptions& options) override {
    return std::make_unique<GlooBackend>(group, options);
  }
  std::shared_ptr<gloo::Context> context() const { return context_; }

  // A ring all-reduce waits 2 (p - 1) times, each wait with the whole timeout.
  int timeouts_per_call(int ranks) const noexcept override { return 2 * ranks; }

  std::unique_ptr<PendingTransfer> post(const Op& op, const Deadline& deadline) override {
    auto pending = std::make_unique<GlooTransfer>();
    pending->send = op.type == OpType::Send;
    pending->op = describe(op);
    const std::size_t bytes = op.count * dtype_size(op.dtype);
    const std::uint64_t slot = p2p_slot(op.tag, bytes);
    try {
      pending->buffer = context_->createUnboundBuffer(pending->send ? op.send.data : op.recv.data, bytes);
      if (pending->send)
        pending->buffer->send(op.peer, slot);
      else
        pending->buffer->recv(op.peer, slot);
      pending->start(deadline.remaining());
    } catch (const gloo::Exception& e) {
      // Posted on a connection its peer has already closed.
      if (peer_closed(e.what()))
        throw CommError(peer_closed_text(pending->op, "the peer", e.what()), __FILE__, __LINE__);
      throw CommError(pending->op + " failed: gloo: " + e.what(), __FILE__, __LINE__);
    }
    return pending;
  }

  void execute(const Op& op, const Deadline& deadline) override {
    try {
      switch (op.dtype) {
        case DType::Float32:
          run<float>(op, deadline);
          break;
        case DType::Float64:
          run<double>(op, deadline);
          break;
        case DType::Int32:
          run<std::int32_t>(op, deadline);
          break;
        case DType::Int64:
          run<std::int64_t>(op, deadline);
          break;
        case DType::BFloat16:
        case DType::Float16:
          run<std::uint16_t>(op, deadline);
          break;  // data movement only
      }
    } catch (const gloo::IoException& e) {
      if (deadline.expired() || std::strstr(e.what(), "Timed out") != nullptr)
        throw DeadlineExceeded{"in gloo " + std::string(op_name(op.type))};
      if (peer_closed(e.what()))
        throw CommError(peer_closed_text(std::string("gloo ") + op_name(op.type), "a peer", e.what()), __FILE__,
                        __LINE__);
      throw CommError(std::string("gloo ") + op_name(op.type) + " failed: " + e.what(), __FILE__, __LINE__);
    } catch (const gloo::Exception& e) {
      throw CommError(std::string("gloo ") + op_name(op.type) + " failed: " + e.what(), __FILE__, __LINE__);
    }
  }

 private:
  template <class T>
  void run(const Op& op, const Deadline& deadline) {
    const auto timeout = deadline.remaining();
    // Tags must agree across ranks, so they count collectives only (sends differ by rank).
    const auto tag = static_cast<std::uint32_t>(op.coll_seq);
    const std::size_t n = op.count, all = n * static_cast<std::size_t>(size_);
    T* send = static_cast<T*>(op.send.data);
    T* recv = static_cast<T*>(op.recv.data);
    const bool root = rank_ == op.root;
    switch (op.type) {
      case OpType::Broadcast: {
        gloo::BroadcastOptions o(context_);
        o.setOutput(recv, n);
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::broadcast(o);
        break;
      }
      case OpType::AllReduce: {
        gloo::AllreduceOptions o(context_);
        if (send != recv) o.setInput(send, n);
        o.setOutput(recv, n);
        o.setReduceFunction(reduce_function<T>(op.reduce));
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::allreduce(o);
        break;
      }
      case OpType::Reduce: {
        gloo::ReduceOptions o(context_);
        // Gloo needs an output on every rank (it reduces through it); non-roots use scratch.
        T* out = recv;
        if (!root) out = scratch<T>(n);
        if (send != out) o.setInput(send, n);
        o.setOutput(out, n);
        o.setRoot(op.root);
        o.setReduceFunction(reduce_function<T>(op.reduce));
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::reduce(o);
        break;
      }
      case OpType::AllGather: {
        gloo::AllgatherOptions o(context_);
        if (send != recv + n * static_cast<std::size_t>(rank_)) o.setInput(send, n);
        o.setOutput(recv, all);
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::allgather(o);
        break;
      }
      case OpType::Gather: {
        gloo::GatherOptions o(context_);
        T* in = send;
        if (root && send == recv + n * static_cast<std::size_t>(op.root)) {
          in = scratch<T>(n);
          std::memcpy(in, send, n * sizeof(T));
        }
        o.setInput(in, n);
        if (root) o.setOutput(recv, all);
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::gather(o);
        break;
      }
      case OpType::Scatter: {
        gloo::ScatterOptions o(context_);
        T* out = recv;
        const bool in_place = root && recv == send + n * static_cast<std::size_t>(op.root);
        if (in_place) out = scratch<T>(n);
        if (root) {
          std::vector<T*> blocks(static_cast<std::size_t>(size_));
          for (int i = 0; i < size_; ++i) blocks[static_cast<std::size_t>(i)] = send + n * static_cast<std::size_t>(i);
          o.setInputs(blocks, n);
        }
        o.setOutput(out, n);
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::scatter(o);
        if (in_place) std::memcpy(recv, out, n * sizeof(T));
        break;
      }
      case OpType::AllToAll: {
        gloo::AlltoallOptions o(context_);
        o.setInput(send, all);
        o.setOutput(recv, all);
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::alltoall(o);
        break;
      }
      case OpType::ReduceScatter:
        ring_reduce_scatter<T>(op, deadline);
        break;
      case OpType::Barrier:
        break;  // the front end's fence, which comes first, is the barrier
      case OpType::Send:
      case OpType::Recv:
      case OpType::Split:
        throw CommError(std::string(op_name(op.type)) + " is not executed by a backend");
    }
  }

  /// Ring reduce-scatter over Gloo's unbound buffers: p-1 steps, each sending one block to
  /// the right neighbour and folding the block from the left into a running sum, so every
  /// rank moves (p-1)/p of the data (Gloo has no such collective in its options API). Each
  /// wait gets what is left of the op's deadline, so that the whole ring keeps it.
  template <class T>
  void ring_reduce_scatter(const Op& op, const Deadline& deadline) {
    const std::size_t n = op.count, p = static_cast<std::size_t>(size_);
    const auto r = static_cast<std::size_t>(rank_);
    T* work = scratch<T>(n * p + n);
    T* incoming = work + n * p;
    std::memcpy(work, op.send.data, n * p * sizeof(T));
    if (p > 1) {
      const auto fn = reduce_function<T>(op.reduce);
      auto out = context_->createUnboundBuffer(work, n * p * sizeof(T));
      auto in = context_->createUnboundBuffer(incoming, n * sizeof(T));
      const int right = static_cast<int>((r + 1) % p), left = static_cast<int>((r + p - 1) % p);
      // Distinct slots per op and step (Gloo matches on slot and source rank).
      const std::uint64_t slot = kRingSlotBase + ((op.coll_seq & 0xfffff) << 20);
      for (std::size_t step = 0; step + 1 < p; ++step) {
        const std::size_t send_block = (r + 2 * p - step - 1) % p;
        const std::size_t recv_block = (r + 2 * p - step - 2) % p;
        out->send(right, slot + step, send_block * n * sizeof(T), n * sizeof(T));
        in->recv(left, slot + step, 0, n * sizeof(T));
        in->waitRecv(deadline.remaining());
        fn(work + recv_block * n, work + recv_block * n, incoming, n);
        out->waitSend(deadline.remaining());
      }
    }
    std::memcpy(op.recv.data, work + r * n, n * sizeof(T));
  }

  template <class T>
  T* scratch(std::size_t n) {
    scratch_.resize(std::max(scratch_.size(), n * sizeof(T)));
    return reinterpret_cast<T*>(scratch_.data());
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<gloo::Context> context_;
  std::vector<char> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(MPI_Comm group, const CommOptions& options) {
  return std::make_unique<GlooBackend>(group, options);
}

std::shared_ptr<gloo::Context> gloo_context(Communicator& comm) {
  auto* gloo = dynamic_cast<GlooBackend*>(&comm.backend_impl());
  if (gloo == nullptr) throw ConfigError("gloo_context: the communicator does not use the gloo backend");
  return gloo->context();
}

}  // namespace tessera::comm::detail
