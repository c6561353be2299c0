#include "check.hpp"
#include "qemnative/args.hpp"
#include "qemnative/error.hpp"

using namespace qemnative;

TEST_GROUP(args) {
  Options o = parse_args({"f.qem"});
  CHECK_EQ(o.path, std::string("f.qem"));
  CHECK(!o.json);
  CHECK(o.verify);
  CHECK(!o.sample_frames.has_value());
  CHECK_EQ(o.threads, 0u);

  o = parse_args({"--json", "--threads", "3", "--sample-frames=0,MID,LAST", "x", "--no-verify",
                  "--io", "mmap", "--dump", "out.raw"});
  CHECK(o.json);
  CHECK(!o.verify);
  CHECK_EQ(o.threads, 3u);
  CHECK_EQ(o.path, std::string("x"));
  CHECK(o.io == IoMode::Mmap);
  CHECK(o.dump_path && *o.dump_path == "out.raw");
  CHECK(o.sample_frames && o.sample_frames->size() == 3);

  CHECK_THROWS(parse_args({}), UsageError);
  CHECK_THROWS(parse_args({"a", "b"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--threads"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--threads", "0"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--threads", "-2"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--threads", "2x"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--io", "aio"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--bogus"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--sample-frames", "1,,2"}), UsageError);
  CHECK_THROWS(parse_args({"a", "--sample-frames", "-1"}), UsageError);
  CHECK(parse_args({"--help"}).help);
  CHECK_EQ(parse_args({"--", "--json"}).path, std::string("--json"));

  auto frames = resolve_frames(parse_frame_list("FIRST,MID,LAST,4"), 10);
  CHECK_EQ(frames.size(), 4u);
  CHECK_EQ(frames[0], 0u);
  CHECK_EQ(frames[1], 5u);
  CHECK_EQ(frames[2], 9u);
  CHECK_EQ(frames[3], 4u);
  CHECK_EQ(resolve_frames(parse_frame_list("MID"), 1)[0], 0u);
  CHECK_THROWS(resolve_frames(parse_frame_list("10"), 10), UsageError);
  CHECK_THROWS(resolve_frames(parse_frame_list("LAST"), 0), UsageError);
}
