#include <tessera/core/error.hpp>
#include <tessera/core/memory.hpp>
#include <tessera/core/trace.hpp>
#include <tessera/train/trainer.hpp>

#include <algorithm>

#include "core/clock.hpp"
#include "core/fnv1a.hpp"
#include "core/range.hpp"
#include "kernels/gemm.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/side_queue.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tessera::train {
namespace {

/// g *= s.
void scale_in_place(const View2D<float>& g, float s) {
  const Kokkos::View<float*, DeviceMemorySpace, Kokkos::MemoryUnmanaged> flat(g.data(), g.size());
  Kokkos::parallel_for(
      "tessera::scale_dy", Range(0, flat.size()), KOKKOS_LAMBDA(std::size_t i) { flat(i) *= s; });
}

// A free function: nvcc does not allow a device lambda in a private member function.
double square_sum(const float* data, std::size_t n) {
  const Kokkos::View<const float*, DeviceMemorySpace, Kokkos::MemoryUnmanaged> g(data, n);
  double sum = 0;
  Kokkos::parallel_reduce(
      "tessera::square_sum", Range(0, n),
      KOKKOS_LAMBDA(std::size_t i, double& acc) { acc += static_cast<double>(g(i)) * g(i); }, sum);
  return sum;
}
}  // namespace

void TrainConfig::validate(int ranks) const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError(what);
  };
  // The ranks first: the model's own checks below advise other sizes (--model.dim divisible
  // by tp, more layers than pp), which would not help where the ranks do not divide.
  // tp and pp may each be up to 2^30: their product in 64 bits.
  const long long model_ranks = static_cast<long long>(tp) * pp;
  if (ranks > 0 && tp >= 1 && pp >= 1 && ranks % model_ranks != 0) {
    const std::string world_ranks = std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
    require(false, pp == 1 ? "--parallel.tp " + std::to_string(tp) + " does not divide the " + world_ranks +
                                 " into tensor-parallel groups; choose a divisor of " + std::to_string(ranks)
                           : "--parallel.tp " + std::to_string(tp) + " x --parallel.pp " + std::to_string(pp) + " = " +
                                 std::to_string(model_ranks) + " ranks per model replica does not divide the " +
                                 world_ranks + "; choose sizes whose product divides " + std::to_string(ranks));
  }
  require(layers >= 1, "--model.layers must be >= 1");
  require(dim >= 1, "--model.dim must be >= 1");
  require(steps >= 0, "--train.steps must be >= 0");
  require(global_batch >= 1, "--train.batch must be >= 1");
  require(accum >= 1, "--train.accum must be >= 1");
  if (ranks > 0 && tp >= 1 && pp >= 1 && microbatches >= 1) {
    // The batch splits into accum micro-steps over the data-parallel ranks (and, under a
    // pipeline, micro-batches): the whole figure at once (it said "a multiple of 3 x the
    // data-parallel ranks", then named the rest in a second refusal), in long double, since
    // the product of flags up to 2^30 each wrapped to 0 in 64 bits and divided by it.
    const long double dp = static_cast<long double>(ranks) / static_cast<long double>(model_ranks);
    const long double pieces = dp * static_cast<long double>(accum) * (pp > 1 ? microbatches : 1);
    const bool fits =
        pieces <= static_cast<long double>(global_batch) && global_batch % static_cast<std::int64_t>(pieces) == 0;
    char figure[64];
    std::snprintf(figure, sizeof figure, "%.0Lf", pieces);
    const auto dp_ranks = static_cast<long long>(dp);
    require(fits, "--train.batch " + std::to_string(global_batch) + " does not divide across " +
                      std::to_string(dp_ranks) +
                      (dp_ranks == 1 ? " data-parallel rank x " : " data-parallel ranks x ") + std::to_string(accum) +
                      (accum == 1 ? " micro-step" : " micro-steps") +
                      (pp > 1 ? " x " + std::to_string(microbatches) + " pipeline micro-batches" : std::string()) +
                      "; choose a multiple of " + figure);
  } else {
    require(global_batch % accum == 0, "--train.batch " + std::to_string(global_batch) + " does not split into " +
                                           std::to_string(accum) +
                                           " micro-steps (--train.accum); choose a multiple of " +
                                           std::to_string(accum) + " x the data-parallel ranks");
  }
  require(optimizer == "adamw" || optimizer == "sgd",
          "--optim.name '" + optimizer + "' is not an optimizer Tessera has; use adamw or sgd");
  require(!lr || *lr > 0, "--optim.lr must be > 0");
  require(momentum >= 0 && momentum < 1,
          "--optim.momentum must be 0 or more and below 1 (0.9 is usual): at 1 or more the momentum buffer never "
          "forgets a gradient");
  require(synthetic_samples >= 1, "--data.samples must be >= 1");
  // Before the task is made (its teacher's forward over every sample takes a while).
  require(data != "synthetic" || synthetic_samples >= global_batch,
          "the dataset has " + std::to_string(synthetic_samples) + (synthetic_samples == 1 ? " sample" : " samples") +
              ", fewer than one batch (--train.batch " + std::to_string(global_batch) +
              "); lower --train.batch or raise --data.samples");
  require(zero_stage >= 0 && zero_stage <= 3,
          "--parallel.zero " + std::to_string(zero_stage) + " is not a ZeRO stage; use 0 (DDP), 1, 2 or 3");
  require(zero.prefetch >= 0, "--zero.prefetch must be >= 0 layers");
  require(zero.bucket_mb > 0 && std::isfinite(zero.bucket_mb), "--zero.bucket_mb must be > 0 MiB");
  require(max_rank_bytes >= 0, "--zero.max_rank_bytes must be >= 0 (0: no limit of its own)");
  require(tp >= 1, "--parallel.tp must be >= 1");
  require(pp >= 1, "--parallel.pp must be >= 1");
  require(microbatches >= 1, "--parallel.microbatches must be >= 1");
  require(schedule == "1f1b" || schedule == "gpipe",
          "--parallel.schedule '" + schedule + "' is not a pipeline schedule Tessera has; use 1f1b or gpipe");
  if (pp > 1) {
    parallel::stage_layers(layers, pp, 0);  // ConfigError when there are fewer layers than stages
    // Under tensor parallelism layers go in column-row pairs: every stage must start at an
    // even layer (the last may end with the model's odd last layer, kept whole).
    const auto first_odd_stage = [&](std::size_t count) {
      for (int s = 1; s < pp; ++s)
        if (parallel::stage_layers(count, pp, s).first % 2 != 0) return s;
      return 0;
    };
    if (const int s = tp > 1 ? first_odd_stage(layers) : 0; s > 0) {
      // The nearest layer counts, below and above, whose stages all start at an even layer.
      std::vector<std::size_t> fits;
      for (std::size_t below = layers - 1; below >= static_cast<std::size_t>(pp) && fits.empty(); --below)
        if (first_odd_stage(below) == 0) fits.push_back(below);
      for (std::size_t above = layers + 1;; ++above)  // 2 x pp fits: there is one
        if (first_odd_stage(above) == 0) {
          fits.push_back(above);
          break;
        }
      std::string choose;
      for (std::size_t i = 0; i < fits.size(); ++i) choose += (i ? " or " : "") + std::to_string(fits[i]);
      require(false, "with --parallel.tp " + std::to_string(tp) +
                         " the layers go in column-row pairs, and every pipeline stage must start at the start of a "
                         "pair (the last stage may end with an odd last layer, kept whole); stage " +
                         std::to_string(s) + " of " + std::to_string(pp) + " would start at layer " +
                         std::to_string(parallel::stage_layers(layers, pp, s).first) + " of " + std::to_string(layers) +
                         ", inside a pair; choose --model.layers " + choose);
    }
  }
  if (tp > 1 && dim % static_cast<std::size_t>(tp) != 0) {
    // With a data file the width is the file's: the tensor-parallel sizes that fit it too.
    std::string sizes;
    int listed = 0;
    for (int t = 2; t <= 64 && static_cast<std::size_t>(t) <= dim && listed < 4; ++t)
      if (dim % static_cast<std::size_t>(t) == 0 && (ranks <= 0 || ranks % (static_cast<long long>(t) * pp) == 0)) {
        sizes += (listed ? ", " : "") + std::to_string(t);
        ++listed;
      }
    require(false, "--parallel.tp " + std::to_string(tp) + " cuts every layer's " + std::to_string(dim) +
                       " features into equal blocks, and " + std::to_string(dim) + " does not divide by " +
                       std::to_string(tp) + "; choose --model.dim divisible by " + std::to_string(tp) +
                       (data != "synthetic" ? " (padding the data file's columns with zeros)" : "") +
                       (sizes.empty() ? std::string()
                                      : ", or a --parallel.tp that divides " + std::to_string(dim) +
                                            (ranks > 0 ? " and the " + std::to_string(ranks) + " ranks" +
                                                             (pp > 1 ? " over --parallel.pp " + std::to_string(pp) : "")
                                                       : std::string()) +
                                            ": " + sizes));
  }
}

