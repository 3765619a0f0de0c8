#include <tessera/core/error.hpp>
#include <tessera/parallel/zero.hpp>

#include <algorithm>
#include <cmath>

#include "core/clock.hpp"
#include "core/range.hpp"
#include "parallel/parameter_index.hpp"
#include "parallel/replicas.hpp"

namespace tessera::parallel {
namespace {

template <class T>
using Span = Kokkos::View<T*, DeviceMemorySpace, Kokkos::MemoryUnmanaged>;
constexpr MemoryKind kWhere = memory_kind_of_space<DeviceMemorySpace>();

comm::Buffer buffer(float* p, std::size_t n) { return {p, n, DType::Float32, kWhere}; }
comm::Buffer buffer(bfloat16* p, std::size_t n) { return {p, n, DType::BFloat16, kWhere}; }

// Free functions: nvcc does not allow a device lambda in a private member function.
void to_bf16(const float* from, bfloat16* to, std::size_t n) {
  const Span<const float> f(from, n);
  const Span<bfloat16> t(to, n);
  Kokkos::parallel_for(
      "tessera::zero::to_bf16", Range(0, n), KOKKOS_LAMBDA(std::size_t i) { t(i) = bfloat16(f(i)); });
}
/// dst = src (add false) or dst += src, converting to float.
template <class T>
void accumulate(const T* src, float* dst, std::size_t n, bool add) {
  const Span<const T> s(src, n);
  const Span<float> d(dst, n);
  if (add)
    Kokkos::parallel_for(
        "tessera::zero::accumulate", Range(0, n), KOKKOS_LAMBDA(std::size_t i) { d(i) += static_cast<float>(s(i)); });
  else
    Kokkos::parallel_for(
        "tessera::zero::assign", Range(0, n), KOKKOS_LAMBDA(std::size_t i) { d(i) = static_cast<float>(s(i)); });
}
// Queued on the default execution space, in order with the kernels around them. A
// deep_copy without one would wait for the whole device, the reductions and gathers in
// flight on the communicators' streams included; the communicator fences this instance
// before an op reads the buffer.
void copy(const float* src, float* dst, std::size_t n) {
  Kokkos::deep_copy(Kokkos::DefaultExecutionSpace(), Span<float>(dst, n), Span<const float>(src, n));
}
void fill_zero(float* dst, std::size_t n) {
  Kokkos::deep_copy(Kokkos::DefaultExecutionSpace(), Span<float>(dst, n), 0.0f);
}

/// The part of [lo, hi) inside [b, e), or an empty range.
std::pair<std::size_t, std::size_t> overlap(std::size_t lo, std::size_t hi, std::size_t b, std::size_t e) {
  const std::size_t p = std::max(lo, b), q = std::min(hi, e);
  return p < q ? std::make_pair(p, q) : std::make_pair(p, p);
}

std::string unit_name(const std::string& parameter) {
  const auto dot = parameter.rfind('.');
  return dot == std::string::npos ? parameter : parameter.substr(0, dot);
}

constexpr std::size_t kGradSlots = 2;  // gradient buffers in flight before the oldest is waited for
}  // namespace

FlatPartition::FlatPartition(std::size_t total, int ranks, std::size_t align) {
  if (ranks < 1 || align < 1) throw Error("FlatPartition: needs >= 1 rank and an alignment >= 1");
  const std::size_t n = static_cast<std::size_t>(ranks);
  const std::size_t units = (total + align - 1) / align, q = units / n, extra = units % n;
  bounds.resize(n + 1);
  for (std::size_t r = 0; r <= n; ++r) {
    const std::size_t u = r * q + (r > n - extra ? r - (n - extra) : 0);  // the last `extra` ranks take one more
    bounds[r] = std::min(total, u * align);
  }
}

bool FlatPartition::equal() const {
  for (int r = 1; r < ranks(); ++r)
    if (size(r) != size(0)) return false;
  return true;
}

struct ZeroDataParallel::Slot {
  View1D<float> grad;     // stages 2 and 3: where backward writes the bucket's gradients
  View1D<bfloat16> wire;  // bfloat16 gradients: what travels
};

struct ZeroDataParallel::Gathered {
  bool live = false;  // gathered, or its gather in flight
  std::unique_ptr<View1D<float>> buffer;
  float* base = nullptr;
  int users = 0;  // parameters acquired and not yet released
  std::vector<comm::Work> work;
};

ZeroDataParallel::ZeroDataParallel(nn::Module& model, nn::ParameterStore& store, comm::Communicator& comm,
                                   ZeroOptions options)
    : store_(store), comm_(comm), options_(options) {
  if (options.stage < 1 || options.stage > 3)
    throw ConfigError("ZeRO stage " + std::to_string(options.stage) +
                      " does not exist; use 1, 2 or 3 (--parallel.zero 0 is DDP)");
  if (options.prefetch < 0)
    throw ConfigError("--zero.prefetch " + std::to_string(options.prefetch) + " is negative; use 0 or more layers");
  if (!(options.bucket_mb > 0 && std::isfinite(options.bucket_mb)))
    throw ConfigError("--zero.bucket_mb must be > 0 MiB (and finite)");
  if (options.align < 1)
    throw ConfigError(
        "ZeRO: the shards' alignment (ZeroOptions::align) is 0; give 1 or more elements (64, the default, "
        "keeps each shard 256 bytes aligned)");
  if (options.grad_dtype != DType::Float32 && options.grad_dtype != DType::BFloat16)
    throw ConfigError(std::string("ZeRO: gradients travel as float32 or bfloat16, not ") +
                      dtype_name(options.grad_dtype));
  if (store.allocated())
    throw Error(
        "ZeroDataParallel: give it the parameter store before it is allocated; the stage decides what "
        "this rank keeps");
  rank_ = comm.rank();
  alone_ = comm.size() == 1;
  partition_ = FlatPartition(store.numel(), comm.size(), options.align);
  const auto full = nn::Residency::Full, owned = nn::Residency::Owned;
  store.shard(partition_.begin(rank_), partition_.end(rank_), options.stage == 3 ? owned : full,
              options.stage == 1 ? full : owned);
  store.allocate();
  auto& params = store.parameters();
  if (alone_) {
    // One rank owns everything: every view points at the store, as in DDP.
    for (auto& p : params) {
      p.value = View1D<float>(store.values().data() + p.offset, p.numel);
      p.grad = View1D<float>(store.grads().data() + p.offset, p.numel);
    }
  }

  // Units: a module's parameters, contiguous in the flat buffer.
  for (auto& p : params) {
    const std::string name = unit_name(p.name);
    if (units_.empty() || units_.back().name != name || units_.back().offset + units_.back().numel != p.offset)
      units_.push_back({name, p.offset, 0, {}});
    units_.back().numel += p.numel;
    units_.back().parameters.push_back(&p);
    unit_of_[&p] = units_.size() - 1;
  }
  // Buckets, from the last parameter down (the order backward produces gradients): units in
  // stage 3, ranges of at most bucket_mb otherwise.
  if (options.stage == 3) {
    for (std::size_t u = units_.size(); u-- > 0;)
      buckets_.push_back({units_[u].offset, units_[u].numel, units_[u].parameters});
  } else {
    const auto cap = static_cast<std::size_t>(options.bucket_mb * 1024 * 1024 / sizeof(float));
    for (std::size_t k = params.size(); k-- > 0;) {
      auto& p = params[k];
      if (buckets_.empty() || (buckets_.back().numel > 0 && buckets_.back().numel + p.numel > cap))
        buckets_.push_back({});
      auto& b = buckets_.back();
      b.offset = p.offset;
      b.numel += p.numel;
      b.parameters.push_back(&p);
    }
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    for (auto* p : buckets_[b].parameters) bucket_of_[p] = b;
  const std::size_t nb = buckets_.size();
  pending_.assign(nb, 0);
  for (const auto& bucket : buckets_) largest_bucket_ = std::max(largest_bucket_, bucket.numel);
  for (const auto& unit : units_) largest_unit_ = std::max(largest_unit_, unit.numel);
  slot_of_.assign(nb, -1);
  work_.resize(nb);
  launched_.assign(nb, 0);
  harvested_.assign(nb, 0);
  handed_.assign(nb, 0);
  accumulated_.assign(nb, 0);
  for (std::size_t u = 0; u < units_.size(); ++u) gathered_.push_back(std::make_unique<Gathered>());
  for (std::size_t b = 0; b < nb; ++b) pending_[b] = buckets_[b].parameters.size();

  if (!alone_) {
    model.set_grad_ready_hook([this](nn::Parameter& p) { on_grad_ready(p); });
    model.set_acquire_hook([this](nn::Parameter& p, nn::Pass pass) { on_acquire(p, pass); });
    model.set_release_hook([this](nn::Parameter& p, nn::Pass pass) { on_release(p, pass); });
  }
}

ZeroDataParallel::~ZeroDataParallel() {
  // Buffers of operations in flight must outlive them.
  auto quietly = [](std::vector<comm::Work>& works) {
    for (auto& w : works) {
      try {
        w.wait();
      } catch (...) {
      }
    }
  };
  for (auto& w : work_) quietly(w);
  for (auto& g : gathered_) quietly(g->work);
}

const char* ZeroDataParallel::name() const noexcept {
  return options_.stage == 1 ? "zero-1" : options_.stage == 2 ? "zero-2" : "zero-3";
}

void ZeroDataParallel::verify_replicas_identical() {
  if (store_.value_residency() == nn::Residency::Full) {
    verify_replicas(store_.parameters(), comm_);
    return;
  }
  // Stage 3: nothing is replicated; the ranks must at least cut the same model alike.
  std::int64_t n[2] = {static_cast<std::int64_t>(store_.numel()), -static_cast<std::int64_t>(store_.numel())};
  comm_.all_reduce({n, 2}, comm::ReduceOp::Min);
  if (n[0] != -n[1])
    throw Error("ZeRO: the ranks build models of different sizes (" + std::to_string(n[0]) + " to " +
                std::to_string(-n[1]) + " parameters); give every rank the same model settings");
}

void ZeroDataParallel::new_step() {
  if (unshared_)
    throw Error("ZeRO stage " + std::to_string(options_.stage) +
                ": new_step() after an update without finish_step(): the ranks' updated shards were not shared, so "
                "each rank's copy of the others' parameters is a step old; call finish_step() after the optimizer's "
                "update");
  synced_ = false;
  drop_kept();  // the values may have changed since it was gathered
  stats_ = {};
  std::fill(handed_.begin(), handed_.end(), 0);
  std::fill(accumulated_.begin(), accumulated_.end(), 0);
  last_micro_ = false;
  ready_ = 0;
}

void ZeroDataParallel::require_new_step(const char* where) const {
  if (synced_)
    throw Error(std::string("ZeRO: ") + where +
                " after the last step's finish_gradient_sync() without new_step(): the last step's gradients would "
                "be added to this one's; call new_step() at the start of every optimizer step");
}

void ZeroDataParallel::begin_step(BucketCallback on_bucket) {
  require_new_step("begin_step()");
  on_bucket_ = std::move(on_bucket);
  last_micro_ = true;
  ready_ = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].parameters.size();
}

void ZeroDataParallel::track(std::ptrdiff_t bytes) {
  working_now_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(working_now_) + bytes);
  working_high_ = std::max(working_high_, working_now_);
}

