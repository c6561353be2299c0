#include "qemnative/load.hpp"

#include <unistd.h>

#include <algorithm>

#include "qemnative/error.hpp"
#include "qemnative/file.hpp"
#include "qemnative/hashing.hpp"
#include "qemnative/parallel.hpp"
#include "qemnative/proc_stats.hpp"
#include "qemnative/qem_decode.hpp"

namespace qemnative {

namespace {

constexpr std::uint64_t kReadChunk = std::uint64_t{8} << 20;

std::uint64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

Json io_json(const std::map<std::string, std::uint64_t>& io) {
  if (io.empty()) return Json(nullptr);
  Json::Object obj;
  for (const auto& [k, v] : io) obj[k] = Json(v);
  return Json(std::move(obj));
}

}  // namespace

void verify_all(const QemLayout& layout, const std::uint8_t* payload, unsigned threads) {
  parallel_for(threads, layout.blocks.size(), [&](std::size_t b) {
    const BlockEntry& e = layout.blocks[b];
    verify_block(layout, static_cast<std::uint32_t>(b), payload + (e.offset - layout.payload_offset));
  });
}

void decode_all(const QemLayout& layout, const std::uint8_t* payload, std::uint8_t* out,
                unsigned threads, bool out_is_zero) {
  const std::uint64_t frame_bytes = layout.frame_bytes();
  parallel_for(threads, layout.blocks.size(), [&](std::size_t b) {
    thread_local DecodeScratch scratch;
    const BlockEntry& e = layout.blocks[b];
    decode_block(layout, static_cast<std::uint32_t>(b), payload + (e.offset - layout.payload_offset),
                 out + e.frame_start * frame_bytes, scratch, out_is_zero);
  });
}

LoadResult run_load(const LoadRequest& req) {
  LoadResult result;
  const unsigned threads = req.threads ? req.threads : default_thread_count();
  Json::Object stages;
  Json::Object stages_cpu;  // CPU seconds of all threads per stage: robust on a busy host
  double cpu = process_cpu_seconds();
  auto end_cpu_stage = [&](const char* name) {
    double now_cpu = process_cpu_seconds();
    stages_cpu[name] = Json(now_cpu - cpu);
    cpu = now_cpu;
  };

  // Stage open: header to block checksums, section 14 steps 1-10.
  double t = monotonic_seconds();
  File file(req.path);
  result.layout = parse_qem_layout(file);
  const QemLayout& layout = result.layout;
  const Header& h = layout.header;
  std::vector<std::uint64_t> sample = resolve_frames(req.sample_frames, h.n_frames);
  const std::uint64_t decoded = layout.decoded_bytes();
  const std::uint64_t staged = req.io == IoMode::Pread ? layout.payload_length : 0;
  const std::uint64_t memory = physical_memory_bytes();
  if (memory && decoded + staged > memory) {
    throw ResourceError("decoding " + req.path + " needs " + std::to_string(decoded + staged) +
                        " bytes of memory, this machine has " + std::to_string(memory));
  }
  double now = monotonic_seconds();
  stages["open"] = Json(now - t);
  end_cpu_stage("open");

  // Stage read: the payload into memory (pread) or mapped (mmap).
  t = now;
  PageBuffer staged_payload;
  std::unique_ptr<Mapping> mapping;
  std::unique_ptr<MappedFaultGuard> fault_guard;  // SIGBUS in the mapping: an IoError
  const std::uint8_t* payload = nullptr;
  if (req.io == IoMode::Pread) {
    staged_payload = PageBuffer(static_cast<std::size_t>(layout.payload_length), "the payload");
    const std::uint64_t chunks = (layout.payload_length + kReadChunk - 1) / kReadChunk;
    parallel_for(threads, static_cast<std::size_t>(chunks), [&](std::size_t c) {
      std::uint64_t off = c * kReadChunk;
      std::uint64_t len = std::min(kReadChunk, layout.payload_length - off);
      file.read_exact(layout.payload_offset + off, static_cast<std::size_t>(len),
                      staged_payload.data() + off);
    });
    payload = staged_payload.data();
  } else {
    mapping = std::make_unique<Mapping>(file);
    payload = mapping->data() + layout.payload_offset;
    fault_guard = std::make_unique<MappedFaultGuard>(mapping->data(), mapping->size(), req.path);
  }
  now = monotonic_seconds();
  stages["read"] = Json(now - t);
  end_cpu_stage("read");

  // Stage verify: every block's checksum and trailing padding.
  t = now;
  if (req.verify) verify_all(layout, payload, threads);
  now = monotonic_seconds();
  stages["verify"] = Json(now - t);
  end_cpu_stage("verify");

  // Stage decode: every block, in parallel, into one array.
  t = now;
  result.data = PageBuffer(static_cast<std::size_t>(decoded), "the decoded array");
  result.data_bytes = decoded;
  decode_all(layout, payload, result.data.data(), threads, /*out_is_zero=*/true);
  now = monotonic_seconds();
  stages["decode"] = Json(now - t);
  end_cpu_stage("decode");
  staged_payload = PageBuffer();
  fault_guard.reset();
  mapping.reset();

  // Stage hash: the sample frames as little-endian uint32.
  t = now;
  Json::Array frames_json, hashes_json;
  for (std::uint64_t f : sample) {
    frames_json.emplace_back(f);
    hashes_json.emplace_back(sha256_u32le(result.data.data() + f * layout.frame_bytes(),
                                          static_cast<std::size_t>(layout.frame_pixels()),
                                          h.stored_itemsize));
  }
  now = monotonic_seconds();
  stages["hash"] = Json(now - t);
  end_cpu_stage("hash");
  stages["total"] = Json(now - req.start_seconds);

  if (req.dump_path) write_file_atomic(*req.dump_path, result.data.data(), decoded);

  std::uint64_t counts[3] = {0, 0, 0};
  for (const auto& e : layout.blocks) ++counts[static_cast<unsigned>(e.mode)];
  Json doc;
  doc["program"] = Json("qem-native-load");
  doc["program_version"] = Json(QEM_NATIVE_VERSION);
  doc["path"] = Json(req.path);
  doc["file_bytes"] = Json(file.size());
  doc["format_version"] = Json(std::to_string(h.version_major) + "." +
                               std::to_string(h.version_minor));
  doc["shape"] = Json(Json::Array{Json(h.scan_r), Json(h.scan_c), Json(h.det_r), Json(h.det_c)});
  doc["n_frames"] = Json(h.n_frames);
  doc["dtype"] = Json(dtype_name(h.stored_itemsize));
  doc["source_dtype"] = Json(dtype_name(h.source_itemsize));
  doc["n_blocks"] = Json(h.n_blocks);
  doc["block_frames"] = Json(h.block_frames);
  doc["block_modes"] = Json(Json::Object{{"zero", Json(counts[0])}, {"raw", Json(counts[1])},
                                         {"rans", Json(counts[2])}});
  doc["payload_bytes"] = Json(layout.payload_length);
  doc["n_masked_pixels"] = Json(layout.n_masked);
  doc["threads"] = Json(threads);
  doc["io_mode"] = Json(req.io == IoMode::Pread ? "pread" : "mmap");
  doc["verified"] = Json(req.verify);
  doc["stages"] = Json(std::move(stages));
  stages_cpu["total"] = Json(cpu);  // since the process started
  doc["stages_cpu"] = Json(std::move(stages_cpu));
  doc["decoded_bytes"] = Json(decoded);
  doc["resident_bytes"] = Json(decoded);
  doc["sample_frames"] = Json(std::move(frames_json));
  doc["sample_hashes_u32_le"] = Json(std::move(hashes_json));
  doc["io_before"] = io_json(req.io_before);
  result.report = std::move(doc);
  return result;
}

}  // namespace qemnative
