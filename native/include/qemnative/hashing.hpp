// Hashes: SHA-256 through OpenSSL's libcrypto and xxHash through libxxhash, both
// Debian packages; nothing here implements a hash by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace qemnative {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t length);
  // The lower-case hex digest; the object cannot be updated afterwards.
  std::string hexdigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(const void* data, std::size_t length);

std::uint32_t xxh32(const void* data, std::size_t length, std::uint32_t seed = 0);
std::uint64_t xxh64(const void* data, std::size_t length, std::uint64_t seed = 0);
std::uint64_t xxh3_64(const void* data, std::size_t length, std::uint64_t seed = 0);

// SHA-256 of `count` unsigned integers of `elem_size` bytes (1, 2 or 4, little-endian
// in memory) after widening each to a little-endian uint32: the sample-frame hash the
// harness compares against numpy's frame.astype("<u4").tobytes().
std::string sha256_u32le(const std::uint8_t* data, std::size_t count, unsigned elem_size);

std::string to_hex(std::uint64_t value, int width);

}  // namespace qemnative
