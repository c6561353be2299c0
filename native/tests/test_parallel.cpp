#include <atomic>
#include <stdexcept>
#include <vector>

#include "check.hpp"
#include "qemnative/parallel.hpp"

using namespace qemnative;

TEST_GROUP(parallel) {
  CHECK(default_thread_count() >= 1);
  for (unsigned threads : {1u, 2u, 7u}) {
    std::vector<std::atomic<int>> hits(1000);
    parallel_for(threads, hits.size(), [&](std::size_t i) { hits[i]++; });
    bool each_once = true;
    for (auto& h : hits) each_once = each_once && h.load() == 1;
    CHECK(each_once);
  }
  parallel_for(4, 0, [&](std::size_t) { CHECK(false); });
  // The first failure is rethrown after all workers stopped; work stops being handed out.
  std::atomic<int> ran{0};
  CHECK_THROWS(parallel_for(3, 100000,
                            [&](std::size_t i) {
                              ran++;
                              if (i == 5) throw std::runtime_error("block 5 is corrupt");
                            }),
               std::runtime_error);
  CHECK(ran.load() < 100000);
}
