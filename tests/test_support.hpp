#pragma once
// Shared helpers for Tessera's tests.

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <tessera/comm/communicator.hpp>

namespace tessera::test {

/// The backend under test, from TESSERA_TEST_BACKEND (set by ctest); mpi by default.
inline comm::Backend backend_under_test() {
  const char* b = std::getenv("TESSERA_TEST_BACKEND");
  if (b == nullptr || std::string(b) == "none" || *b == '\0') return comm::Backend::Mpi;
  return comm::parse_backend(b);
}

/// Options with a short timeout, so a test that hangs fails in seconds.
inline comm::CommOptions test_options(const std::string& name = "world") {
  comm::CommOptions o;
  o.timeout = std::chrono::seconds(60);
  o.name = name;
  return o;
}

/// Holder of the program-wide communicator (released by the test main before MPI ends).
inline std::unique_ptr<comm::Communicator>& world_holder() {
  static std::unique_ptr<comm::Communicator> w;
  return w;
}

/// One communicator over all ranks for the whole test program.
inline comm::Communicator& world() {
  auto& w = world_holder();
  if (!w) w = comm::Communicator::create(backend_under_test(), test_options());
  return *w;
}

/// Asserts that statement throws ExceptionType whose what() contains `needle`.
#define EXPECT_THROW_WITH(statement, ExceptionType, needle)                                            \
  do {                                                                                                 \
    try {                                                                                              \
      statement;                                                                                       \
      ADD_FAILURE() << "expected " #ExceptionType " containing \"" << (needle) << "\"";                \
    } catch (const ExceptionType& e) {                                                                 \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message was: " << e.what(); \
    }                                                                                                  \
  } while (0)

}  // namespace tessera::test
