#include "check.hpp"
#include "qemnative/proc_stats.hpp"

using namespace qemnative;

TEST_GROUP(proc_stats) {
  auto io = parse_proc_io(
      "rchar: 323934931\nwchar: 323929600\nsyscr: 632687\nsyscw: 632675\n"
      "read_bytes: 4096\nwrite_bytes: 323932160\ncancelled_write_bytes: 0\nbogus line\n");
  CHECK_EQ(io.size(), 7u);
  CHECK_EQ(io["rchar"], 323934931u);
  CHECK_EQ(io["read_bytes"], 4096u);
  CHECK_EQ(parse_proc_io("x: 12a\ny:\n: 3\n").size(), 0u);
  auto self = read_proc_self_io();
  if (!self.empty()) CHECK(self.count("read_bytes") == 1);
  CHECK(peak_rss_bytes() > 0);
  CHECK(current_rss_bytes() > 0);
  CHECK(peak_rss_bytes() >= current_rss_bytes() / 2);
  double t0 = monotonic_seconds();
  CHECK(monotonic_seconds() >= t0);
}