double TrainConfig::held_parameters(int stage) const {
  const double d = static_cast<double>(dim), t = tp;
  const double L = static_cast<double>(pp > 1 ? parallel::stage_layers(layers, pp, stage).count : layers);
  if (tp <= 1) return L * (d * d + d);
  // Column-row pairs (the column layer's weight and bias split, the row layer's weight split
  // and its bias whole); an odd last layer whole. Every stage starts at an even layer
  // (validate()), so only the stage holding the model's last layer can hold an odd one.
  const double pairs = std::floor(L / 2), odd = L - 2 * pairs;
  return pairs * ((d * d + d) / t + d * d / t + d) + odd * (d * d + d);
}

TrainConfig::MemoryEstimate TrainConfig::estimate_memory(int ranks, int stage) const {
  const double d = static_cast<double>(dim), f = sizeof(float);
  // The strategies run over the data-parallel ranks; tensor parallelism cuts the replica.
  const long long model_ranks = static_cast<long long>(tp) * pp;
  const int dp = model_ranks > 1 && ranks % model_ranks == 0 ? static_cast<int>(ranks / model_ranks) : ranks;
  const double n = std::max(1, dp);
  MemoryEstimate e;
  e.stage = stage;
  const double params = held_parameters(stage);
  const double state = optimizer == "adamw" ? 2 : (momentum > 0 ? 1 : 0);
  const double wire = ddp.grad_dtype == DType::BFloat16 ? 2 : 0;  // bytes per gradient on the wire
  // What each rank keeps (the ZeRO paper's 16, 8 + 8/N, 4 + 12/N, 16/N bytes per parameter
  // for AdamW), and the buffers the strategy lends while a step runs.
  const double unit = d * d + d;  // a layer: ZeRO stage 3 gathers and reduces one at a time
  const double bucket = dp > 1 ? std::min(params, std::max(zero.bucket_mb * 1024 * 1024 / f, d * d)) : 0;
  const double slots = params > bucket ? 2 : 1;  // buckets in flight: one where one holds everything
  switch (zero_stage) {
    case 0:
      e.model = params * f * (2 + state);
      e.working = params * wire;
      break;
    case 1:
      e.model = params * f * 2 + params / n * f * state;
      e.working = slots * bucket * wire;
      break;
    case 2:
      e.model = params * f + params / n * f * (1 + state);
      e.working = slots * bucket * (f + wire);
      break;
    default:
      e.model = params / n * f * (2 + state);
      // Gathered ahead: at most the layers there are (a prefetch of 100000 layers was counted
      // as 100001 gathered ones).
      e.working =
          std::min<double>(static_cast<double>(zero.prefetch) + 1,
                           pp > 1 ? parallel::stage_layers(layers, pp, stage).count : static_cast<double>(layers)) *
              unit * f +
          2 * unit * (f + wire);
      break;
  }
  if (dp <= 1 && zero_stage > 0) e.working = 0;  // one rank: nothing travels, nothing is gathered
  // Per micro-batch row: each Linear keeps its output and input gradient, each GELU three
  // buffers of its width (two on a GPU, which computes Phi(x) again in backward); the batch's
  // inputs, targets and loss gradient. Under tensor parallelism a column layer's output (and
  // the GELU after it) and a row layer's input gradient are a tp-th of the width; an odd last
  // layer is whole.
  const double gelu_buffers = memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Host ? 3 : 2;
  const double rows = static_cast<double>(global_batch) / n / static_cast<double>(accum);
  const double count = static_cast<double>(pp > 1 ? parallel::stage_layers(layers, pp, stage).count : layers);
  const double t = tp > 1 ? tp : 1;
  const double pairs = tp > 1 ? std::floor(count / 2) : 0, whole = count - 2 * pairs;
  const double linear_widths = pairs * 2 * (1 + 1 / t) + whole * 2;  // in units of d
  // GELUs' widths: one after every layer but the model's last, whose output is whole.
  const double gelu_widths = pairs * (1 / t + 1) + whole - (stage == pp - 1 ? 1 : 0);
  // A pipeline keeps micro-batches in flight: all of them (GPipe), or under 1F1B as many as
  // the stages from this one on (at most all).
  const double in_flight =
      pp > 1 && schedule == "1f1b" ? std::min(microbatches, pp - stage) / double(microbatches) : 1.0;
  e.activations = rows * in_flight * d * f * (linear_widths + gelu_buffers * gelu_widths + 3);
  if (data == "synthetic") {
    // Its samples, and one layer of its teacher at a time with that layer's forward over 256 rows.
    e.data = static_cast<double>(synthetic_samples) * d * f * 2 + (d * d + d) * f * 2 + 256 * d * f * 4;
  }
  return e;
}