void ZeroDataParallel::wait(std::vector<comm::Work>& works, double* also) {
  if (works.empty()) return;
  const auto t = Clock::now();
  for (auto& w : works) w.wait();
  works.clear();
  const double s = seconds_since(t);
  if (also != nullptr) {
    *also += s;
    stats_.exposed_s += s;  // waits outside finish_*, which time themselves
  }
}

// -- gradients ---------------------------------------------------------------------------

ZeroDataParallel::Slot& ZeroDataParallel::slot_for(std::size_t b) {
  if (slot_of_[b] >= 0) return *slots_[static_cast<std::size_t>(slot_of_[b])];
  if (free_slots_.empty() && slots_.size() >= kGradSlots) {
    // Wait for the oldest bucket still travelling and take its buffer.
    for (const std::size_t x : launch_order_)
      if (!harvested_[x] && slot_of_[x] >= 0) {
        harvest(x);
        break;
      }
  }
  if (free_slots_.empty()) {
    auto s = std::make_unique<Slot>();
    if (options_.stage >= 2) s->grad = View1D<float>("tessera::zero::bucket", largest_bucket_);
    if (options_.grad_dtype == DType::BFloat16)
      s->wire = View1D<bfloat16>("tessera::zero::bucket_bf16", largest_bucket_);
    track(static_cast<std::ptrdiff_t>(s->grad.size() * sizeof(float) + s->wire.size() * sizeof(bfloat16)));
    slots_.push_back(std::move(s));
    free_slots_.push_back(static_cast<int>(slots_.size()) - 1);
  }
  slot_of_[b] = free_slots_.back();
  free_slots_.pop_back();
  return *slots_[static_cast<std::size_t>(slot_of_[b])];
}

