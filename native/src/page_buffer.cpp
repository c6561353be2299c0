#include "qemnative/page_buffer.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "qemnative/error.hpp"

namespace qemnative {

PageBuffer::PageBuffer(std::size_t bytes, const char* what) : size_(bytes) {
  mapped_ = bytes ? bytes : 1;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw ResourceError("cannot allocate " + std::to_string(bytes) + " bytes for " + what + ": " +
                        std::strerror(errno));
  }
  data_ = static_cast<std::uint8_t*>(p);
}

PageBuffer::~PageBuffer() {
  if (data_) ::munmap(data_, mapped_);
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace qemnative
