// Bounds-checked little-endian reading of byte ranges. Every read names the section
// it belongs to, so an out-of-range offset becomes a FormatError naming that section
// instead of a read past the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "qemnative/error.hpp"

namespace qemnative {

// a + b, or a FormatError naming `section` when the sum overflows 64 bits.
std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& section,
                          std::int64_t block = kNoBlock);
// a * b, or a FormatError naming `section` when the product overflows 64 bits.
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& section,
                          std::int64_t block = kNoBlock);
// Throws a FormatError unless [offset, offset + length) lies inside [0, size).
void check_range(std::uint64_t offset, std::uint64_t length, std::uint64_t size,
                 const std::string& section, std::int64_t block = kNoBlock);

inline std::uint16_t load_u16le(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline std::uint32_t load_u32le(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
inline std::uint64_t load_u64le(const std::uint8_t* p) {
  return static_cast<std::uint64_t>(load_u32le(p)) |
         (static_cast<std::uint64_t>(load_u32le(p + 4)) << 32);
}

// A cursor over a byte range that belongs to one named section of the file.
class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size, std::string section,
             std::int64_t block = kNoBlock, std::uint64_t base_offset = 0)
      : data_(data), size_(size), pos_(0), section_(std::move(section)), block_(block),
        base_offset_(base_offset) {}

  std::size_t size() const noexcept { return size_; }
  std::size_t position() const noexcept { return pos_; }
  std::size_t remaining() const noexcept { return size_ - pos_; }
  const std::string& section() const noexcept { return section_; }
  const std::uint8_t* data() const noexcept { return data_; }

  void seek(std::size_t pos);
  void skip(std::size_t n);
  std::uint8_t u8();
  std::uint16_t u16();
  std::uint32_t u32();
  std::uint64_t u64();
  std::int64_t i64();
  // A pointer to the next n bytes (valid while the underlying buffer lives).
  const std::uint8_t* bytes(std::size_t n);
  // A reader over [offset, offset + length) of this one, for a named sub-section.
  ByteReader slice(std::size_t offset, std::size_t length, const std::string& section) const;
  // Throws a FormatError naming this section with `detail`.
  [[noreturn]] void fail(const std::string& detail) const;

 private:
  void need(std::size_t n);
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_;
  std::string section_;
  std::int64_t block_;
  std::uint64_t base_offset_;  // file offset of data_[0], for messages
};

}  // namespace qemnative