void ZeroDataParallel::free_slot(std::size_t b) {
  if (slot_of_[b] < 0) return;
  free_slots_.push_back(slot_of_[b]);
  slot_of_[b] = -1;
  if (options_.stage >= 2)
    for (auto* p : buckets_[b].parameters) p->grad = View1D<float>();  // the memory goes to another bucket
}

void ZeroDataParallel::on_grad_ready(nn::Parameter& p) {
  require_new_step("a backward pass");
  // Stage 1 keeps whole gradients and adds micro-steps up locally, as DDP does.
  if (options_.stage == 1 && !(sync_ && last_micro_)) return;
  ++ready_;
  const std::size_t b = detail::index_of(bucket_of_, p, "ZeroDataParallel");
  if (pending_[b] == 0)
    throw Error("ZeRO: the gradient of '" + p.name +
                "' was reported twice in one backward pass (shared parameters are not supported yet)");
  if (--pending_[b] == 0) {
    launch(b);
    ++stats_.buckets_launched_during_backward;
  }
}

void ZeroDataParallel::launch(std::size_t b) {
  launched_[b] = 1;
  launch_order_.push_back(b);
  stats_.ready_at_launch.push_back(ready_);
  const auto& bucket = buckets_[b];
  float* grads = options_.stage == 1 ? store_.grads().data() + bucket.offset : slot_for(b).grad.data();
  bfloat16* wire = nullptr;
  if (options_.grad_dtype == DType::BFloat16) {
    wire = slot_for(b).wire.data();
    to_bf16(grads, wire, bucket.numel);
  }
  // Each owner of a part of the bucket receives that part summed over the ranks. The
  // communicator waits for the kernels that wrote the gradients before it reads them.
  const auto op = options_.loss_gradient_divided ? comm::ReduceOp::Sum : comm::ReduceOp::Avg;
  for (int r = 0; r < comm_.size(); ++r) {
    const auto [lo, hi] = overlap(bucket.offset, bucket.offset + bucket.numel, partition_.begin(r), partition_.end(r));
    if (lo == hi) continue;
    const std::size_t at = lo - bucket.offset;
    const comm::Buffer part = wire != nullptr ? buffer(wire + at, hi - lo) : buffer(grads + at, hi - lo);
    work_[b].push_back(comm_.reduce_async(part, part, op, r));
  }
}

