// A small fork-join helper: run fn(i) for i in [0, n) on `threads` threads. Work is
// handed out one index at a time from an atomic counter (blocks differ in cost).
// The first exception stops the hand-out and is rethrown once every thread joined.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace qemnative {

// The thread count to use when none is given: the CPUs this process may run on.
unsigned default_thread_count();

void parallel_for(unsigned threads, std::size_t n, const std::function<void(std::size_t)>& fn);

// While one is alive, a SIGBUS raised inside the mapped bytes [begin, end) by a task of
// parallel_for (the file behind a mapping shrank, so its pages past the new end are gone)
// ends that task instead of the process: parallel_for then throws IoError naming `path`.
// The interrupted task's frames are abandoned (siglongjmp): what they owned is leaked,
// which is acceptable on this path because the load fails and the program exits. A
// SIGBUS anywhere else keeps its default action.
class MappedFaultGuard {
 public:
  MappedFaultGuard(const void* begin, std::size_t length, std::string path);
  ~MappedFaultGuard();
  MappedFaultGuard(const MappedFaultGuard&) = delete;
  MappedFaultGuard& operator=(const MappedFaultGuard&) = delete;

  const unsigned char* begin;
  const unsigned char* end;
  std::string path;
};

}  // namespace qemnative
