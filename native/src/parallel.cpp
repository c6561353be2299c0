#include "qemnative/parallel.hpp"

#include <sched.h>
#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "qemnative/error.hpp"

namespace qemnative {

namespace {

std::atomic<const MappedFaultGuard*> g_guard{nullptr};
thread_local sigjmp_buf* t_jump = nullptr;

void on_sigbus(int sig, siginfo_t* info, void*) {
  const MappedFaultGuard* guard = g_guard.load();
  const auto* at = static_cast<const unsigned char*>(info->si_addr);
  if (t_jump != nullptr && guard != nullptr && at >= guard->begin && at < guard->end) {
    siglongjmp(*t_jump, 1);
  }
  // Not ours: the default action (the faulting access runs again and kills the process).
  signal(sig, SIG_DFL);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, nullptr);
  });
}

// fn(i); false when a SIGBUS inside the guarded mapping interrupted it.
bool run_task(const std::function<void(std::size_t)>& fn, std::size_t i) {
  if (g_guard.load() == nullptr) {
    fn(i);
    return true;
  }
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    t_jump = nullptr;
    return false;
  }
  t_jump = &jump;
  fn(i);
  t_jump = nullptr;
  return true;
}

}  // namespace

MappedFaultGuard::MappedFaultGuard(const void* data, std::size_t length, std::string file)
    : begin(static_cast<const unsigned char*>(data)),
      end(static_cast<const unsigned char*>(data) + length),
      path(std::move(file)) {
  install_handler();
  g_guard.store(this);
}

MappedFaultGuard::~MappedFaultGuard() { g_guard.store(nullptr); }

unsigned default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1;
}

void parallel_for(unsigned threads, std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  if (threads == 0) threads = default_thread_count();
  if (threads > n) threads = static_cast<unsigned>(n);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> faulted{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&]() {
    while (!failed.load(std::memory_order_relaxed)) {
      std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        if (!run_task(fn, i)) {
          faulted.store(true);
          failed.store(true, std::memory_order_relaxed);
          return;
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
        return;
      }
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  if (faulted.load()) {
    const MappedFaultGuard* guard = g_guard.load();
    throw IoError("cannot read " + (guard ? guard->path : std::string("the mapped file")) +
                  ": the file shrank while it was mapped (truncated by another process?)");
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace qemnative
