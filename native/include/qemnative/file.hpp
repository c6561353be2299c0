// Access to the bytes of one file: positioned reads (pread) that fail loudly on a
// short read, and an optional read-only memory mapping. All offsets are checked
// against the file size before any read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qemnative {

class File {
 public:
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  int fd() const noexcept { return fd_; }

  // Reads exactly `length` bytes at `offset` into `out`. The caller has checked the
  // range against size(); a short read (the file shrank) is an IoError.
  void read_exact(std::uint64_t offset, std::size_t length, void* out) const;
  std::vector<std::uint8_t> read_vector(std::uint64_t offset, std::size_t length) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A read-only private mapping of a whole file (empty files map to nothing).
class Mapping {
 public:
  explicit Mapping(const File& file);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Writes `length` bytes to `path` atomically: a temporary file in the same folder,
// fsync, then rename, so a failed run never leaves a partial or overwritten file.
void write_file_atomic(const std::string& path, const std::uint8_t* data, std::size_t length);

}  // namespace qemnative
