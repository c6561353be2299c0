// Validating parser of the .qem layout: docs/qem-format.md sections 2 to 9 and the
// validation order of section 14 (steps 1-10). Every offset and length is checked
// against the file size before anything sized by it is allocated or read.
#include "qemnative/qem_format.hpp"

#include <cstring>
#include <string>

#include "qemnative/bytes.hpp"
#include "qemnative/error.hpp"
#include "qemnative/hashing.hpp"

namespace qemnative {

namespace {

const char* const kSectionNames[kSectionCount] = {
    "METADATA", "PIXEL_MASK", "MODEL", "BLOCK_INDEX", "BLOCK_CHECKSUMS", "PAYLOAD",
    "SPATIAL_INDEX"};

std::string hex64(std::uint64_t v) { return "0x" + to_hex(v, 16); }

bool all_zero(const std::uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i]) return false;
  }
  return true;
}

// Reads [offset, offset + length) after checking it lies inside the file.
std::vector<std::uint8_t> read_checked(const File& file, std::uint64_t offset,
                                       std::uint64_t length, const std::string& where) {
  check_range(offset, length, file.size(), where);
  return file.read_vector(offset, static_cast<std::size_t>(length));
}

void require_zero_bytes(const File& file, std::uint64_t from, std::uint64_t to,
                        const std::string& where) {
  if (to <= from) return;
  auto bytes = read_checked(file, from, to - from, where);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i]) {
      throw FormatError(where, "padding byte at offset " + std::to_string(from + i) +
                                   " is " + std::to_string(bytes[i]) + ", not 0");
    }
  }
}

}  // namespace

const char* section_name(unsigned id) { return id < kSectionCount ? kSectionNames[id] : "?"; }
std::string section_label(unsigned id) { return std::string("section ") + section_name(id); }

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) {
  std::uint64_t r = x % a;
  return r ? x + (a - r) : x;
}

const char* dtype_name(unsigned itemsize) {
  switch (itemsize) {
    case 1: return "uint8";
    case 2: return "uint16";
    case 4: return "uint32";
    default: return nullptr;
  }
}

// Section 14 steps 1 to 4 (the caller has checked that 288 bytes exist).
Header parse_header(const std::uint8_t* bytes, std::uint64_t actual_file_size) {
  const std::string where = "header";
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    throw FormatError(where, "bad magic: not a .qem file");
  }
  ByteReader r(bytes, kHeaderSize, where);
  r.seek(8);
  Header h;
  h.version_major = r.u16();
  h.version_minor = r.u16();
  if (h.version_major != kVersionMajor) {
    throw UnsupportedError("header: unsupported .qem version " + std::to_string(h.version_major) +
                           "." + std::to_string(h.version_minor) +
                           "; this reader supports major version " +
                           std::to_string(kVersionMajor) + " (1.0 to 1." +
                           std::to_string(kVersionMinor) + ", and reads later 1.x files)");
  }
  h.header_xxh3 = load_u64le(bytes + kHeaderChecksumOffset);
  std::uint64_t computed = xxh3_64(bytes, kHeaderChecksumOffset);
  if (computed != h.header_xxh3) {
    throw FormatError(where, "checksum mismatch: header_xxh3 is " + hex64(h.header_xxh3) +
                                 ", the header bytes hash to " + hex64(computed));
  }
  const bool strict_reserved = h.version_minor <= kVersionMinor;
  std::uint32_t header_size = r.u32();
  h.file_size = r.u64();
  h.n_frames = r.u64();
  h.scan_r = r.u32();
  h.scan_c = r.u32();
  h.det_r = r.u32();
  h.det_c = r.u32();
  h.stored_itemsize = r.u8();
  h.source_itemsize = r.u8();
  std::uint16_t reserved50 = r.u16();
  h.block_frames = r.u32();
  h.n_blocks = r.u32();
  std::uint32_t reserved60 = r.u32();
  for (unsigned id = 0; id < kSectionCount; ++id) {
    h.sections[id].offset = r.u64();
    h.sections[id].length = r.u64();
    h.sections[id].xxh3 = r.u64();
  }
  const std::uint8_t* reserved232 = r.bytes(16);
  if (strict_reserved && (reserved50 || reserved60 || !all_zero(reserved232, 16))) {
    throw FormatError(where, "reserved field is not 0");
  }
  if (header_size != kHeaderSize) {
    throw FormatError(where, "header_size is " + std::to_string(header_size) + ", not 256");
  }
  // Step 4: the size and the field limits.
  if (h.file_size != actual_file_size) {
    throw FormatError(where, "file_size says " + std::to_string(h.file_size) +
                                 " bytes but the file has " + std::to_string(actual_file_size) +
                                 " (truncated or extended)");
  }
  if (h.scan_r < 1 || h.scan_c < 1) throw FormatError(where, "scan_r and scan_c must be >= 1");
  if (h.det_r < 1 || h.det_r > kMaxDetectorSide || h.det_c < 1 || h.det_c > kMaxDetectorSide) {
    throw FormatError(where, "det_r and det_c must be 1 to 65535 (got " +
                                 std::to_string(h.det_r) + " x " + std::to_string(h.det_c) + ")");
  }
  if (h.n_frames != std::uint64_t{h.scan_r} * h.scan_c) {
    throw FormatError(where, "n_frames " + std::to_string(h.n_frames) + " != scan_r * scan_c (" +
                                 std::to_string(h.scan_r) + " x " + std::to_string(h.scan_c) + ")");
  }
  if (h.n_frames > kMaxFrames) throw FormatError(where, "n_frames exceeds 2^40");
  if (h.pixels() > kMaxPixelsPerFrame) throw FormatError(where, "det_r * det_c exceeds 2^28");
  if (!dtype_name(h.stored_itemsize)) {
    throw FormatError(where, "stored_itemsize " + std::to_string(h.stored_itemsize) +
                                 " is not 1, 2 or 4");
  }
  if (!dtype_name(h.source_itemsize)) {
    throw FormatError(where, "source_itemsize " + std::to_string(h.source_itemsize) +
                                 " is not 1, 2 or 4");
  }
  if (h.block_frames < 1) throw FormatError(where, "block_frames must be >= 1");
  if (std::uint64_t{h.block_frames} * h.pixels() > kMaxPixelsPerBlock) {
    throw FormatError(where, "block_frames * det_r * det_c exceeds 2^31");
  }
  std::uint64_t expected_blocks = (h.n_frames + h.block_frames - 1) / h.block_frames;
  if (h.n_blocks != expected_blocks) {
    throw FormatError(where, "n_blocks is " + std::to_string(h.n_blocks) + ", ceil(n_frames / " +
                                 "block_frames) is " + std::to_string(expected_blocks));
  }
  return h;
}