void ZeroDataParallel::harvest(std::size_t b) {
  const auto t = Clock::now();
  for (auto& w : work_[b]) w.wait();
  work_[b].clear();
  const double waited = seconds_since(t);
  if (!in_finish_) {  // waited inside backward, for a buffer; finish_* time their own waits
    stats_.waited_in_backward_s += waited;
    stats_.exposed_s += waited;
  }
  harvested_[b] = 1;
  const auto& bucket = buckets_[b];
  const std::size_t mine = partition_.begin(rank_);
  const auto [lo, hi] = overlap(bucket.offset, bucket.offset + bucket.numel, mine, partition_.end(rank_));
  if (lo < hi) {
    float* dst = store_.owned_grads().data() + (lo - mine);
    const std::size_t at = lo - bucket.offset;
    const bool bf16 = options_.grad_dtype == DType::BFloat16;
    if (options_.stage == 1) {
      // Reduced in place; only bfloat16 comes back to float32.
      if (bf16) accumulate(slots_[static_cast<std::size_t>(slot_of_[b])]->wire.data() + at, dst, hi - lo, false);
    } else {
      // Stages 2 and 3: this micro-step's sum, added into the gradient shard.
      const Slot& s = *slots_[static_cast<std::size_t>(slot_of_[b])];
      if (bf16)
        accumulate(s.wire.data() + at, dst, hi - lo, accumulated_[b] != 0);
      else
        accumulate(s.grad.data() + at, dst, hi - lo, accumulated_[b] != 0);
    }
  }
  accumulated_[b] = 1;
  free_slot(b);
}

