// Error types of the native reader. Every message is one line and names the file
// section (and block, where one applies) so a corrupt file can be diagnosed from it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace qemnative {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // unreadable, malformed or corrupt input
inline constexpr int kExitUsage = 64;   // command-line usage error (EX_USAGE)

inline constexpr std::int64_t kNoBlock = -1;

// The file does not follow docs/qem-format.md: a bad magic, an offset or length
// outside the file, an inconsistent table, a checksum mismatch, undecodable data.
class FormatError : public std::runtime_error {
 public:
  FormatError(std::string section, const std::string& detail, std::int64_t block = kNoBlock);
  const std::string& section() const noexcept { return section_; }
  std::int64_t block() const noexcept { return block_; }

 private:
  std::string section_;
  std::int64_t block_;
};

// The file is a valid .qem file but uses a version or feature this reader lacks.
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The operating system refused an operation (open, read, map, write).
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The load needs more memory than this machine has (refused before allocating).
class ResourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The command line is wrong.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where in the file an error is, in the words of docs/qem-format.md section 14:
// "header", "footer", "section MODEL", "block 17", or "section BLOCK_INDEX, block 3".
std::string describe_location(const std::string& section, std::int64_t block);

}  // namespace qemnative
