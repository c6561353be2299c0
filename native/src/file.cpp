#include "qemnative/file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "qemnative/error.hpp"

namespace qemnative {

namespace {

std::string os_error(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

}  // namespace

File::File(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(os_error("cannot open", path, errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    throw IoError(os_error("cannot stat", path, err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw IoError("cannot read " + path + ": not a regular file");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::read_exact(std::uint64_t offset, std::size_t length, void* out) const {
  auto* dst = static_cast<std::uint8_t*>(out);
  std::size_t done = 0;
  while (done < length) {
    // Linux transfers at most 0x7ffff000 bytes per call; ask for no more.
    std::size_t want = length - done;
    if (want > (std::size_t{1} << 30)) want = std::size_t{1} << 30;
    ssize_t got = ::pread(fd_, dst + done, want, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(os_error("cannot read", path_, errno));
    }
    if (got == 0) {
      throw IoError("cannot read " + path_ + ": file ended at byte " +
                    std::to_string(offset + done) + " (it changed while being read)");
    }
    done += static_cast<std::size_t>(got);
  }
}

std::vector<std::uint8_t> File::read_vector(std::uint64_t offset, std::size_t length) const {
  std::vector<std::uint8_t> out(length);
  if (length) read_exact(offset, length, out.data());
  return out;
}

Mapping::Mapping(const File& file) : size_(static_cast<std::size_t>(file.size())) {
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (p == MAP_FAILED) throw IoError(os_error("cannot map", file.path(), errno));
  data_ = static_cast<const std::uint8_t*>(p);
}

Mapping::~Mapping() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

void write_file_atomic(const std::string& path, const std::uint8_t* data, std::size_t length) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(os_error("cannot create", tmp, errno));
  std::size_t done = 0;
  while (done < length) {
    std::size_t want = length - done;
    if (want > (std::size_t{1} << 30)) want = std::size_t{1} << 30;
    ssize_t put = ::write(fd, data + done, want);
    if (put < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(os_error("cannot write", tmp, err));
    }
    done += static_cast<std::size_t>(put);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(os_error("cannot flush", tmp, err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(os_error("cannot rename to", path, err));
  }
}

}  // namespace qemnative