void ZeroDataParallel::hand_over(std::size_t b) {
  handed_[b] = 1;
  if (!on_bucket_) return;
  const auto& bucket = buckets_[b];
  const std::size_t mine = partition_.begin(rank_);
  const auto [lo, hi] = overlap(bucket.offset, bucket.offset + bucket.numel, mine, partition_.end(rank_));
  if (lo == hi) return;
  const auto t = Clock::now();
  on_bucket_(lo - mine, hi - lo);
  stats_.on_bucket_s += seconds_since(t);
}

void ZeroDataParallel::end_backward() {
  if (alone_ || options_.stage == 1) return;
  // Gradients of parameters this backward did not reach are zero; then every bucket travels.
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (launched_[b]) continue;
    const auto& bucket = buckets_[b];
    Slot& s = slot_for(b);
    for (auto* p : bucket.parameters)
      if (p->grad.data() == nullptr || p->grad_pending_zero) {
        fill_zero(s.grad.data() + (p->offset - bucket.offset), p->numel);
        p->grad_pending_zero = false;
      }
    launch(b);
  }
  if (last_micro_) return;  // finish_gradient_sync() waits for them
  // An earlier micro-step: its sums are added into the shard before the next backward,
  // which needs the buckets' memory again.
  const auto t = Clock::now();
  in_finish_ = true;
  for (const std::size_t b : launch_order_)
    if (!harvested_[b]) harvest(b);
  in_finish_ = false;
  const double s = seconds_since(t);
  stats_.exposed_s += s;
  stats_.waited_in_backward_s += s;  // the loop times this call as part of backward
  reset_micro_step();
}

void ZeroDataParallel::reset_micro_step() {
  std::fill(launched_.begin(), launched_.end(), 0);
  std::fill(harvested_.begin(), harvested_.end(), 0);
  launch_order_.clear();
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].parameters.size();
}

