#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "check.hpp"
#include "qemnative/bytes.hpp"
#include "qemnative/file.hpp"

using namespace qemnative;

namespace {

std::string temp_path(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/qemnative-test-" + std::to_string(getpid()) + "-" +
         name;
}

}  // namespace

TEST_GROUP(file) {
  // Little-endian loads and the bounds-checked cursor.
  const std::uint8_t raw[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  CHECK_EQ(load_u16le(raw), 0x0201u);
  CHECK_EQ(load_u32le(raw), 0x04030201u);
  CHECK_EQ(load_u64le(raw), 0x0807060504030201ull);
  ByteReader r(raw, sizeof raw, "header");
  CHECK_EQ(r.u8(), 1u);
  CHECK_EQ(r.u16(), 0x0302u);
  CHECK_EQ(r.u32(), 0x07060504u);
  CHECK_EQ(r.remaining(), 8u);
  CHECK_THROWS(r.u64() + r.u8(), FormatError);
  try {
    ByteReader t(raw, 3, "section BLOCK_INDEX", 7, 100);
    t.u32();
    CHECK(false);
  } catch (const FormatError& e) {
    std::string msg = e.what();
    CHECK(msg.find("section BLOCK_INDEX, block 7: ") == 0);
    CHECK(msg.find("block 7") != std::string::npos);
    CHECK(msg.find("offset 100") != std::string::npos);
    CHECK_EQ(e.block(), 7);
  }
  ByteReader s = ByteReader(raw, sizeof raw, "whole").slice(4, 4, "part");
  CHECK_EQ(s.u32(), 0x08070605u);
  CHECK_THROWS(ByteReader(raw, sizeof raw, "whole").slice(12, 4, "part"), FormatError);
  CHECK_THROWS(ByteReader(raw, sizeof raw, "whole").slice(~std::size_t{0}, 2, "part"),
               FormatError);

  // Overflow-safe arithmetic and range checks.
  CHECK_EQ(checked_add(2, 3, "x"), 5u);
  CHECK_THROWS(checked_add(~0ull, 1, "x"), FormatError);
  CHECK_EQ(checked_mul(1ull << 31, 4, "x"), 1ull << 33);
  CHECK_THROWS(checked_mul(1ull << 32, 1ull << 32, "x"), FormatError);
  check_range(0, 10, 10, "x");
  check_range(10, 0, 10, "x");
  CHECK_THROWS(check_range(5, 6, 10, "x"), FormatError);
  CHECK_THROWS(check_range(11, 0, 10, "x"), FormatError);
  CHECK_THROWS(check_range(1, ~0ull, 10, "x"), FormatError);

  // pread and mmap see the same bytes; atomic writes leave no temporary behind.
  std::string path = temp_path("file.bin");
  std::string data = "0123456789abcdef";
  write_file_atomic(path, reinterpret_cast<const std::uint8_t*>(data.data()), data.size());
  {
    File f(path);
    CHECK_EQ(f.size(), 16u);
    auto v = f.read_vector(10, 6);
    CHECK_EQ(std::string(v.begin(), v.end()), std::string("abcdef"));
    CHECK_THROWS(f.read_vector(10, 7), IoError);  // past the end: the file "shrank"
    Mapping m(f);
    CHECK_EQ(m.size(), 16u);
    CHECK_EQ(std::string(reinterpret_cast<const char*>(m.data()), 16), data);
  }
  CHECK(access((path + ".tmp-" + std::to_string(getpid())).c_str(), F_OK) != 0);
  std::remove(path.c_str());
  CHECK_THROWS(File(path), IoError);
  CHECK_THROWS(File("/"), IoError);  // a folder is not a regular file
  CHECK_THROWS(write_file_atomic("/nonexistent-dir/x", nullptr, 0), IoError);
}