// Section 14 step 5.
void check_footer(const std::uint8_t* bytes, const Header& header) {
  const std::string where = "footer";
  if (std::memcmp(bytes, kFooterMagic, sizeof kFooterMagic) != 0) {
    throw FormatError(where, "bad footer magic (the file is truncated or incomplete)");
  }
  std::uint64_t stored = load_u64le(bytes + kFooterChecksumOffset);
  std::uint64_t computed = xxh3_64(bytes, kFooterChecksumOffset);
  if (stored != computed) {
    throw FormatError(where, "checksum mismatch: footer_xxh3 is " + hex64(stored) +
                                 ", the footer bytes hash to " + hex64(computed));
  }
  if (load_u64le(bytes + 8) != header.file_size) {
    throw FormatError(where, "file_size " + std::to_string(load_u64le(bytes + 8)) +
                                 " differs from the header's " + std::to_string(header.file_size));
  }
  if (load_u64le(bytes + 16) != header.header_xxh3) {
    throw FormatError(where, "header_xxh3 differs from the header's");
  }
}

// Section 7 (step 9, model part). Builds the decode tables.
Model parse_model(const std::uint8_t* bytes, std::uint64_t length, std::uint64_t pixels) {
  const std::string where = section_label(kModel);
  if (length < kModelHeaderSize) {
    throw FormatError(where, "length " + std::to_string(length) + " is shorter than 16 bytes");
  }
  ByteReader r(bytes, static_cast<std::size_t>(length), where);
  Model m;
  m.n_classes = r.u32();
  m.n_contexts = r.u32();
  m.n_groups = r.u32();
  std::uint32_t reserved = r.u32();
  if (m.n_classes < 1 || m.n_classes > kMaxClasses) {
    throw FormatError(where, "n_classes " + std::to_string(m.n_classes) + " is not 1 to 4");
  }
  if (m.n_contexts != 2 * m.n_classes) {
    throw FormatError(where, "n_contexts " + std::to_string(m.n_contexts) + " is not 2 * n_classes");
  }
  std::uint64_t groups = (pixels + kGroupPixels - 1) / kGroupPixels;
  if (m.n_groups != groups) {
    throw FormatError(where, "n_groups " + std::to_string(m.n_groups) + " is not ceil(P / 8) = " +
                                 std::to_string(groups));
  }
  if (reserved != 0) throw FormatError(where, "reserved field is not 0");
  std::uint64_t table_offset = kModelHeaderSize + align_up(groups, 4);
  std::uint64_t expected = table_offset + 2ull * kSymbols * m.n_contexts;
  if (length != expected) {
    throw FormatError(where, "length " + std::to_string(length) + " is not 16 + align_up(G, 4) + " +
                                 "512 * C = " + std::to_string(expected));
  }
  const std::uint8_t* classes = r.bytes(static_cast<std::size_t>(groups));
  m.group_class.assign(classes, classes + groups);
  for (std::uint64_t j = 0; j < groups; ++j) {
    if (m.group_class[j] >= m.n_classes) {
      throw FormatError(where, "group_class[" + std::to_string(j) + "] is " +
                                   std::to_string(m.group_class[j]) + ", not below n_classes " +
                                   std::to_string(m.n_classes));
    }
  }
  const std::uint8_t* pad = r.bytes(static_cast<std::size_t>(table_offset - kModelHeaderSize - groups));
  if (!all_zero(pad, static_cast<std::size_t>(table_offset - kModelHeaderSize - groups))) {
    throw FormatError(where, "padding after group_class is not zero");
  }
  m.freq.resize(std::size_t{m.n_contexts} * kSymbols);
  // 4 bytes past the last slot: the vector decoder loads 4 bytes per slot lookup.
  m.sym.resize(std::size_t{m.n_contexts} * kProbScale + 4);
  m.freq_cum.resize(std::size_t{m.n_contexts} * kSymbols);
  for (std::uint32_t c = 0; c < m.n_contexts; ++c) {
    std::uint32_t cum = 0;
    for (unsigned s = 0; s < kSymbols; ++s) {
      std::uint16_t f = r.u16();
      if (f > kProbScale) {
        throw FormatError(where, "context " + std::to_string(c) + ": freq[" + std::to_string(s) +
                                     "] = " + std::to_string(f) + " exceeds 4096");
      }
      m.freq[std::size_t{c} * kSymbols + s] = f;
      if (cum + f > kProbScale) {
        throw FormatError(where, "context " + std::to_string(c) +
                                     ": frequencies sum past 4096");
      }
      std::memset(m.sym.data() + std::size_t{c} * kProbScale + cum, static_cast<int>(s), f);
      m.freq_cum[std::size_t{c} * kSymbols + s] = f | (cum << 16);
      cum += f;
    }
    if (cum != kProbScale) {
      throw FormatError(where, "context " + std::to_string(c) + ": frequencies sum to " +
                                   std::to_string(cum) + ", not 4096");
    }
  }
  return m;
}