void ZeroDataParallel::finish_gradient_sync() {
  const auto start = Clock::now();
  const double before = stats_.on_bucket_s;
  drop_kept();  // the optimizer is about to change the values it holds
  in_finish_ = true;
  if (alone_) {
    store_.settle_grads();  // gradients of parameters this step's backward did not reach are zero
    for (std::size_t b = 0; b < buckets_.size(); ++b) hand_over(b);
  } else {
    if (options_.stage == 1) {
      store_.settle_grads();
      for (std::size_t b = 0; b < buckets_.size(); ++b)
        if (!launched_[b]) launch(b);
    } else {
      end_backward();  // launches what backward did not (a no-op when the loop called it)
    }
    // Buckets already waited for during backward first, then the rest as they arrive.
    for (const std::size_t b : launch_order_)
      if (harvested_[b] && !handed_[b]) hand_over(b);
    for (const std::size_t b : launch_order_)
      if (!harvested_[b]) {
        harvest(b);
        hand_over(b);
      }
  }
  in_finish_ = false;
  reset_micro_step();
  on_bucket_ = nullptr;
  stats_.exposed_s += seconds_since(start) - (stats_.on_bucket_s - before);
  synced_ = true;
  unshared_ = !alone_ && options_.stage < 3;
}

void ZeroDataParallel::finish_step() {
  unshared_ = false;
  if (alone_ || options_.stage == 3) return;
  // Stages 1 and 2: every rank updated its shard of the replicated values; share them.
  const auto start = Clock::now();
  float* values = store_.values().data();
  if (partition_.equal()) {
    const std::size_t n = partition_.size(0);
    comm_.all_gather(buffer(values + partition_.begin(rank_), n), buffer(values, n * comm_.size()));
  } else {
    std::vector<comm::Work> works;
    for (int r = 0; r < comm_.size(); ++r)
      if (partition_.size(r) > 0)
        works.push_back(comm_.broadcast_async(buffer(values + partition_.begin(r), partition_.size(r)), r));
    for (auto& w : works) w.wait();
  }
  stats_.exposed_s += seconds_since(start);
}

// -- stage 3: parameters gathered per unit -------------------------------------------------

void ZeroDataParallel::on_acquire(nn::Parameter& p, nn::Pass pass) {
  if (options_.stage == 3 && nn::reads_values(pass))
    wait_gathered(detail::index_of(unit_of_, p, "ZeroDataParallel"), pass);
  if (options_.stage >= 2 && nn::writes_gradients(pass)) {
    // Backward writes this micro-step's gradient into a bucket's buffer, fresh.
    const std::size_t b = detail::index_of(bucket_of_, p, "ZeroDataParallel");
    Slot& s = slot_for(b);
    p.grad = View1D<float>(s.grad.data() + (p.offset - buckets_[b].offset), p.numel);
    p.grad_pending_zero = true;
  }
}

void ZeroDataParallel::on_release(nn::Parameter& p, nn::Pass pass) {
  if (options_.stage != 3 || !nn::reads_values(pass)) return;  // only passes that gathered use it
  const std::size_t u = detail::index_of(unit_of_, p, "ZeroDataParallel");
  auto& g = *gathered_[u];
  if (g.users > 0 && --g.users == 0) {
    // Kept until another unit is acquired: the next pass may start with this one.
    drop_kept();
    kept_ = static_cast<std::ptrdiff_t>(u);
  }
}

void ZeroDataParallel::drop_kept() {
  if (kept_ < 0) return;
  const auto u = static_cast<std::size_t>(kept_);
  kept_ = -1;
  if (gathered_[u]->live && gathered_[u]->users == 0) drop(u);
}