TrainConfig::MemoryEstimate TrainConfig::estimate_memory(int ranks) const {
  // The stages differ: the first hold the most layers and, under 1F1B, the most micro-batches
  // in flight; under tensor parallelism the last may hold the model's odd last layer whole.
  MemoryEstimate largest;
  for (int stage = 0; stage < std::max(1, pp); ++stage) {
    const MemoryEstimate e = estimate_memory(ranks, stage);
    if (stage == 0 || e.total() > largest.total()) largest = e;
  }
  return largest;
}

namespace {
/// `text` as rank `root` has it, on every rank of `comm` (collective).
std::string text_of_rank(comm::Communicator& comm, const std::string& text, int root) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  comm.broadcast({&length, 1}, root);
  std::vector<std::int32_t> chars(static_cast<std::size_t>(length), 0);
  if (comm.rank() == root)
    for (std::size_t i = 0; i < chars.size(); ++i) chars[i] = static_cast<unsigned char>(text[i]);
  if (length > 0) comm.broadcast({chars.data(), chars.size()}, root);
  std::string out(chars.size(), '\0');
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<char>(chars[i]);
  return out;
}

/// The least budget of any rank, with its source, on every rank: each rank reads its own
/// (its GPU's free memory, the node's at its own moment), and a check that refused on some
/// ranks only would leave the others waiting in the next collective.
MemoryBudget least_budget(comm::Communicator& comm, const MemoryBudget& mine) {
  if (comm.size() == 1) return mine;
  const double unknown = std::numeric_limits<double>::max();
  std::vector<double> least{mine.bytes > 0 ? mine.bytes : unknown};
  comm.all_reduce({least.data(), least.size()}, comm::ReduceOp::Min);
  if (least[0] == unknown) return {};
  // The lowest rank with that budget tells the others where it comes from.
  std::vector<std::int32_t> owner{mine.bytes == least[0] ? comm.rank() : comm.size()};
  comm.all_reduce({owner.data(), owner.size()}, comm::ReduceOp::Min);
  MemoryBudget least_of_all{least[0], text_of_rank(comm, mine.source, owner[0])};
  if (owner[0] != 0) least_of_all.source = "rank " + std::to_string(owner[0]) + ": " + least_of_all.source;
  return least_of_all;
}

using Settings = std::vector<std::pair<std::string, std::string>>;  // (name, value)

/// The settings every rank of a run must share, by the flag that sets each. Left out: those
/// a rank may choose alone (whether to overlap), the memory cap (the ranks agree on the
/// least), the data file's path (a node-local copy may lie elsewhere; its shape is compared
/// once it is open), and those the run does not use.
Settings shared_settings(const TrainConfig& c) {
  const auto real = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", v);  // a float's every digit: 1e-3 and 1.0000001e-3 differ
    return std::string(text);
  };
  Settings s = {{"--model.layers", std::to_string(c.layers)},
                {"--model.dim", std::to_string(c.dim)},
                {"--train.steps", std::to_string(c.steps)},
                {"--train.batch", std::to_string(c.global_batch)},
                {"--train.accum", std::to_string(c.accum)},
                {"--train.seed", std::to_string(c.seed)},
                {"--optim.name", c.optimizer},
                {"--optim.lr", c.lr ? real(*c.lr) : "its default"},
                {"weight_decay", real(c.weight_decay)},
                {"--data.source", c.data == "synthetic" ? "synthetic" : "an HDF5 file"},
                {"--comm.grad_dtype", dtype_name(c.ddp.grad_dtype)},
                {"--parallel.zero", std::to_string(c.zero_stage)},
                {"--parallel.tp", std::to_string(c.tp)},
                {"--parallel.pp", std::to_string(c.pp)}};
  if (c.optimizer == "sgd") s.push_back({"--optim.momentum", real(c.momentum)});
  if (c.data == "synthetic") {
    s.push_back({"--data.samples", std::to_string(c.synthetic_samples)});
    s.push_back({"--data.teacher_layers", std::to_string(c.teacher_layers)});
  }
  if (c.zero_stage == 0) {
    s.push_back({"--comm.bucket_mb", real(c.ddp.bucket_mb)});
    s.push_back({"first_bucket_mb", real(c.ddp.first_bucket_mb)});
  } else {
    s.push_back({"--zero.bucket_mb", real(c.zero.bucket_mb)});
    s.push_back({"--zero.prefetch", std::to_string(c.zero.prefetch)});
    s.push_back({"zero.align", std::to_string(c.zero.align)});
  }
  if (c.pp > 1) {
    s.push_back({"--parallel.microbatches", std::to_string(c.microbatches)});
    s.push_back({"--parallel.schedule", c.schedule});
  }
  return s;
}

