// This process's own resource counters: /proc/self/io (bytes read from storage and
// through read calls), peak and current resident set size.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace qemnative {

// The fields of /proc/self/io (rchar, wchar, syscr, syscw, read_bytes, write_bytes,
// cancelled_write_bytes); empty when the kernel does not provide the file.
std::map<std::string, std::uint64_t> read_proc_self_io();
// Parses the text of a /proc/<pid>/io file; lines that do not parse are skipped.
std::map<std::string, std::uint64_t> parse_proc_io(const std::string& text);

// Peak resident set size of this process in bytes (getrusage ru_maxrss).
std::uint64_t peak_rss_bytes();
// Current resident set size in bytes (/proc/self/statm), 0 when unavailable.
std::uint64_t current_rss_bytes();

// CPU seconds (user + system) this process's threads have used so far.
double process_cpu_seconds();

// Monotonic seconds.
double monotonic_seconds();

}  // namespace qemnative
