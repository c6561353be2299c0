#include "qemnative/bytes.hpp"

namespace qemnative {

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& section,
                          std::int64_t block) {
  if (a > std::numeric_limits<std::uint64_t>::max() - b) {
    throw FormatError(section, "size arithmetic overflows (" + std::to_string(a) + " + " +
                                   std::to_string(b) + ")",
                      block);
  }
  return a + b;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& section,
                          std::int64_t block) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
    throw FormatError(section, "size arithmetic overflows (" + std::to_string(a) + " * " +
                                   std::to_string(b) + ")",
                      block);
  }
  return a * b;
}

void check_range(std::uint64_t offset, std::uint64_t length, std::uint64_t size,
                 const std::string& section, std::int64_t block) {
  if (offset > size || length > size - offset) {
    throw FormatError(section, "bytes [" + std::to_string(offset) + ", " +
                                   std::to_string(offset) + " + " + std::to_string(length) +
                                   ") lie outside the " + std::to_string(size) +
                                   " bytes available",
                      block);
  }
}

void ByteReader::fail(const std::string& detail) const {
  throw FormatError(section_, detail, block_);
}

void ByteReader::need(std::size_t n) {
  if (n > size_ - pos_) {
    fail("needs " + std::to_string(n) + " bytes at offset " +
         std::to_string(base_offset_ + pos_) + " but only " + std::to_string(size_ - pos_) +
         " remain");
  }
}

void ByteReader::seek(std::size_t pos) {
  if (pos > size_) {
    fail("offset " + std::to_string(pos) + " is past the end (" + std::to_string(size_) +
         " bytes)");
  }
  pos_ = pos;
}

void ByteReader::skip(std::size_t n) {
  need(n);
  pos_ += n;
}

std::uint8_t ByteReader::u8() {
  need(1);
  return data_[pos_++];
}

std::uint16_t ByteReader::u16() {
  need(2);
  auto v = load_u16le(data_ + pos_);
  pos_ += 2;
  return v;
}

std::uint32_t ByteReader::u32() {
  need(4);
  auto v = load_u32le(data_ + pos_);
  pos_ += 4;
  return v;
}

std::uint64_t ByteReader::u64() {
  need(8);
  auto v = load_u64le(data_ + pos_);
  pos_ += 8;
  return v;
}

std::int64_t ByteReader::i64() { return static_cast<std::int64_t>(u64()); }

const std::uint8_t* ByteReader::bytes(std::size_t n) {
  need(n);
  const std::uint8_t* p = data_ + pos_;
  pos_ += n;
  return p;
}

ByteReader ByteReader::slice(std::size_t offset, std::size_t length,
                             const std::string& section) const {
  check_range(offset, length, size_, section_, block_);
  return ByteReader(data_ + offset, length, section, block_, base_offset_ + offset);
}

}  // namespace qemnative