/// Collective: throws the same ConfigError on every rank unless every rank of `comm` has the
/// same `mine`, naming the first that differs from rank 0's, and how; `what` says whose
/// ("settings", "data"), `hint` where a difference may come from. Ranks that were given
/// different settings (a config file or a dataset on node-local disk that differs between
/// nodes) trained apart in silence, or waited in a collective the others never called.
void require_alike(comm::Communicator& comm, const Settings& mine, const std::string& what, const std::string& hint) {
  if (comm.size() == 1) return;
  std::string text;
  for (const auto& [name, value] : mine) text += name + "\t" + value + "\n";
  const auto h = static_cast<std::int64_t>(tessera::detail::fnv1a(text));
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather({&h, 1}, {all.data(), all.size()});
  std::vector<int> differ;
  for (int r = 1; r < comm.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ.push_back(r);
  if (differ.empty()) return;
  const auto parse = [](const std::string& t) {
    Settings s;
    std::istringstream in(t);
    std::string line;
    while (std::getline(in, line)) {
      const auto tab = line.find('\t');
      s.push_back({line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1)});
    }
    return s;
  };
  const int other = differ.front();
  const Settings first = parse(text_of_rank(comm, text, 0)), theirs = parse(text_of_rank(comm, text, other));
  std::string how;
  // The first setting of rank `other` that rank 0 has otherwise. (Which settings a rank
  // uses follows from those listed first, which both have: one of those differs first.)
  for (const auto& setting : theirs) {
    const auto at =
        std::find_if(first.begin(), first.end(), [&setting](const auto& s) { return s.first == setting.first; });
    if (at == first.end() || at->second == setting.second) continue;
    how = "rank " + std::to_string(other) + " has " + setting.first + " " + setting.second + " where rank 0 has " +
          at->second;
    break;
  }
  if (how.empty()) how = "rank " + std::to_string(other) + "'s differ from rank 0's";
  std::string also;
  if (differ.size() > 1) {
    also = " (ranks differing from rank 0: ";
    for (std::size_t i = 0; i < differ.size() && i < 8; ++i) also += (i ? ", " : "") + std::to_string(differ[i]);
    also += differ.size() > 8 ? ", ...)" : ")";
  }
  throw ConfigError("the ranks were not given the same " + what + ": " + how + also + "; " + hint);
}

/// Collective: config.validate() on every rank, with one outcome everywhere. A setting that
/// some ranks refuse (their settings differ in one the comparison leaves out, as unused)
/// stops the others too, in that rank's words, where they waited in the next collective.
void validate_together(const TrainConfig& config, comm::Communicator& comm) {
  std::string refused;
  try {
    config.validate(comm.size());
  } catch (const ConfigError& e) {
    refused = e.message();
  }
  if (comm.size() == 1) {
    if (!refused.empty()) throw ConfigError(refused);
    return;
  }
  std::int32_t first = refused.empty() ? comm.size() : comm.rank();
  comm.all_reduce({&first, 1}, comm::ReduceOp::Min);
  if (first == comm.size()) return;
  const std::string words = text_of_rank(comm, refused, first);
  if (refused == words) throw ConfigError(refused);  // every rank that refused alike says it once
  throw ConfigError("rank " + std::to_string(first) + " refused its settings: " + words);
}
}  // namespace