namespace {

const Json& require_key(const Json& obj, const char* key, const std::string& where) {
  const Json* v = obj.find(key);
  if (!v) throw FormatError(where, std::string("required key '") + key + "' is missing");
  return *v;
}

void require_uint(const Json& v, std::uint64_t expected, const std::string& name,
                  const std::string& where) {
  bool ok = false;
  try {
    ok = v.is_int() && v.as_uint() == expected;
  } catch (const std::out_of_range&) {
    ok = false;
  }
  if (!ok) {
    throw FormatError(where, name + " is " + v.dump() + ", the header says " +
                                 std::to_string(expected));
  }
}

void require_pair(const Json& v, std::uint64_t a, std::uint64_t b, const std::string& name,
                  const std::string& where) {
  if (!v.is_array() || v.as_array().size() != 2) {
    throw FormatError(where, name + " is " + v.dump() + ", not a list of two integers");
  }
  require_uint(v.as_array()[0], a, name + "[0]", where);
  require_uint(v.as_array()[1], b, name + "[1]", where);
}

void require_object(const Json& v, const std::string& name, const std::string& where) {
  if (!v.is_object()) throw FormatError(where, name + " is not a JSON object");
}

}  // namespace

// Section 5 (step 8): the required keys, and those repeating the header agree with it.
void check_metadata(const Json& meta, const Header& h) {
  const std::string where = section_label(kMetadata);
  if (!meta.is_object()) throw FormatError(where, "the JSON text is not an object");
  require_pair(require_key(meta, "scan_shape", where), h.scan_r, h.scan_c, "scan_shape", where);
  require_pair(require_key(meta, "detector_shape", where), h.det_r, h.det_c, "detector_shape",
               where);
  require_uint(require_key(meta, "n_frames", where), h.n_frames, "n_frames", where);
  for (auto [key, itemsize] : {std::pair<const char*, unsigned>{"dtype", h.stored_itemsize},
                               std::pair<const char*, unsigned>{"source_dtype", h.source_itemsize}}) {
    const Json& v = require_key(meta, key, where);
    if (!v.is_string() || v.as_string() != dtype_name(itemsize)) {
      throw FormatError(where, std::string(key) + " is " + v.dump() + ", the header says \"" +
                                   dtype_name(itemsize) + "\"");
    }
  }
  require_object(require_key(meta, "pixel_mask", where), "pixel_mask", where);
  for (const char* key : {"calibration", "encoder", "detector"}) {
    require_object(require_key(meta, key, where), key, where);
  }
  const Json& source = require_key(meta, "source", where);
  require_object(source, "source", where);
  const Json& kind = require_key(source, "kind", where);
  if (!kind.is_string()) throw FormatError(where, "source.kind is not a string");
  const Json& files = require_key(source, "files", where);
  if (!files.is_array()) throw FormatError(where, "source.files is not a list");
  for (const auto& f : files.as_array()) {
    if (!f.is_string()) throw FormatError(where, "source.files holds a non-string");
  }
  for (const char* key : {"identity", "sha256"}) {
    const Json& v = require_key(source, key, where);
    if (!v.is_null() && !v.is_object()) {
      throw FormatError(where, std::string("source.") + key + " is neither an object nor null");
    }
  }
}