void ZeroDataParallel::gather(std::size_t u) {
  auto& g = *gathered_[u];
  const auto& unit = units_[u];
  g.live = true;
  ++gathers_live_;
  ++stats_.gathers;
  const std::size_t lo = unit.offset, hi = unit.offset + unit.numel;
  const std::size_t mine = partition_.begin(rank_);
  const auto [own_lo, own_hi] = overlap(lo, hi, mine, partition_.end(rank_));
  if (own_lo == lo && own_hi == hi) {  // in this rank's shard: read where it is kept
    g.base = store_.values().data() + (lo - mine);
  } else {
    if (!gather_pool_.empty()) {
      g.buffer = std::move(gather_pool_.back());
      gather_pool_.pop_back();
    } else {
      g.buffer = std::make_unique<View1D<float>>("tessera::zero::gathered", largest_unit_);
      track(static_cast<std::ptrdiff_t>(largest_unit_ * sizeof(float)));
    }
    g.base = g.buffer->data();
    if (own_lo < own_hi) copy(store_.values().data() + (own_lo - mine), g.base + (own_lo - lo), own_hi - own_lo);
  }
  // Every rank issues the same broadcasts in the same order (owners ascending), whatever it
  // holds itself.
  for (int r = 0; r < comm_.size(); ++r) {
    const auto [a, b] = overlap(lo, hi, partition_.begin(r), partition_.end(r));
    if (a < b) g.work.push_back(comm_.broadcast_async(buffer(g.base + (a - lo), b - a), r));
  }
}

void ZeroDataParallel::wait_gathered(std::size_t u, nn::Pass pass) {
  auto& g = *gathered_[u];
  const auto ahead = static_cast<std::ptrdiff_t>(u) + (pass == nn::Pass::Forward ? 1 : -1);
  if (kept_ == static_cast<std::ptrdiff_t>(u))
    kept_ = -1;  // the unit the last pass ended with: still gathered
  else if (kept_ == ahead && options_.prefetch > 0)
    kept_ = -1;  // the one this pass takes next (backward ended with the second layer, having
                 // no use for the first): left live, as a prefetch would have gathered it
  else
    drop_kept();
  const bool first = g.users == 0;
  if (!g.live) {
    // Not prefetched: make room (dropping a prefetched unit nobody uses) and gather now.
    if (gathers_live_ >= options_.prefetch + 1) {
      for (std::size_t x = 0; x < gathered_.size(); ++x)
        if (gathered_[x]->live && gathered_[x]->users == 0) {
          wait(gathered_[x]->work, nullptr);
          drop(x);
          break;
        }
    }
    gather(u);
  }
  wait(g.work, pass == nn::Pass::Forward ? &stats_.waited_in_forward_s : &stats_.waited_in_backward_s);
  ++g.users;
  if (!first) return;
  for (auto* p : units_[u].parameters) p->value = View1D<float>(g.base + (p->offset - units_[u].offset), p->numel);
  prefetch_after(u, pass);
}

void ZeroDataParallel::prefetch_after(std::size_t u, nn::Pass pass) {
  // The units a sequential model uses next: forward goes up the registration order, backward
  // down. The decision depends only on counts every rank shares, so all issue the same gathers.
  for (int k = 1; k <= options_.prefetch; ++k) {
    const std::ptrdiff_t next = static_cast<std::ptrdiff_t>(u) + (pass == nn::Pass::Forward ? k : -k);
    if (next < 0 || next >= static_cast<std::ptrdiff_t>(units_.size())) return;
    if (gathers_live_ >= options_.prefetch + 1) return;
    // Backward reads no value of a model's first layer (it forms no input gradient).
    const auto& params = units_[static_cast<std::size_t>(next)].parameters;
    if (pass != nn::Pass::Forward &&
        std::none_of(params.begin(), params.end(), [](const nn::Parameter* p) { return p->backward_reads_value; }))
      continue;
    if (!gathered_[static_cast<std::size_t>(next)]->live) {
      gather(static_cast<std::size_t>(next));
      ++stats_.gathers_prefetched;
    }
  }
}

void ZeroDataParallel::drop(std::size_t u) {
  auto& g = *gathered_[u];
  if (!g.work.empty()) wait(g.work, nullptr);
  for (auto* p : units_[u].parameters) p->value = View1D<float>();
  if (g.buffer) gather_pool_.push_back(std::move(g.buffer));
  g.live = false;
  g.base = nullptr;
  g.users = 0;
  --gathers_live_;
}

// -- whole values, for tests and model files --------------------------------------------

