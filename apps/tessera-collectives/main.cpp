// tessera-collectives: the textbook collective examples, run on every rank, printed per
// rank before and after each op, and checked against their closed-form results.
//
//   mpiexec -n 4 tessera-collectives [--backend mpi|gloo|nccl]

#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/app_main.hpp"

namespace {
using tessera::comm::Communicator;
using Values = std::vector<float>;

std::string format(const Values& v) {
  if (v.empty()) return "(not used)";
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char num[32];
    std::snprintf(num, sizeof num, "%g", static_cast<double>(v[i]));
    s += (i ? ", " : "") + std::string(num);
  }
  return s + "]";
}

/// Runs one op on device-space views (host views on a CPU build) and returns the output.
class Demo {
 public:
  Demo(Communicator& comm, Communicator& printer) : comm_(comm), printer_(printer) {}

  tessera::View1D<float> to_device(const Values& v) {
    tessera::View1D<float> d("demo", v.size());
    auto h = Kokkos::create_mirror_view(d);
    for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
    Kokkos::deep_copy(d, h);
    return d;
  }
  Values to_host(const tessera::View1D<float>& d) {
    auto h = Kokkos::create_mirror_view(d);
    Kokkos::deep_copy(h, d);
    return Values(h.data(), h.data() + h.size());
  }

  /// Prints every rank's before/after in rank order (rank 0 prints) and checks the output.
  void show(const std::string& title, const Values& before, const Values& after, const Values& expected) {
    const int n = comm_.size();
    const std::size_t width = 1 + static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    auto pack = [&](const Values& v) {
      Values p(width, 0.0f);
      p[0] = static_cast<float>(v.size());
      for (std::size_t i = 0; i < v.size() && i + 1 < width; ++i) p[i + 1] = v[i];
      return p;
    };
    Values all_before(width * static_cast<std::size_t>(n)), all_after(all_before.size());
    const Values pb = pack(before), pa = pack(after);
    printer_.gather({pb.data(), width}, {all_before.data(), all_before.size()}, 0);
    printer_.gather({pa.data(), width}, {all_after.data(), all_after.size()}, 0);
    bool ok = after.size() == expected.size();
    for (std::size_t i = 0; ok && i < after.size(); ++i)
      ok = std::fabs(after[i] - expected[i]) <= 1e-4f * (1 + std::fabs(expected[i]));
    int wrong = ok ? 0 : 1, total = 0;
    printer_.all_reduce({&wrong, 1}, {&total, 1});
    failures_ += total;
    if (comm_.rank() != 0) return;
    std::printf("\n== %s\n", title.c_str());
    for (int r = 0; r < n; ++r) {
      auto unpack = [&](const Values& all) {
        const float* p = all.data() + static_cast<std::size_t>(r) * width;
        return Values(p + 1, p + 1 + static_cast<std::size_t>(p[0]));
      };
      std::printf("rank %d: before %-24s after %s\n", r, format(unpack(all_before)).c_str(),
                  format(unpack(all_after)).c_str());
    }
    std::printf("%s\n",
                total == 0 ? "correct on every rank" : (std::to_string(total) + " rank(s) got a wrong result").c_str());
    std::fflush(stdout);
  }

  int failures() const { return failures_; }