// Step 9 (as clarified in the spec): metadata.pixel_mask agrees with the mask.
void check_metadata_mask(const Json& meta, bool mask_present, std::uint64_t n_masked) {
  const std::string where = section_label(kMetadata);
  const Json& mask = require_key(meta, "pixel_mask", where);
  const Json& mdtype = require_key(mask, "dtype", where);
  if (!mdtype.is_string() || mdtype.as_string() != "uint32") {
    throw FormatError(where, "pixel_mask.dtype is " + mdtype.dump() + ", not \"uint32\"");
  }
  const Json& encoding = require_key(mask, "encoding", where);
  const char* expected_encoding = mask_present ? "section" : "all-zero";
  if (!encoding.is_string() || encoding.as_string() != expected_encoding) {
    throw FormatError(where, "pixel_mask.encoding is " + encoding.dump() + " but the file " +
                                 (mask_present ? "has a" : "has no") + " PIXEL_MASK section");
  }
  const Json& count = require_key(mask, "n_masked", where);
  bool ok = false;
  try {
    ok = count.is_int() && count.as_uint() == n_masked;
  } catch (const std::out_of_range&) {
    ok = false;
  }
  if (!ok) {
    throw FormatError(where, "pixel_mask.n_masked is " + count.dump() + ", the mask has " +
                                 std::to_string(n_masked) + " nonzero values");
  }
}