std::vector<float> gather_values(const nn::ParameterStore& store, comm::Communicator& comm, int root) {
  using HostOut = Kokkos::View<float*, HostMemorySpace, Kokkos::MemoryUnmanaged>;
  if (root >= comm.size())
    throw ConfigError("gather_values: root " + std::to_string(root) + " is no rank of communicator '" + comm.name() +
                      "' (" + std::to_string(comm.size()) + " ranks)");
  const bool everywhere = root < 0;
  const bool sharded = store.value_residency() != nn::Residency::Full;
  // The whole model in host memory, and where every rank gets it from sharded values, on the
  // device too: allocated before the ranks exchange anything, so that a rank without the
  // memory tells the others rather than leave them in a send or broadcast until the timeout.
  std::vector<float> out;
  View1D<float> whole;
  std::string short_of;
  try {
    if (everywhere || comm.rank() == root) out.resize(store.numel());
    if (everywhere && sharded) whole = View1D<float>("tessera::gather_values", store.numel());
  } catch (const std::exception& e) {
    short_of = e.what();
  }
  if (!sharded) {
    if (!short_of.empty())
      throw Error("gather_values: no memory for the whole model's " + std::to_string(store.numel()) + " values (" +
                  short_of + ")");
    if (!out.empty()) Kokkos::deep_copy(HostOut(out.data(), out.size()), store.values());
    return out;
  }
  std::vector<std::int64_t> ranges(3 * static_cast<std::size_t>(comm.size()));
  std::int64_t mine[3] = {static_cast<std::int64_t>(store.owned_begin()), static_cast<std::int64_t>(store.owned_end()),
                          short_of.empty() ? 1 : 0};
  comm.all_gather({mine, 3}, {ranges.data(), ranges.size()});
  for (int r = 0; r < comm.size(); ++r)
    if (ranges[3 * static_cast<std::size_t>(r) + 2] == 0)
      throw Error("gather_values: rank " + std::to_string(r) + " of communicator '" + comm.name() +
                  "' has no memory for the whole model's " + std::to_string(store.numel()) + " values (" +
                  std::to_string(store.numel() * sizeof(float)) + " bytes); every rank stops here");
  const std::size_t owned = store.owned_end() - store.owned_begin();
  if (!everywhere) {
    // Each rank's shard straight into the root's host copy: the other ranks hold nothing
    // more (a ZeRO-3 save held the whole model twice on every rank, and only rank 0 used it).
    constexpr int kTag = 0x7e55;
    if (comm.rank() != root) {
      if (owned > 0) comm.send(buffer(store.values().data(), owned), root, kTag);
      return out;
    }
    std::vector<comm::Work> receives;
    for (int r = 0; r < comm.size(); ++r) {
      const auto b = static_cast<std::size_t>(ranges[3 * static_cast<std::size_t>(r)]);
      const auto e = static_cast<std::size_t>(ranges[3 * static_cast<std::size_t>(r) + 1]);
      if (r != root && b < e)
        receives.push_back(comm.recv_async({out.data() + b, e - b, DType::Float32, MemoryKind::Host}, r, kTag));
    }
    if (owned > 0)
      Kokkos::deep_copy(HostOut(out.data() + store.owned_begin(), owned),
                        Kokkos::subview(store.values(), std::make_pair(std::size_t{0}, owned)));
    for (auto& w : receives) w.wait();
    return out;
  }
  if (store.owned_end() > store.owned_begin())
    copy(store.values().data(), whole.data() + store.owned_begin(), store.owned_end() - store.owned_begin());
  for (int r = 0; r < comm.size(); ++r) {
    const auto b = static_cast<std::size_t>(ranges[3 * static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(ranges[3 * static_cast<std::size_t>(r) + 1]);
    if (b < e) comm.broadcast(buffer(whole.data() + b, e - b), r);
  }
  Kokkos::deep_copy(HostOut(out.data(), out.size()), whole);
  return out;
}

}  // namespace tessera::parallel
