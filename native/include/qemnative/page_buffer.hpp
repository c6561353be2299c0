// Large buffers straight from the kernel: an anonymous private mapping, whose pages
// read as zero until written. Pages are not touched here; the threads that fill the
// buffer fault them in, in parallel. (Advising transparent huge pages was tried: it
// saved page faults when memory was unfragmented but cost up to 0.5 s of compaction
// per 300 MB on the busy development machine, so it is not used.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace qemnative {

class PageBuffer {
 public:
  PageBuffer() = default;
  // Throws ResourceError when the kernel refuses; `what` names the buffer in it.
  PageBuffer(std::size_t bytes, const char* what);
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;      // bytes asked for
  std::size_t mapped_ = 0;    // bytes mapped (at least one page)
};

}  // namespace qemnative