QemLayout parse_qem_layout(const File& file) {
  QemLayout out;
  // Step 1.
  if (file.size() < kHeaderSize + kFooterSize) {
    throw FormatError("header", "the file is " + std::to_string(file.size()) +
                                    " bytes, shorter than a header and footer (288 bytes): "
                                    "not a .qem file");
  }
  // Steps 2-4.
  auto head = file.read_vector(0, kHeaderSize);
  out.header = parse_header(head.data(), file.size());
  Header& h = out.header;
  // Step 5.
  auto foot = file.read_vector(file.size() - kFooterSize, kFooterSize);
  check_footer(foot.data(), h);

  // Step 6: presence, length rules and canonical placement (section 2 and 4).
  const std::uint64_t pixels = h.pixels();
  const std::uint64_t groups = (pixels + kGroupPixels - 1) / kGroupPixels;
  const std::uint64_t data_end = file.size() - kFooterSize;
  std::uint64_t end = kHeaderSize;
  for (unsigned id = 0; id < kSectionCount; ++id) {
    const SectionEntry& e = h.sections[id];
    const std::string where = section_label(id);
    bool present = id == kPayload || e.length > 0;
    if (!present) {
      if (e.offset || e.xxh3) {
        throw FormatError(where, "absent (length 0) but its table entry is not all zero");
      }
      bool required = id == kMetadata || id == kModel || id == kBlockIndex ||
                      id == kBlockChecksums;
      if (required) throw FormatError(where, "required section is missing");
      continue;
    }
    switch (id) {
      case kMetadata:
        if (e.length > kMaxMetadataBytes) throw FormatError(where, "longer than 16 MiB");
        break;
      case kPixelMask:
        if (e.length != 4 * pixels) {
          throw FormatError(where, "length " + std::to_string(e.length) + " is not 4 * P = " +
                                       std::to_string(4 * pixels));
        }
        break;
      case kModel: {
        // The exact formula needs n_contexts, which is inside the section: bound it
        // here by the largest model, check it exactly in parse_model.
        std::uint64_t largest = kModelHeaderSize + align_up(groups, 4) + 512ull * 2 * kMaxClasses;
        if (e.length > largest) {
          throw FormatError(where, "length " + std::to_string(e.length) +
                                       " exceeds the largest possible model (" +
                                       std::to_string(largest) + ")");
        }
        break;
      }
      case kBlockIndex:
        if (e.length != kBlockIndexEntrySize * h.n_blocks) {
          throw FormatError(where, "length " + std::to_string(e.length) +
                                       " is not 48 * n_blocks = " +
                                       std::to_string(kBlockIndexEntrySize * h.n_blocks));
        }
        break;
      case kBlockChecksums:
        if (e.length != kBlockChecksumSize * h.n_blocks) {
          throw FormatError(where, "length " + std::to_string(e.length) +
                                       " is not 8 * n_blocks = " +
                                       std::to_string(kBlockChecksumSize * h.n_blocks));
        }
        break;
      case kPayload:
        if (e.xxh3 != 0) throw FormatError(where, "xxh3 field must be 0");
        break;
      case kSpatialIndex:
        if (h.version_minor <= kVersionMinor) {
          throw FormatError(where, "must be absent in version 1.0");
        }
        break;
      default: break;
    }
    std::uint64_t align = id == kPayload ? kPayloadAlign : kSectionAlign;
    std::uint64_t expected = align_up(end, align);
    if (e.offset != expected) {
      throw FormatError(where, "offset " + std::to_string(e.offset) + " is not the canonical " +
                                   std::to_string(expected));
    }
    if (e.offset > data_end || e.length > data_end - e.offset) {
      throw FormatError(where, "bytes [" + std::to_string(e.offset) + ", +" +
                                   std::to_string(e.length) + ") run past the footer at " +
                                   std::to_string(data_end));
    }
    require_zero_bytes(file, end, e.offset, where);
    end = e.offset + e.length;
  }
  std::uint64_t footer_offset = align_up(end, kSectionAlign);
  if (footer_offset != data_end) {
    throw FormatError("footer", "starts at " + std::to_string(data_end) +
                                    ", the canonical layout puts it at " +
                                    std::to_string(footer_offset));
  }
  require_zero_bytes(file, end, footer_offset, "footer");

  // Step 7: section checksums (the payload's blocks carry their own).
  std::vector<std::uint8_t> contents[kSectionCount];
  for (unsigned id = 0; id < kSectionCount; ++id) {
    const SectionEntry& e = h.sections[id];
    if (id == kPayload || e.length == 0) continue;
    contents[id] = read_checked(file, e.offset, e.length, section_label(id));
    std::uint64_t computed = xxh3_64(contents[id].data(), contents[id].size());
    if (computed != e.xxh3) {
      throw FormatError(section_label(id), "checksum mismatch: the table says " + hex64(e.xxh3) +
                                               ", the bytes hash to " + hex64(computed));
    }
  }

  // Step 8: metadata.
  const std::string meta_where = section_label(kMetadata);
  try {
    std::string text(contents[kMetadata].begin(), contents[kMetadata].end());
    out.metadata = parse_json(text);
  } catch (const std::invalid_argument& e) {
    throw FormatError(meta_where, std::string("not valid JSON: ") + e.what());
  }
  check_metadata(out.metadata, h);
  // Step 9: pixel mask (and the metadata's statement about it), then the model.
  const bool mask_present = h.sections[kPixelMask].length > 0;
  if (mask_present) {
    const auto& raw = contents[kPixelMask];
    out.pixel_mask.resize(static_cast<std::size_t>(pixels));
    for (std::size_t p = 0; p < pixels; ++p) {
      out.pixel_mask[p] = load_u32le(raw.data() + 4 * p);
      if (out.pixel_mask[p]) ++out.n_masked;
    }
    if (out.n_masked == 0) throw FormatError(section_label(kPixelMask), "present but all zero");
  }
  check_metadata_mask(out.metadata, mask_present, out.n_masked);
  out.model = parse_model(contents[kModel].data(), contents[kModel].size(), pixels);

  // Step 10: block index and its placement in the payload (section 8 and 10).
  const std::string bi = section_label(kBlockIndex);
  out.payload_offset = h.sections[kPayload].offset;
  out.payload_length = h.sections[kPayload].length;
  ByteReader r(contents[kBlockIndex].data(), contents[kBlockIndex].size(), bi);
  out.blocks.resize(h.n_blocks);
  std::uint64_t next = out.payload_offset;
  const std::uint64_t w = h.stored_itemsize;
  for (std::uint32_t b = 0; b < h.n_blocks; ++b) {
    BlockEntry& e = out.blocks[b];
    auto fail = [&](const std::string& detail) -> void { throw FormatError(bi, detail, b); };
    e.frame_start = r.u64();
    e.n_block_frames = r.u32();
    std::uint32_t mode = r.u32();
    e.offset = r.u64();
    e.length = r.u64();
    e.n_words = r.u32();
    e.n_nonzero = r.u32();
    e.n_escapes = r.u32();
    std::uint32_t reserved = r.u32();
    std::uint64_t start = std::uint64_t{b} * h.block_frames;
    if (e.frame_start != start) {
      fail("frame_start " + std::to_string(e.frame_start) + " is not b * block_frames = " +
           std::to_string(start));
    }
    std::uint64_t n = std::min<std::uint64_t>(h.block_frames, h.n_frames - start);
    if (e.n_block_frames != n) {
      fail("n_block_frames " + std::to_string(e.n_block_frames) + " is not " + std::to_string(n));
    }
    if (mode > static_cast<std::uint32_t>(BlockMode::Rans)) {
      fail("mode " + std::to_string(mode) + " is not 0 (ZERO), 1 (RAW) or 2 (RANS)");
    }
    e.mode = static_cast<BlockMode>(mode);
    if (reserved != 0) fail("reserved field is not 0");
    const std::uint64_t count = n * pixels;  // <= 2^31 by the header limits
    std::uint64_t expected_length = 0;
    if (e.mode == BlockMode::Rans) {
      if (e.n_nonzero > count) fail("n_nonzero exceeds the block's pixel count");
      if (e.n_escapes > e.n_nonzero) fail("n_escapes exceeds n_nonzero");
      if (w == 1 && e.n_escapes != 0) fail("n_escapes must be 0 for uint8 data");
      if (e.n_words > n * groups + e.n_nonzero) {
        fail("n_words " + std::to_string(e.n_words) + " exceeds one word per symbol");
      }
      expected_length = align_up(kLaneStatesBytes + 2ull * e.n_words, 4) + e.n_escapes * w;
    } else {
      if (e.n_words || e.n_nonzero || e.n_escapes) {
        fail("n_words, n_nonzero and n_escapes must be 0 for a ZERO or RAW block");
      }
      expected_length = e.mode == BlockMode::Raw ? count * w : 0;
    }
    if (e.length != expected_length) {
      fail("length " + std::to_string(e.length) + " is not the " +
           (e.mode == BlockMode::Rans ? std::string("RANS") :
            e.mode == BlockMode::Raw ? std::string("RAW") : std::string("ZERO")) +
           " length " + std::to_string(expected_length));
    }
    if (e.offset != next) {
      fail("offset " + std::to_string(e.offset) + " is not the canonical " + std::to_string(next));
    }
    // The extent must lie inside the payload section before it is ever read.
    std::uint64_t extent_end = align_up(checked_add(e.offset, e.length, bi, b), kBlockAlign);
    if (extent_end > out.payload_offset + out.payload_length) {
      fail("bytes run past the end of the PAYLOAD section");
    }
    next = extent_end;
  }
  if (next - out.payload_offset != out.payload_length) {
    throw FormatError(section_label(kPayload),
                      "length " + std::to_string(out.payload_length) + " is not the " +
                          std::to_string(next - out.payload_offset) + " bytes its blocks occupy");
  }
  // Section 9: the block checksums, kept for verification.
  out.block_checksums.resize(h.n_blocks);
  for (std::uint32_t b = 0; b < h.n_blocks; ++b) {
    out.block_checksums[b] = load_u64le(contents[kBlockChecksums].data() + 8ull * b);
  }
  return out;
}

}  // namespace qemnative
