#include "qemnative/proc_stats.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace qemnative {

std::map<std::string, std::uint64_t> parse_proc_io(const std::string& text) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    std::string key = line.substr(0, colon);
    std::string rest = line.substr(colon + 1);
    std::size_t i = rest.find_first_not_of(" \t");
    if (i == std::string::npos) continue;
    std::uint64_t value = 0;
    bool digits = false;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) {
      value = value * 10 + static_cast<std::uint64_t>(rest[i] - '0');
      digits = true;
    }
    if (digits && rest.find_first_not_of(" \t\r", i) == std::string::npos) out[key] = value;
  }
  return out;
}

std::map<std::string, std::uint64_t> read_proc_self_io() {
  std::ifstream f("/proc/self/io");
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_proc_io(ss.str());
}

std::uint64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024u;  // Linux reports KiB
}

std::uint64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  long page = sysconf(_SC_PAGESIZE);
  return resident * static_cast<std::uint64_t>(page > 0 ? page : 4096);
}

double process_cpu_seconds() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  auto sec = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

double monotonic_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace qemnative
