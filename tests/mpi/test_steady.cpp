// A long-running job must not grow: file descriptors, threads and resident memory stay flat
// over thousands of operations (blocking, async, point-to-point) and over communicators made
// and dropped again, on every backend.
#include <gtest/gtest.h>

#include <dirent.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

#include "test_support.hpp"

namespace {
using namespace tessera;
using test::world;

/// Entries in a /proc directory (open descriptors, threads), minus "." and "..", and minus
/// the descriptor the listing itself holds when `dir` is /proc/self/fd.
int count_entries(const char* dir, bool lists_fds) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return lists_fds ? n - 1 : n;
}

long resident_kib() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = -1;
  std::fclose(f);
  return pages_resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/// Bytes the C library's allocator has handed out and not taken back (-1 where it cannot say):
/// finer than resident pages, where a small object leaked per op hides in the allocator's
/// free pages for thousands of ops.
long long heap_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  return static_cast<long long>(m.uordblks + m.hblkhd);
#else
  return -1;
#endif
}

struct Usage {
  int fds, threads;
  long rss_kib;
  long long heap;
};
Usage usage() {
  return {count_entries("/proc/self/fd", true), count_entries("/proc/self/task", false), resident_kib(), heap_bytes()};
}

/// One round of everything a training step does with a communicator, checking the results
/// so that a round that silently did nothing cannot pass.
void round(comm::Communicator& c, std::vector<float>& grad, std::vector<float>& bucket, int i) {
  const int p = c.size();
  std::fill(grad.begin(), grad.end(), static_cast<float>(c.rank() + 1));
  c.all_reduce({grad.data(), grad.size()});
  ASSERT_EQ(grad.back(), static_cast<float>(p * (p + 1) / 2)) << "round " << i;

  std::fill(bucket.begin(), bucket.end(), 1.0f);
  auto work = c.all_reduce_async({bucket.data(), bucket.size()});
  work.wait();
  ASSERT_EQ(bucket.front(), static_cast<float>(p)) << "round " << i;

  float token = c.rank() == 0 ? static_cast<float>(i) : -1.0f;
  c.broadcast({&token, 1}, 0);
  ASSERT_EQ(token, static_cast<float>(i));

  if (p > 1) {
    float out = static_cast<float>(c.rank()), in = -1.0f;
    const int next = (c.rank() + 1) % p, prev = (c.rank() + p - 1) % p;
    auto r = c.recv_async({&in, 1}, prev, 7);
    c.send({&out, 1}, next, 7);
    r.wait();
    ASSERT_EQ(in, static_cast<float>(prev));
  }
}

TEST(Steady, DescriptorsThreadsAndMemoryStayFlatOverThousandsOfOps) {
  auto& c = world();
  std::vector<float> grad(64 * 1024), bucket(4096);
  // Gloo's TCP transport takes milliseconds per small op on these 2-core machines
  // (docs/communication.md): fewer rounds there, the same checks.
  const bool slow = c.backend() == comm::Backend::Gloo;
  const int warmup = slow ? 50 : 300, rounds = slow ? 500 : 3000, split_every = rounds / 10;

  auto run = [&](int n, int first) {
    for (int i = first; i < first + n; ++i) {
      round(c, grad, bucket, i);
      if (HasFatalFailure()) return;
      if (i % split_every == 0) {
        auto half = c.split(c.rank() % 2, c.rank(), "half");
        float one = 1.0f;
        half->all_reduce({&one, 1});
        ASSERT_EQ(one, static_cast<float>(half->size()));
      }
    }
  };
  run(warmup, 0);
  if (HasFatalFailure()) return;
  const Usage before = usage();
  run(rounds, warmup);
  if (HasFatalFailure()) return;
  const Usage after = usage();

  std::printf(
      "rank %d: fds %d -> %d, threads %d -> %d, resident %ld -> %ld KiB, heap in use %lld -> %lld B over %d "
      "rounds\n",
      c.rank(), before.fds, after.fds, before.threads, after.threads, before.rss_kib, after.rss_kib, before.heap,
      after.heap, rounds);
  // Growth is a leak; a count may fall, where a descriptor opened before the window is
  // closed inside it: on an H100 node one Gloo rank went from 52 descriptors to 51.
  EXPECT_LE(after.fds, before.fds) << "file descriptors leaked";
  EXPECT_LE(after.threads, before.threads) << "threads leaked";
  // Allocator noise is a few pages; a leak of even one small object per op would be
  // 3000+ allocations over the window.
  EXPECT_LE(after.rss_kib - before.rss_kib, 1024) << "resident memory grew";
  // The heap: a round makes 4 or 5 ops, and the smallest allocation takes 32 bytes, so one
  // object leaked per op is 128 bytes or more a round; 16 a round, plus 64 KiB for a cache
  // filled once, stays below that.
  if (before.heap >= 0) {
    EXPECT_LE(after.heap - before.heap, 16LL * rounds + 64 * 1024) << "heap memory in use grew";
  }
}

}  // namespace
