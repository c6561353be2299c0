// A small fork-join helper: run fn(i) for i in [0, n) on `threads` threads. Work is
// handed out one index at a time from an atomic counter (blocks differ in cost).
// The first exception stops the hand-out and is rethrown once every thread joined.
#pragma once

#include <cstddef>
#include <functional>

namespace qemnative {

// The thread count to use when none is given: the CPUs this process may run on.
unsigned default_thread_count();

void parallel_for(unsigned threads, std::size_t n, const std::function<void(std::size_t)>& fn);

}  // namespace qemnative