Trainer::Trainer(TrainConfig config, comm::Communicator& comm) : config_(std::move(config)), comm_(comm) {
  // Compared first: a rank whose settings differ is named on every rank, before a check of
  // one rank's own values could stop it alone.
  require_alike(comm, shared_settings(config_), "settings",
                "give every rank the same (is --config a file on each node, and one of them another? a flag given to "
                "some ranks only?)");
  validate_together(config_, comm);
  kernels::check_host_isa_setting(comm.rank() == 0);
  kernels::check_gemm_bias_epilogue_setting(comm.rank() == 0);
  const int model_ranks = config_.tp * config_.pp;  // ranks that hold one replica of the model
  // Data parallelism runs over the ranks that hold the same blocks of the same layers: all
  // of them, or on a dp x tp x pp mesh (tp fastest: consecutive ranks share a
  // tensor-parallel group; then dp; then pp).
  if (model_ranks > 1) {
    mesh_ = std::make_unique<comm::DeviceMesh>(comm, comm.size() / model_ranks, config_.tp, config_.pp);
    dp_ = &mesh_->dp();
  } else {
    dp_ = &comm;
  }
  const std::int64_t ranks = dp_->size();
  // The batch divides into these (validate() refused it otherwise, with these ranks).
  const std::int64_t pieces = ranks * config_.accum * (config_.pp > 1 ? config_.microbatches : 1);
  // Refuse, before allocating anything, a run that cannot fit (rather than meet the kernel's
  // out-of-memory killer, which ends a process with no message).
  const auto need = config_.estimate_memory(comm.size());
  MemoryBudget have = memory_budget();
  // The cap lowers the limit only: above what the rank has, the run would meet the killer.
  constexpr const char* kCap = "--zero.max_rank_bytes";
  if (config_.max_rank_bytes > 0 && (have.bytes <= 0 || config_.max_rank_bytes < have.bytes)) {
    have = {config_.max_rank_bytes, kCap};
  } else if (config_.max_rank_bytes > 0) {
    std::ostringstream cap;
    cap << std::setprecision(3) << config_.max_rank_bytes;
    have.source += "; " + std::string(kCap) + " " + cap.str() + ", above that, can only lower it";
  }
  have = least_budget(comm, have);
  if (have.bytes > 0 && need.total() > have.bytes) {
    // GB, or MB, kB and bytes where a figure would round to 0.0 GB; `extra` digits more where
    // two figures would read alike.
    const auto gb = [](double b, int extra = 0) {
      std::ostringstream s;
      s << std::fixed;
      if (b >= 1e8)
        s << std::setprecision((b >= 1e10 ? 0 : 1) + extra) << b / 1e9 << " GB";
      else if (b >= 1e5)
        s << std::setprecision((b >= 1e7 ? 0 : 1) + extra) << b / 1e6 << " MB";
      else if (b >= 1e3)
        s << std::setprecision((b >= 1e4 ? 0 : 1) + extra) << b / 1e3 << " kB";
      else
        s << std::setprecision(0) << b << (std::llround(b) == 1 ? " byte" : " bytes");
      return s.str();
    };
    const int extra = gb(need.total()) == gb(have.bytes) ? 2 : 0;
    const std::string strategy = config_.zero_stage == 0 ? "DDP" : "ZeRO stage " + std::to_string(config_.zero_stage);
    // What the rank that needs the most holds: its pipeline stage's layers, cut tp ways.
    const std::string size = std::to_string(config_.dim) + " x " + std::to_string(config_.dim);
    std::string held_layers = std::to_string(config_.layers) + " layers of " + size;
    if (config_.pp > 1) {
      const auto range = parallel::stage_layers(config_.layers, config_.pp, need.stage);
      held_layers =
          "pipeline stage " + std::to_string(need.stage) + "'s " + std::to_string(range.count) + " of " + held_layers;
    }
    if (config_.tp > 1) held_layers += ", cut over " + std::to_string(config_.tp) + " tensor-parallel ranks";
    std::string instead;
    for (int stage = config_.zero_stage + 1; stage <= 3 && ranks > 1 && instead.empty(); ++stage) {
      TrainConfig other = config_;
      other.zero_stage = stage;
      const double total = other.estimate_memory(comm.size()).total();
      if (total <= have.bytes)
        instead = "; ZeRO stage " + std::to_string(stage) + " (--parallel.zero " + std::to_string(stage) +
                  ") would need about " + gb(total);
    }
    // What would help: a data file fixes the width and has no --data.samples; stage 3's
    // layers gathered ahead; the GPU's memory is shared by the ranks on that GPU, not the node.
    std::string lower = config_.data == "synthetic"
                            ? "lower --model.dim, --model.layers, --train.batch or --data.samples"
                            : "lower --model.layers or --train.batch (the data file sets "
                              "--model.dim)";
    if (config_.zero_stage == 3 && config_.zero.prefetch > 0 && need.working > 0) lower += ", or --zero.prefetch";
    const bool gpu = have.source.find("on its GPU") != std::string::npos;
    const auto capped = have.source.size() >= std::strlen(kCap) &&
                        have.source.compare(have.source.size() - std::strlen(kCap), std::string::npos, kCap) == 0;
    const std::string or_else = capped ? "or raise --zero.max_rank_bytes"
                                : !gpu ? "or run fewer ranks per node"
                                : have.source.find("shared by 1 rank") != std::string::npos
                                    ? "or cut the model over more GPUs (--parallel.tp, --parallel.pp, --parallel.zero)"
                                    : "or run fewer ranks per GPU";
    throw ConfigError("this run needs about " + gb(need.total(), extra) + " per rank with " + strategy +
                      " (parameters, gradients and " + config_.optimizer + " state of " + held_layers + ": " +
                      gb(need.model) +
                      (need.working > 0 ? "; communication buffers: " + gb(need.working) : std::string()) +
                      "; activations: " + gb(need.activations) +
                      (need.data > 0 ? "; synthetic data and its teacher: " + gb(need.data) : std::string()) +
                      "), and a rank has about " + gb(have.bytes, extra) + " (" + have.source + ")" + instead + "; " +
                      lower + ", " + or_else);
  }
  dataset_ =
      config_.data == "synthetic"
          ? data::make_teacher_student(config_.synthetic_samples, config_.dim,
                                       config_.teacher_layers ? config_.teacher_layers : config_.layers, config_.seed)
          : data::open_hdf5(config_.data);
  // The synthetic task follows from the settings compared above; a file may differ by node.
  if (config_.data != "synthetic") {
    const std::string shape = std::to_string(dataset_->size()) + " samples, " + std::to_string(dataset_->input_dim()) +
                              " input features, " +
                              (dataset_->has_labels() ? std::to_string(dataset_->classes()) + " classes"
                                                      : std::to_string(dataset_->target_dim()) + " targets");
    // The same words on every rank (the path may differ by node).
    require_alike(comm, {{"a data file of", shape}}, "data",
                  "is --data.source a copy on each node, and one of them another file? Give every rank the same data");
  }
  // Every layer of the MLP is as wide as its input: inputs and targets must both be dim wide.
  const bool targets_fit_inputs = dataset_->has_labels()
                                      ? dataset_->classes() <= static_cast<std::int64_t>(dataset_->input_dim())
                                      : dataset_->target_dim() == dataset_->input_dim();
  const std::string same_width =
      ". Every layer of the MLP is as wide as its input, so its outputs (targets, or one per class) are as many "
      "as its input features: pad the narrower with columns of zeros (/inputs, or /targets), and set --model.dim "
      "to that width";
  if (dataset_->input_dim() != config_.dim)
    throw ConfigError(
        dataset_->describe() + ": its " + std::to_string(dataset_->input_dim()) +
        " input features do not match --model.dim " + std::to_string(config_.dim) +
        (targets_fit_inputs
             ? "; set --model.dim " + std::to_string(dataset_->input_dim())
             : (dataset_->has_labels()
                    ? " (and its labels have " + std::to_string(dataset_->classes()) + " classes, more than " +
                          std::to_string(dataset_->input_dim()) + " outputs could hold)"
                    : " (and its targets are " + std::to_string(dataset_->target_dim()) + " wide)") +
                   same_width));
  if (!dataset_->has_labels() && dataset_->target_dim() != config_.dim)
    throw ConfigError(dataset_->describe() + ": the model's " + std::to_string(config_.dim) +
                      " outputs cannot fit targets of width " + std::to_string(dataset_->target_dim()) + same_width);
  if (dataset_->has_labels() && dataset_->classes() > static_cast<std::int64_t>(config_.dim))
    throw ConfigError(dataset_->describe() + ": more classes than the model's " + std::to_string(config_.dim) +
                      " outputs" + (dataset_->top_label().empty() ? "" : " (" + dataset_->top_label() + ")") +
                      ". Every layer of the MLP is as wide as its input, so " + std::to_string(dataset_->classes()) +
                      " classes need " + std::to_string(dataset_->classes()) +
                      " or more input features: pad /inputs with columns of zeros, or number the classes from 0 "
                      "without gaps");

  const int stage = mesh_ ? mesh_->coords().pp : 0;
  const auto part = config_.pp > 1 ? parallel::stage_layers(config_.layers, config_.pp, stage)
                                   : parallel::StageRange{0, config_.layers};
  model_ = std::make_unique<nn::MLP>(store_, config_.layers, config_.dim, "layers", mesh_ ? &mesh_->tp() : nullptr,
                                     part.first, part.count);
  if (part.first == 0) model_->set_input_grad(false);  // the input is data: no gradient for it
  if (dataset_->size() < config_.global_batch)
    throw ConfigError("the dataset has " + std::to_string(dataset_->size()) +
                      (dataset_->size() == 1 ? " sample" : " samples") + ", fewer than one batch (--train.batch " +
                      std::to_string(config_.global_batch) + "); lower --train.batch" +
                      (config_.data == "synthetic" ? " or raise --data.samples" : " or give a larger dataset"));
  // Every rank of a tensor-parallel group trains on the same samples.
  sampler_ = std::make_unique<data::DistributedSampler>(dataset_->size(), config_.global_batch, dp_->rank(),
                                                        dp_->size(), config_.seed);
  // The strategy decides what this rank keeps, then the store is filled: every layout draws
  // the same values (a function of seed, name and index).
  if (config_.zero_stage == 0) {
    parallel::DDPOptions ddp = config_.ddp;
    ddp.loss_gradient_divided = true;  // step() divides the loss gradient by the ranks
    strategy_ = std::make_unique<parallel::DistributedDataParallel>(*model_, store_, *dp_, ddp);
  } else {
    parallel::ZeroOptions zero = config_.zero;
    zero.stage = config_.zero_stage;
    zero.grad_dtype = config_.ddp.grad_dtype;
    zero.loss_gradient_divided = true;
    strategy_ = std::make_unique<parallel::ZeroDataParallel>(*model_, store_, *dp_, zero);
  }
  store_.initialize(config_.seed);
  strategy_->verify_replicas_identical();
  if (config_.pp > 1) {
    // One copy of the stage (the same parameters and hooks, activations of its own) per
    // micro-batch the schedule keeps in flight.
    const auto schedule = parallel::parse_schedule(config_.schedule);
    const int needed = parallel::Pipeline::in_flight(schedule, config_.microbatches, config_.pp, stage);
    std::vector<nn::Module*> modules = {model_.get()};
    for (int r = 1; r < needed; ++r) {
      replicas_.push_back(model_->replica());
      modules.push_back(replicas_.back().get());
    }
    const auto rows = static_cast<std::size_t>(config_.global_batch / pieces);
    pipeline_ = std::make_unique<parallel::Pipeline>(mesh_->pp(), modules, schedule, config_.microbatches, rows,
                                                     config_.dim, config_.dim);
  }
  // One data-parallel rank on GPUs with tensor- or pipeline-parallel peers updates
  // after backward, as measured faster before the share below was (beside backward, with
  // every thread, the updates took turns with the GEMMs); the share was measured on one GPU
  // alone, not beside tensor parallelism's all-reduces.
  const bool gpu = memory_kind_of_space<DeviceMemorySpace>() != MemoryKind::Host;
  overlap_updates_ = config_.overlap_optimizer && (dp_->size() > 1 || !gpu || comm_.size() == 1);
  // One rank on one GPU: DDP hands each bucket over as backward is done with it, and its update
  // is queued beside the rest of backward on a second stream of the highest priority, limited
  // to a quarter of the threads the GPU holds at once (Optimizer::limit_threads): it then
  // keeps that share of the multiprocessors and leaves the rest to backward's GEMMs, and the
  // step's last update, with nothing left to share the GPU with, takes all of it. On an H100
  // (MLP 8 x 4096, batch 1024, fp32) that made the step 0.14-0.32 ms shorter than one update
  // after backward in each of 5 alternating rounds. With every thread it could have, or at
  // normal priority, the updates took turns with the GEMMs and the step was no shorter than
  // after backward; with a half, a third, a sixth or fewer of the threads it was longer than
  // with a quarter in every round where both ran (docs/strategies.md has the figures).
  const bool one_gpu = overlap_updates_ && gpu && comm_.size() == 1;
  side_ = std::make_unique<kernels::SideQueue>(one_gpu);
  if (one_gpu)
    side_threads_ =
        std::max<std::size_t>(static_cast<std::size_t>(Kokkos::DefaultExecutionSpace().concurrency()) / 4, 1024);

  if (config_.optimizer == "sgd") {
    optim::SGDOptions o;
    o.lr = config_.lr.value_or(o.lr);
    o.momentum = config_.momentum;
    // Below 0: the default; a NaN goes on to the optimizer, which refuses it.
    if (!(config_.weight_decay < 0)) o.weight_decay = config_.weight_decay;
    optimizer_ = std::make_unique<optim::SGD>(strategy_->update_values(), strategy_->update_grads(), o);
  } else {
    optim::AdamWOptions o;
    o.lr = config_.lr.value_or(o.lr);
    if (!(config_.weight_decay < 0)) o.weight_decay = config_.weight_decay;
    optimizer_ = std::make_unique<optim::AdamW>(strategy_->update_values(), strategy_->update_grads(), o);
  }
  optimizer_->run_on(side_->space());

  const auto micro = static_cast<std::size_t>(config_.global_batch / (ranks * config_.accum));
  inputs_ = View2D<float>("tessera::inputs", micro, config_.dim);
  if (dataset_->has_labels())
    labels_ = View1D<std::int64_t>("tessera::labels", micro);
  else
    targets_ = View2D<float>("tessera::targets", micro, config_.dim);
  micro_indices_.resize(micro);
}

