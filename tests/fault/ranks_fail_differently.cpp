// An app whose ranks fail together, each with its own error: rank 1 meets a failure of its
// own, and its peers the consequence, within milliseconds. tests/CMakeLists.txt checks that
// the app reports both, each with its ranks, and the one text once where all ranks agree.
//
//   mpiexec -n 3 ranks_fail_differently [gloo|thrown|same|numbers]
//
// gloo:   rank 1 fails while its peers wait to receive from it over Gloo; its communicator,
//         destroyed as the error unwinds, closes its connections, which fails their receives.
// thrown: rank 1 throws its error, the others another one 100 ms later.
// same:   every rank throws the same error.
// numbers: every rank throws an error that names its own rank: one text, in rank 0's words.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

#include "common/app_main.hpp"

int main(int argc, char** argv) {
  using namespace tessera;
  CLI::App app{"ranks_fail_differently"};
  std::string scenario = "thrown";
  app.add_option("scenario", scenario);
  return apps::run_app(argc, argv, app, [&](Session& session) -> int {
    if (scenario == "same") throw Error("every rank fails alike");
    if (scenario == "numbers") throw Error("rank " + std::to_string(session.rank()) + " gave up at step 7");
    if (scenario == "gloo") {
      auto c = comm::Communicator::create(comm::Backend::Gloo);
      if (session.rank() == 1) throw Error("the disk on rank 1 is full");
      std::vector<float> x(16);
      c->recv({x.data(), x.size()}, 1, 0);
      return 0;
    }
    if (session.rank() == 1) throw Error("the disk on rank 1 is full");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    throw CommError("rank 1 left");
  });
}
