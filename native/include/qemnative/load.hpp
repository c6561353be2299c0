// One complete load of a .qem file, as qem-native-load performs it: open and
// validate, read the payload, verify every block, decode every block in parallel,
// hash the sample frames; each stage timed on its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qemnative/args.hpp"
#include "qemnative/json.hpp"
#include "qemnative/page_buffer.hpp"
#include "qemnative/qem_format.hpp"

namespace qemnative {

struct LoadRequest {
  std::string path;
  unsigned threads = 0;  // 0: default_thread_count()
  bool verify = true;
  IoMode io = IoMode::Pread;
  std::vector<FrameSpec> sample_frames;  // resolved against the frame count
  std::optional<std::string> dump_path;
  double start_seconds = 0;  // monotonic time the program started (the "total" origin)
  std::map<std::string, std::uint64_t> io_before;  // /proc/self/io at program start
};

struct LoadResult {
  QemLayout layout;
  PageBuffer data;  // n_frames * P * stored_itemsize bytes, little-endian, C order
  std::uint64_t data_bytes = 0;
  Json report;  // the --json document (see docs/native.md)
};

// Runs the whole load; throws FormatError, UnsupportedError, IoError, ResourceError
// or UsageError (a sample frame out of range).
LoadResult run_load(const LoadRequest& request);

// Decodes every block of `layout` from `payload` (the PAYLOAD section's bytes) into
// `out` on `threads` threads, verifying checksums first when `verify` is true.
void verify_all(const QemLayout& layout, const std::uint8_t* payload, unsigned threads);
// `out_is_zero`: `out` reads as zero already (a fresh PageBuffer).
void decode_all(const QemLayout& layout, const std::uint8_t* payload, std::uint8_t* out,
                unsigned threads, bool out_is_zero = false);

}  // namespace qemnative