Trainer::~Trainer() = default;

std::string Trainer::layout() const {
  if (!mesh_) return "dp " + std::to_string(comm_.size());
  const int dp = mesh_->dp_size(), tp = mesh_->tp_size(), pp = mesh_->pp_size();
  // The groups along one axis: every combination of the other two coordinates.
  const auto groups = [&](char axis) {
    std::string out;
    const int n = axis == 't' ? tp : axis == 'd' ? dp : pp;
    const int a = axis == 't' ? dp : tp, b = axis == 'p' ? dp : pp;
    for (int j = 0; j < b; ++j)
      for (int i = 0; i < a; ++i) {
        out += " {";
        for (int k = 0; k < n; ++k) {
          const comm::MeshCoords c = axis == 't'   ? comm::MeshCoords{i, k, j}
                                     : axis == 'd' ? comm::MeshCoords{k, i, j}
                                                   : comm::MeshCoords{j, i, k};
          out += (k ? "," : "") + std::to_string(mesh_->rank_of(c));
        }
        out += "}";
      }
    return out;
  };
  std::string out = "dp " + std::to_string(dp) + " x tp " + std::to_string(tp);
  if (pp > 1) out += " x pp " + std::to_string(pp);
  out += ":";
  if (tp > 1) out += " tensor-parallel groups" + groups('t') + ";";
  out += " data-parallel groups" + groups('d');
  if (pp > 1) {
    out += "; pipeline groups" + groups('p') + " (stages";
    for (int s = 0; s < pp; ++s) {
      const auto r = parallel::stage_layers(config_.layers, pp, s);
      out +=
          " " + std::to_string(s) + ": layers " + std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
      out += s + 1 < pp ? "," : ")";
    }
  }
  return out;
}

