// The command line of qem-native-load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qemnative {

// One requested sample frame: a frame number, or a placeholder resolved once the
// frame count is known (FIRST = 0, MID = n / 2, LAST = n - 1).
struct FrameSpec {
  enum class Kind { Index, First, Mid, Last } kind = Kind::Index;
  std::uint64_t index = 0;
};

enum class IoMode { Pread, Mmap };

struct Options {
  std::string path;
  bool json = false;
  bool verify = true;
  bool help = false;
  bool version = false;
  std::optional<std::vector<FrameSpec>> sample_frames;  // default: FIRST, MID, LAST
  unsigned threads = 0;                                  // 0: default_thread_count()
  IoMode io = IoMode::Pread;
  std::optional<std::string> dump_path;
};

// Parses argv[1:]; throws UsageError with a one-line message.
Options parse_args(const std::vector<std::string>& args);
std::vector<FrameSpec> parse_frame_list(const std::string& text);
// Resolves the specs against n_frames; throws UsageError for a frame out of range.
std::vector<std::uint64_t> resolve_frames(const std::vector<FrameSpec>& specs,
                                          std::uint64_t n_frames);

std::string usage_text();

}  // namespace qemnative
