// qem-native-load: open, validate, verify and fully decode a .qem file on the CPU
// and report what it cost. See docs/native.md.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "qemnative/args.hpp"
#include "qemnative/error.hpp"
#include "qemnative/load.hpp"
#include "qemnative/parallel.hpp"
#include "qemnative/proc_stats.hpp"

using namespace qemnative;

namespace {

int fail(const std::string& path, const std::string& message, int code) {
  std::string line = "qem-native-load: " + (path.empty() ? "" : path + ": ") + message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';  // one line, always
  }
  std::cerr << line << "\n";
  return code;
}

// The section a FormatError names, as the spec's section names: "header", "footer",
// "METADATA", ..., and "PAYLOAD" for a block's own bytes.
std::string section_key(const FormatError& e) {
  const std::string& s = e.section();
  if (s.empty()) return "PAYLOAD";
  const std::string prefix = "section ";
  return s.compare(0, prefix.size(), prefix) == 0 ? s.substr(prefix.size()) : s;
}

// With --json a failure is also one JSON line on stdout, for programs that call us.
void print_error_json(const std::string& kind, const std::string& message,
                      const FormatError* format) {
  Json err;
  err["kind"] = Json(kind);
  err["message"] = Json(message);
  err["section"] = format ? Json(section_key(*format)) : Json(nullptr);
  err["block"] = format && format->block() != kNoBlock ? Json(format->block()) : Json(nullptr);
  Json doc;
  doc["error"] = std::move(err);
  std::string text = doc.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void print_summary(const Json& doc) {
  const Json& stages = *doc.find("stages");
  auto sec = [&](const char* k) { return stages.find(k)->as_double(); };
  const auto& shape = doc.find("shape")->as_array();
  std::printf("%s: %llu x %llu scan of %llu x %llu %s (source %s), %llu blocks\n",
              doc.find("path")->as_string().c_str(),
              static_cast<unsigned long long>(shape[0].as_uint()),
              static_cast<unsigned long long>(shape[1].as_uint()),
              static_cast<unsigned long long>(shape[2].as_uint()),
              static_cast<unsigned long long>(shape[3].as_uint()),
              doc.find("dtype")->as_string().c_str(), doc.find("source_dtype")->as_string().c_str(),
              static_cast<unsigned long long>(doc.find("n_blocks")->as_uint()));
  double decoded = static_cast<double>(doc.find("decoded_bytes")->as_uint());
  std::printf("open %.4f s, read %.4f s, verify %.4f s, decode %.4f s (%.1f MB/s decoded), "
              "total %.4f s on %llu threads\n",
              sec("open"), sec("read"), sec("verify"), sec("decode"),
              sec("decode") > 0 ? decoded / sec("decode") / 1e6 : 0.0, sec("total"),
              static_cast<unsigned long long>(doc.find("threads")->as_uint()));
  const auto& frames = doc.find("sample_frames")->as_array();
  const auto& hashes = doc.find("sample_hashes_u32_le")->as_array();
  for (std::size_t i = 0; i < frames.size(); ++i) {
    std::printf("frame %llu sha256(u32 le) %s\n",
                static_cast<unsigned long long>(frames[i].as_uint()),
                hashes[i].as_string().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double start = monotonic_seconds();
  auto io_before = read_proc_self_io();
  Options opt;
  try {
    opt = parse_args(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::cerr << usage_text().substr(0, usage_text().find('\n')) << "\n";
    return fail("", e.what(), kExitUsage);
  }
  if (opt.help) {
    std::cout << usage_text();
    return kExitOk;
  }
  if (opt.version) {
    std::cout << "qem-native-load " << QEM_NATIVE_VERSION << " (.qem format 1.0)\n";
    return kExitOk;
  }
  LoadRequest req;
  req.path = opt.path;
  req.threads = opt.threads;
  req.verify = opt.verify;
  req.io = opt.io;
  req.sample_frames = opt.sample_frames.value_or(
      std::vector<FrameSpec>{{FrameSpec::Kind::First, 0}, {FrameSpec::Kind::Mid, 0},
                             {FrameSpec::Kind::Last, 0}});
  req.dump_path = opt.dump_path;
  req.start_seconds = start;
  req.io_before = io_before;
  try {
    LoadResult result = run_load(req);
    Json& doc = result.report;
    auto io_after = read_proc_self_io();
    Json::Object io;
    for (const auto& [k, v] : io_after) io[k] = Json(v);
    doc["io_after"] = io_after.empty() ? Json(nullptr) : Json(std::move(io));
    doc["peak_rss_bytes"] = Json(peak_rss_bytes());
    doc["rss_bytes"] = Json(current_rss_bytes());
    if (opt.json) {
      std::string text = doc.dump();
      text += "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      print_summary(doc);
    }
    if (std::fflush(stdout) != 0) return fail(opt.path, "cannot write the output", kExitFailure);
    return kExitOk;
  } catch (const UsageError& e) {
    if (opt.json) print_error_json("usage", e.what(), nullptr);
    return fail(opt.path, e.what(), kExitUsage);
  } catch (const FormatError& e) {
    if (opt.json) print_error_json("format", e.what(), &e);
    return fail(opt.path, e.what(), kExitFailure);
  } catch (const UnsupportedError& e) {
    if (opt.json) print_error_json("unsupported_version", e.what(), nullptr);
    return fail(opt.path, e.what(), kExitFailure);
  } catch (const IoError& e) {
    if (opt.json) print_error_json("io", e.what(), nullptr);
    return fail("", e.what(), kExitFailure);
  } catch (const ResourceError& e) {
    if (opt.json) print_error_json("resource", e.what(), nullptr);
    return fail("", e.what(), kExitFailure);
  }
}