double Trainer::replicated_grad_square() const {
  // The part of this rank's update range that parameters held whole cover.
  const auto grads = strategy_->update_grads();
  const std::size_t lo = store_.owned_begin(), hi = store_.owned_end();
  double total = 0;
  for (const auto& p : store_.parameters()) {
    if (p.shard.parts > 1) continue;
    const std::size_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
    if (b >= e) continue;
    total += square_sum(grads.data() + (b - lo), e - b);
  }
  return total;
}

parallel::DistributedDataParallel& Trainer::ddp() {
  auto* ddp = dynamic_cast<parallel::DistributedDataParallel*>(strategy_.get());
  if (ddp == nullptr) throw Error(std::string("Trainer::ddp(): this run uses ") + strategy_->name() + ", not DDP");
  return *ddp;
}

parallel::ZeroDataParallel& Trainer::zero() {
  auto* zero = dynamic_cast<parallel::ZeroDataParallel*>(strategy_.get());
  if (zero == nullptr) throw Error("Trainer::zero(): this run uses DDP (--parallel.zero 0)");
  return *zero;
}

namespace {
// "training diverged at step 3: the loss is nan (step 2's loss was 0.41)" of the whole advice.
std::string first_sentence(const std::string& text) {
  const auto end = text.find(". ");
  return end == std::string::npos ? text : text.substr(0, end);
}

/// Sets a flag for the life of a scope (the step's last backward being queued), and clears
/// it however the scope ends.
struct BackwardMark {
  bool& flag;
  BackwardMark(bool& f, bool on) : flag(f) { flag = on; }
  ~BackwardMark() { flag = false; }
  BackwardMark(const BackwardMark&) = delete;
  BackwardMark& operator=(const BackwardMark&) = delete;
};
}  // namespace

StepMetrics Trainer::step() {
  if (failed_)
    TESSERA_THROW(Error, "this Trainer cannot step again: step " + std::to_string(steps_done_ + 1) + " failed (" +
                             (why_failed_.empty() ? std::string("an exception without a message") : why_failed_) +
                             "), and left the parameters, gradients and optimizer state partway through it. "
                             "Build a new Trainer (from a saved model, if there is one)");
  try {
    return step_once();
  } catch (const Error& e) {
    failed_ = true;
    why_failed_ = first_sentence(e.message());
    throw;
  } catch (const std::exception& e) {
    failed_ = true;
    why_failed_ = first_sentence(e.what());
    throw;
  } catch (...) {
    failed_ = true;
    throw;
  }
}

