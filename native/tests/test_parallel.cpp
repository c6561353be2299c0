#include <atomic>
#include <stdexcept>
#include <string>
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
  // The first failure is rethrown after all workers stopped. On one thread the
  // hand-out stops at once; on several, the exception still arrives (how many other
  // indices ran meanwhile depends on scheduling, so it is not asserted).
  std::atomic<int> ran{0};
  CHECK_THROWS(parallel_for(1, 100000,
                            [&](std::size_t i) {
                              ran++;
                              if (i == 5) throw std::runtime_error("block 5 is corrupt");
                            }),
               std::runtime_error);
  CHECK_EQ(ran.load(), 6);
  try {
    parallel_for(3, 1000, [&](std::size_t i) {
      if (i % 100 == 7) throw std::runtime_error("block " + std::to_string(i));
    });
    CHECK(false);
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).rfind("block ", 0) == 0);
  }
}