 private:
  Communicator& comm_;
  Communicator& printer_;
  int failures_ = 0;
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs the textbook collective examples on every rank and prints them per rank.",
               "mpiexec -n 4 tessera-collectives"};
  // A flag given twice keeps its last value, as in nccl-tests and tessera-train.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string backend_name = "auto";  // as tessera-train: NCCL where every rank has a GPU, else MPI
  bool info = false;
  app.add_option("--backend", backend_name,
                 "communication backend; auto: NCCL in a GPU build where every rank has a GPU of its own, else MPI")
      ->capture_default_str()
      ->option_text("{auto,mpi,gloo,nccl}")
      ->check(tessera::apps::parsed_by(tessera::comm::parse_backend));
  app.add_flag("--info", info, "print the build configuration first");

  return tessera::apps::run_app(argc, argv, app, tessera::apps::Outputs::None, [&](tessera::Session& session) {
    using tessera::comm::ReduceOp;
    const auto backend = tessera::comm::parse_backend(backend_name);
    auto comm = Communicator::create(backend);
    auto printer = Communicator::create(tessera::comm::Backend::Mpi);
    const int n = comm->size(), r = comm->rank();
    const auto un = static_cast<std::size_t>(n);
    if (r == 0) {
      if (info) std::printf("%s\n", tessera::describe(tessera::build_info()).c_str());
      std::printf("tessera-collectives: %d rank%s, backend %s%s\n", n, n == 1 ? "" : "s",
                  tessera::comm::backend_name(comm->backend()),
                  comm->check_enabled() ? ", check mode on (every op compared across ranks first)" : "");
    }
    Demo demo(*comm, *printer);

    // all_reduce(sum) of [0, 1, ..., n-1] + rank: element i becomes n*i + n(n-1)/2.
    Values input(un), total(un);
    for (int i = 0; i < n; ++i) {
      input[static_cast<std::size_t>(i)] = static_cast<float>(i + r);
      total[static_cast<std::size_t>(i)] = static_cast<float>(n * i + n * (n - 1) / 2);
    }
    auto send = demo.to_device(input);
    tessera::View1D<float> out("out", un);
    comm->all_reduce(send, out, ReduceOp::Sum);
    demo.show("all_reduce(sum): each rank holds [0, 1, ..., n-1] + rank; every rank gets the sum", input,
              demo.to_host(out), total);

    // reduce_scatter of the same input: rank r gets element r of that sum.
    tessera::View1D<float> mine("mine", 1);
    comm->reduce_scatter(send, mine, ReduceOp::Sum);
    const Values piece = demo.to_host(mine);
    demo.show("reduce_scatter(sum): same input; rank r gets element r of the sum", input, piece,
              {total[static_cast<std::size_t>(r)]});

    // all_gather of those pieces rebuilds the all_reduce result on every rank.
    tessera::View1D<float> gathered("gathered", un);
    comm->all_gather(mine, gathered);
    demo.show("all_gather: each rank's piece; every rank gets them all (= all_reduce above)", piece,
              demo.to_host(gathered), total);

    // broadcast from rank 0: its [100, 101, ...] replaces everyone's buffer.
    Values bcast(un), expect_bcast(un);
    for (int i = 0; i < n; ++i) {
      bcast[static_cast<std::size_t>(i)] = r == 0 ? static_cast<float>(100 + i) : -1.0f;
      expect_bcast[static_cast<std::size_t>(i)] = static_cast<float>(100 + i);
    }
    auto b = demo.to_device(bcast);
    comm->broadcast(b, 0);
    demo.show("broadcast from rank 0", bcast, demo.to_host(b), expect_bcast);

    // scatter from rank 0: [0, 10, 20, ...]; rank r gets 10*r.
    Values table;
    if (r == 0)
      for (int i = 0; i < n; ++i) table.push_back(10.0f * static_cast<float>(i));
    auto t = demo.to_device(r == 0 ? table : Values(un, 0.0f));
    tessera::View1D<float> slot("slot", 1);
    comm->scatter(t, slot, 0);
    demo.show("scatter from rank 0: rank r gets element r", table, demo.to_host(slot), {10.0f * static_cast<float>(r)});

    // gather to rank 0: each rank sends rank*rank; rank 0 gets [0, 1, 4, 9, ...].
    const Values square = {static_cast<float>(r * r)};
    Values squares;
    if (r == 0)
      for (int i = 0; i < n; ++i) squares.push_back(static_cast<float>(i * i));
    auto sq = demo.to_device(square);
    tessera::View1D<float> at_root("at_root", un);
    comm->gather(sq, at_root, 0);
    demo.show("gather to rank 0: each rank sends rank^2", square, r == 0 ? demo.to_host(at_root) : Values{}, squares);

    // reduce(sum) to rank 0 of rank+1: rank 0 gets n(n+1)/2.
    const Values one = {static_cast<float>(r + 1)};
    auto o = demo.to_device(one);
    tessera::View1D<float> sum("sum", 1);
    comm->reduce(o, sum, ReduceOp::Sum, 0);
    demo.show("reduce(sum) to rank 0 of rank+1", one, r == 0 ? demo.to_host(sum) : Values{},
              r == 0 ? Values{static_cast<float>(n * (n + 1) / 2)} : Values{});

    // all_to_all: rank r sends 10*r + j to rank j; rank r gets [10*i + r for each i].
    Values outgoing(un), incoming(un);
    for (int j = 0; j < n; ++j) {
      outgoing[static_cast<std::size_t>(j)] = static_cast<float>(10 * r + j);
      incoming[static_cast<std::size_t>(j)] = static_cast<float>(10 * j + r);
    }
    auto a = demo.to_device(outgoing);
    tessera::View1D<float> a_out("a_out", un);
    comm->all_to_all(a, a_out);
    demo.show("all_to_all: rank r sends 10*r + j to rank j", outgoing, demo.to_host(a_out), incoming);

    if (session.rank() == 0)
      std::printf("\n%s\n", demo.failures() == 0 ? "all collectives correct" : "SOME COLLECTIVES WERE WRONG");
    return demo.failures() == 0 ? 0 : 1;
  });
}