StepMetrics Trainer::step_once() {
  StepMetrics m;
  const auto start = Clock::now();
  const double bytes_before = dp_->bytes_sent();
  const double tp_bytes_before = mesh_ ? mesh_->tp().bytes_sent() : 0.0;
  const double pp_bytes_before = mesh_ ? mesh_->pp().bytes_sent() : 0.0;
  // On a trace, each phase of the step is a span (trace::record does nothing when off).
  const auto mark = [](const char* phase, Clock::time_point begin) {
    if (trace::enabled()) trace::record("step", phase, "step", begin, Clock::now());
  };
  strategy_->new_step();
  store_.zero_grad();
  const std::vector<std::int64_t>& local = sampler_->next();
  const std::size_t micro = micro_indices_.size();
  double loss_sum = 0;
  // Before the backward pass of the step's last micro-step (or pipeline micro-batch).
  const auto begin_sync = [this] {
    if (overlap_updates_) {
      // Each bucket is updated as soon as its gradients are final: with several ranks when
      // its reduction completes, while later buckets travel (on a GPU on a queue of its own,
      // a second CUDA stream); on one rank where backward completes it (on a CPU there and
      // then, on one GPU queued beside the rest of backward).
      optimizer_->begin_step();
      handed_ = 0;
      strategy_->begin_step([this](std::size_t offset, std::size_t count) {
        side_->follow_default();
        // One GPU: an update queued while backward is still being queued runs beside its
        // GEMMs on a share of the GPU; the step's last has all of it.
        const bool beside = side_threads_ > 0 && in_backward_ && handed_ + count < optimizer_->size();
        optimizer_->limit_threads(beside ? side_threads_ : 0);
        handed_ += count;
        optimizer_->update(offset, count);
        // With several ranks the update is timed as the optimizer's (on a GPU the reductions
        // of later buckets run meanwhile on their own streams); on one rank it ran (a CPU) or
        // was queued (a GPU) inside backward, and counts as the optimizer's there.
        if (dp_->size() > 1) side_->space().fence();
      });
    } else {
      strategy_->begin_step();
    }
  };
  double idle = 0, span = 0;
  for (std::int64_t k = 0; k < config_.accum; ++k) {
    std::copy(local.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k) * micro),
              local.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k + 1) * micro),
              micro_indices_.begin());
    const auto loading = Clock::now();
    dataset_->load(micro_indices_, inputs_, targets_, labels_);
    mark("load batch", loading);
    m.data_s += seconds_since(loading);
    if (pipeline_) {
      // The micro-step's batch as M pipeline micro-batches; the last stage computes the loss
      // of each, whose gradient is divided by every mean it enters (micro-steps, ranks,
      // micro-batches), and the strategy syncs on the step's very last backward.
      const int M = config_.microbatches;
      const std::size_t rows = micro / static_cast<std::size_t>(M);
      const auto part = [rows](int mb) { return std::make_pair(rows * mb, rows * (mb + 1)); };
      const float scale = 1.0f / static_cast<float>(config_.accum * dp_->size() * M);
      const bool last_k = k + 1 == config_.accum;
      const double sum = pipeline_->run(
          [&](int mb) -> View2D<const float> { return Kokkos::subview(inputs_, part(mb), Kokkos::ALL()); },
          [&](int mb, const View2D<const float>& y, View2D<float>& g) {
            const double l = dataset_->has_labels()
                                 ? nn::cross_entropy_loss(y, Kokkos::subview(labels_, part(mb)), g)
                                 : nn::mse_loss(y, Kokkos::subview(targets_, part(mb), Kokkos::ALL()), g);
            scale_in_place(g, scale);
            return l;
          },
          [&](int mb) {
            const bool last = last_k && mb + 1 == M;
            strategy_->set_sync(last);
            // Several replicas: their reductions travel while the last backward runs. One:
            // nothing travels, and updates run inside backward would delay the input gradient
            // the previous stage waits for (on the host they run where they are queued), so
            // they wait for the pipeline's flush.
            if (last && dp_->size() > 1) begin_sync();
          },
          [&](int) { strategy_->end_backward(); });
      if (last_k && dp_->size() == 1) begin_sync();
      loss_sum += sum / M;
      const auto& ps = pipeline_->last();
      m.forward_s += ps.forward_s;
      m.backward_s += ps.backward_s;
      idle += ps.idle_s;
      span += ps.span_s;
      m.microbatches_in_flight = std::max(m.microbatches_in_flight, ps.max_in_flight);
      continue;
    }
    auto t = Clock::now();
    auto y = model_->forward(inputs_);
    loss_sum += dataset_->has_labels() ? nn::cross_entropy_loss(y, labels_, dy_) : nn::mse_loss(y, targets_, dy_);
    if (config_.accum * dp_->size() > 1) {
      // Each micro-step's loss is a mean over its micro-batch; the step's is their mean over
      // the micro-steps and the ranks, so its gradient is divided by both here, on the
      // small loss gradient, and DDP only sums (DDPOptions::loss_gradient_divided).
      scale_in_place(dy_, 1.0f / static_cast<float>(config_.accum * dp_->size()));
    }
    Kokkos::DefaultExecutionSpace().fence();
    mark("forward", t);
    m.forward_s += seconds_since(t);
    const bool last = k + 1 == config_.accum;
    // DDP and ZeRO stage 1 add micro-steps up locally and communicate on the last only;
    // stages 2 and 3 keep no whole gradient and reduce every micro-step.
    strategy_->set_sync(last);
    if (last) begin_sync();
    t = Clock::now();
    {
      const BackwardMark mark_backward(in_backward_, last);
      model_->backward(dy_);
    }
    Kokkos::DefaultExecutionSpace().fence();
    strategy_->end_backward();
    mark("backward", t);
    // Updates run inside backward (one rank) count as the optimizer's time.
    m.backward_s += seconds_since(t) - (last ? strategy_->last_sync().on_bucket_s : 0.0);
  }
  const auto syncing = Clock::now();
  strategy_->finish_gradient_sync();
  mark("gradient sync", syncing);
  const auto t = Clock::now();
  if (!overlap_updates_) {
    side_->follow_default();
    optimizer_->limit_threads(0);
    optimizer_->begin_step();
    optimizer_->update(0, optimizer_->size());
  }
  double grad_sq = optimizer_->grad_square_sum();  // summed by the updates as they read the gradients
  m.optimizer_s = strategy_->last_sync().on_bucket_s + seconds_since(t);
  mark("optimizer", t);
  const auto gathering = Clock::now();
  strategy_->finish_step();
  mark("parameter sync", gathering);
  const auto& sync = strategy_->last_sync();
  m.comm_exposed_s = sync.exposed_s;
  // Waits for ZeRO stage 3's gathers inside forward and backward count as communication.
  m.forward_s -= sync.waited_in_forward_s;
  m.backward_s -= sync.waited_in_backward_s;
  m.comm_bytes = dp_->bytes_sent() - bytes_before;
  m.pipeline_idle_s = idle;
  m.bubble_fraction = span > 0 ? idle / span : 0;
  if (mesh_) {
    m.tp_comm_bytes = mesh_->tp().bytes_sent() - tp_bytes_before;
    m.pp_comm_bytes = mesh_->pp().bytes_sent() - pp_bytes_before;
  }

  // The loss averaged over the ranks (the ranks of a tensor-parallel group compute the same
  // one). The squared norm: each rank's updates summed its range; a parameter every rank of
  // a tensor-parallel group holds whole counts once in the group, and data-parallel replicas
  // that all updated everything count once in all.
  // (Not from an infinite sum: inf - inf would report an infinite norm as NaN.)
  if (config_.tp > 1 && std::isfinite(grad_sq)) grad_sq -= replicated_grad_square() * (config_.tp - 1) / config_.tp;
  double sums[2] = {loss_sum / static_cast<double>(config_.accum), grad_sq};
  const auto averaging = Clock::now();
  comm_.all_reduce({sums, 2}, comm::ReduceOp::Sum);
  mark("loss and norm", averaging);
  grad_sq = strategy_->sharded_update() ? sums[1] : sums[1] / static_cast<double>(dp_->size());
  m.step = steps_done_ + 1;
  // Only the last pipeline stage computes the loss: the sum over the ranks of one replica's
  // last stage, over the replicas.
  m.loss = sums[0] / static_cast<double>(comm_.size() / config_.pp);
  // Every replica applied the same averaged gradients, so every rank sees the same norm and
  // the same loss, and stops alike.
  m.grad_norm = std::sqrt(grad_sq);
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    const auto text = [](double v) { return std::isnan(v) ? std::string("nan") : v > 0 ? "inf" : "-inf"; };
    std::ostringstream what;
    what << "training diverged at step " << m.step << ": ";
    if (!std::isfinite(m.loss)) what << "the loss is " << text(m.loss) << (std::isfinite(m.grad_norm) ? "" : " and ");
    if (!std::isfinite(m.grad_norm)) what << "the gradient norm is " << text(m.grad_norm);
    if (m.step > 1) what << " (step " << m.step - 1 << "'s loss was " << last_finite_loss_ << ")";
    what << ". The parameters are no longer usable, so the run stops here; lower the learning rate (--optim.lr, "
         << "now " << optimizer_->lr() << ") or look for NaN or infinite values in the data";
    throw NonFiniteError(what.str());
  }
  last_finite_loss_ = m.loss;
  steps_done_ = m.step;
  m.step_time_s = seconds_since(start);
  m.samples_per_s = static_cast<double>(config_.global_batch) / m.step_time_s;
  m.model_state_bytes = store_.resident_bytes() + optimizer_->state_bytes();
  m.working_bytes = strategy_->working_bytes();
  return m;
}

void Trainer::run(const std::function<void(const StepMetrics&)>& on_step) {
  while (steps_done_ < config_.steps) {
    const StepMetrics m = step();
    if (on_step) on_step(m);
  }
}

}  // namespace tessera::train
