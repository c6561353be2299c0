#include <cstring>
#include <vector>

#include "check.hpp"
#include "qemnative/hashing.hpp"

using namespace qemnative;

TEST_GROUP(hashing) {
  // FIPS 180-2 test vectors.
  CHECK_EQ(sha256_hex("abc", 3),
           std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK_EQ(sha256_hex("", 0),
           std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  Sha256 h;
  h.update("a", 1);
  h.update("bc", 2);
  CHECK_EQ(h.hexdigest(), sha256_hex("abc", 3));

  // xxHash reference values of the empty input (from the xxHash specification).
  CHECK_EQ(xxh32("", 0, 0), 0x02CC5D05u);
  CHECK_EQ(xxh64("", 0, 0), 0xEF46DB3751D8E999ull);
  CHECK_EQ(xxh3_64("", 0, 0), 0x2D06800538D394C2ull);

  // Widening to little-endian uint32 hashes the same bytes for every element size.
  std::vector<std::uint8_t> u8 = {0, 1, 255, 7};
  std::vector<std::uint8_t> u16 = {0, 0, 1, 0, 255, 0, 7, 0};
  std::vector<std::uint8_t> u32 = {0, 0, 0, 0, 1, 0, 0, 0, 255, 0, 0, 0, 7, 0, 0, 0};
  std::string expect = sha256_hex(u32.data(), u32.size());
  CHECK_EQ(sha256_u32le(u8.data(), 4, 1), expect);
  CHECK_EQ(sha256_u32le(u16.data(), 4, 2), expect);
  CHECK_EQ(sha256_u32le(u32.data(), 4, 4), expect);
  std::vector<std::uint8_t> big16 = {0x34, 0x12};
  std::vector<std::uint8_t> big32 = {0x34, 0x12, 0, 0};
  CHECK_EQ(sha256_u32le(big16.data(), 1, 2), sha256_hex(big32.data(), 4));
  // More elements than one internal chunk.
  std::vector<std::uint8_t> many(40000, 3), many32(160000, 0);
  for (std::size_t i = 0; i < 40000; ++i) many32[4 * i] = 3;
  CHECK_EQ(sha256_u32le(many.data(), many.size(), 1), sha256_hex(many32.data(), many32.size()));
  CHECK_THROWS(sha256_u32le(u8.data(), 1, 3), std::invalid_argument);
  CHECK_EQ(to_hex(0xabc, 8), std::string("00000abc"));
}
