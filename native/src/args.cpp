#include "qemnative/args.hpp"

#include <string>

#include "qemnative/error.hpp"

namespace qemnative {

namespace {

// A decimal number without sign, spaces or overflow.
bool parse_uint(const std::string& s, std::uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = v;
  return true;
}

}  // namespace

std::string usage_text() {
  return "usage: qem-native-load FILE [--json] [--sample-frames LIST] [--threads N]\n"
         "                       [--no-verify] [--io pread|mmap] [--dump PATH]\n"
         "\n"
         "Open, validate and fully decode a .qem file (docs/qem-format.md) on the CPU.\n"
         "\n"
         "  --json               print one JSON document (sorted keys) on stdout\n"
         "  --sample-frames LIST comma-separated frames to hash (numbers or FIRST, MID,\n"
         "                       LAST; default FIRST,MID,LAST); each hash is the SHA-256\n"
         "                       of the frame's pixels as little-endian uint32 values\n"
         "  --threads N          decoding threads (default: the CPUs this process may use)\n"
         "  --no-verify          skip the checksum verification stage\n"
         "  --io pread|mmap      read the payload with parallel pread into memory\n"
         "                       (default) or through a read-only memory mapping\n"
         "  --dump PATH          write the decoded array (stored dtype, little-endian,\n"
         "                       C order) to PATH, atomically\n"
         "  --version            print the version\n"
         "\n"
         "Exit status: 0 success, 1 unreadable or corrupt file, 64 usage error.\n";
}

std::vector<FrameSpec> parse_frame_list(const std::string& text) {
  std::vector<FrameSpec> out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                     : comma - start);
    FrameSpec spec;
    if (item == "FIRST") {
      spec.kind = FrameSpec::Kind::First;
    } else if (item == "MID") {
      spec.kind = FrameSpec::Kind::Mid;
    } else if (item == "LAST") {
      spec.kind = FrameSpec::Kind::Last;
    } else if (!parse_uint(item, spec.index)) {
      throw UsageError("--sample-frames: '" + item +
                       "' is not a frame number or FIRST, MID, LAST");
    }
    out.push_back(spec);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::uint64_t> resolve_frames(const std::vector<FrameSpec>& specs,
                                          std::uint64_t n_frames) {
  std::vector<std::uint64_t> out;
  for (const auto& s : specs) {
    if (n_frames == 0) throw UsageError("--sample-frames: the file has no frames");
    std::uint64_t f = s.index;
    switch (s.kind) {
      case FrameSpec::Kind::First: f = 0; break;
      case FrameSpec::Kind::Mid: f = n_frames / 2; break;
      case FrameSpec::Kind::Last: f = n_frames - 1; break;
      case FrameSpec::Kind::Index: break;
    }
    if (f >= n_frames) {
      throw UsageError("--sample-frames: frame " + std::to_string(f) + " is out of range (" +
                       std::to_string(n_frames) + " frames)");
    }
    out.push_back(f);
  }
  return out;
}

Options parse_args(const std::vector<std::string>& args) {
  Options opt;
  auto value_of = [&](std::size_t& i, const std::string& name) -> std::string {
    const std::string& a = args[i];
    std::string prefix = name + "=";
    if (a.compare(0, prefix.size(), prefix) == 0) return a.substr(prefix.size());
    if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
    return args[++i];
  };
  auto is_opt = [](const std::string& a, const std::string& name) {
    return a == name || a.compare(0, name.size() + 1, name + "=") == 0;
  };
  bool only_positional = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!only_positional && a == "--") {
      only_positional = true;
    } else if (!only_positional && (a == "-h" || a == "--help")) {
      opt.help = true;
    } else if (!only_positional && a == "--version") {
      opt.version = true;
    } else if (!only_positional && a == "--json") {
      opt.json = true;
    } else if (!only_positional && a == "--no-verify") {
      opt.verify = false;
    } else if (!only_positional && is_opt(a, "--sample-frames")) {
      opt.sample_frames = parse_frame_list(value_of(i, "--sample-frames"));
    } else if (!only_positional && is_opt(a, "--threads")) {
      std::string v = value_of(i, "--threads");
      std::uint64_t n = 0;
      if (!parse_uint(v, n) || n == 0 || n > 4096) {
        throw UsageError("--threads: '" + v + "' is not a whole number from 1 to 4096");
      }
      opt.threads = static_cast<unsigned>(n);
    } else if (!only_positional && is_opt(a, "--io")) {
      std::string v = value_of(i, "--io");
      if (v == "pread") {
        opt.io = IoMode::Pread;
      } else if (v == "mmap") {
        opt.io = IoMode::Mmap;
      } else {
        throw UsageError("--io: '" + v + "' is not pread or mmap");
      }
    } else if (!only_positional && is_opt(a, "--dump")) {
      opt.dump_path = value_of(i, "--dump");
      if (opt.dump_path->empty()) throw UsageError("--dump needs a path");
    } else if (!only_positional && a.size() > 1 && a[0] == '-') {
      throw UsageError("unknown option " + a);
    } else if (opt.path.empty()) {
      opt.path = a;
    } else {
      throw UsageError("more than one FILE given ('" + opt.path + "' and '" + a + "')");
    }
  }
  if (!opt.help && !opt.version && opt.path.empty()) throw UsageError("no FILE given");
  return opt;
}

}  // namespace qemnative
