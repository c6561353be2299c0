// The .qem container, version 1.0, as docs/qem-format.md specifies it: named
// constants and parsed structures (one per section of the document), and the
// validating parser of everything but the block bytes (section 14, steps 1-10).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qemnative/file.hpp"
#include "qemnative/json.hpp"

namespace qemnative {

// Section 1 and 3: magic numbers, sizes, version.
inline constexpr std::uint8_t kMagic[8] = {0x89, 0x51, 0x45, 0x4D, 0x0D, 0x0A, 0x1A, 0x0A};
inline constexpr std::uint8_t kFooterMagic[8] = {0x51, 0x45, 0x4D, 0x2D, 0x45, 0x4E, 0x44, 0x1A};
inline constexpr std::uint16_t kVersionMajor = 1;
inline constexpr std::uint16_t kVersionMinor = 0;  // the newest minor this reader knows
inline constexpr std::uint64_t kHeaderSize = 256;
inline constexpr std::uint64_t kFooterSize = 32;
inline constexpr std::uint64_t kHeaderChecksumOffset = 248;
inline constexpr std::uint64_t kFooterChecksumOffset = 24;
inline constexpr std::uint64_t kSectionTableOffset = 64;
inline constexpr std::uint64_t kSectionEntrySize = 24;
inline constexpr std::uint64_t kXxh3OfEmpty = 0x2D06800538D394C2ull;

// Section 3: limits that bound every allocation before data is read.
inline constexpr std::uint64_t kMaxDetectorSide = 65535;
inline constexpr std::uint64_t kMaxPixelsPerFrame = std::uint64_t{1} << 28;
inline constexpr std::uint64_t kMaxFrames = std::uint64_t{1} << 40;
inline constexpr std::uint64_t kMaxPixelsPerBlock = std::uint64_t{1} << 31;

// Section 4: the section table.
enum SectionId : unsigned {
  kMetadata = 0,
  kPixelMask = 1,
  kModel = 2,
  kBlockIndex = 3,
  kBlockChecksums = 4,
  kPayload = 5,
  kSpatialIndex = 6,
};
inline constexpr unsigned kSectionCount = 7;
inline constexpr std::uint64_t kSectionAlign = 64;
inline constexpr std::uint64_t kPayloadAlign = 4096;
inline constexpr std::uint64_t kMaxMetadataBytes = std::uint64_t{16} << 20;
const char* section_name(unsigned id);  // "METADATA", ...
std::string section_label(unsigned id);  // "section METADATA", ...

// Section 7: the model.
inline constexpr unsigned kMaxClasses = 4;
inline constexpr unsigned kSymbols = 256;
inline constexpr unsigned kProbBits = 12;
inline constexpr std::uint32_t kProbScale = 1u << kProbBits;  // M = 4096
inline constexpr std::uint64_t kModelHeaderSize = 16;
inline constexpr unsigned kGroupPixels = 8;

// Section 8 to 10: blocks.
inline constexpr std::uint64_t kBlockIndexEntrySize = 48;
inline constexpr std::uint64_t kBlockChecksumSize = 8;
inline constexpr std::uint64_t kBlockAlign = 16;
enum class BlockMode : std::uint32_t { Zero = 0, Raw = 1, Rans = 2 };
inline constexpr unsigned kLanes = 32;
inline constexpr std::uint64_t kLaneStatesBytes = 4 * kLanes;  // u32[32]
inline constexpr std::uint32_t kRansLow = 1u << 16;             // RANS_L
inline constexpr unsigned kEscapeSymbol = 255;
inline constexpr std::uint32_t kMinEscapedValue = 256;

std::uint64_t align_up(std::uint64_t x, std::uint64_t a);
const char* dtype_name(unsigned itemsize);  // "uint8", "uint16", "uint32" or nullptr

struct SectionEntry {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t xxh3 = 0;
};

struct Header {
  std::uint16_t version_major = 0;
  std::uint16_t version_minor = 0;
  std::uint64_t file_size = 0;
  std::uint64_t n_frames = 0;
  std::uint32_t scan_r = 0, scan_c = 0, det_r = 0, det_c = 0;
  std::uint8_t stored_itemsize = 0;
  std::uint8_t source_itemsize = 0;
  std::uint32_t block_frames = 0;
  std::uint32_t n_blocks = 0;
  std::array<SectionEntry, kSectionCount> sections{};
  std::uint64_t header_xxh3 = 0;
  std::uint64_t pixels() const { return std::uint64_t{det_r} * det_c; }
};

// Section 7, with the decode tables derived from the frequencies: `sym` maps each
// of the 4096 slots of a context to its symbol (one byte, so the tables of all
// contexts stay in the L1 cache), `freq_cum` holds freq[s] (low 16 bits) and cum[s]
// (high 16 bits) of each symbol.
struct Model {
  std::uint32_t n_classes = 0;
  std::uint32_t n_contexts = 0;
  std::uint32_t n_groups = 0;
  std::vector<std::uint8_t> group_class;  // [G]
  std::vector<std::uint16_t> freq;        // [C][256]
  std::vector<std::uint8_t> sym;          // [C][4096]
  std::vector<std::uint32_t> freq_cum;    // [C][256]
};

struct BlockEntry {
  std::uint64_t frame_start = 0;
  std::uint32_t n_block_frames = 0;
  BlockMode mode = BlockMode::Zero;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint32_t n_words = 0;
  std::uint32_t n_nonzero = 0;
  std::uint32_t n_escapes = 0;
  std::uint64_t extent_end() const { return align_up(offset + length, kBlockAlign); }
};

// Everything of a file but its block bytes, validated (section 14, steps 1-10).
struct QemLayout {
  Header header;
  Json metadata;
  std::vector<std::uint32_t> pixel_mask;  // empty when the section is absent (all zero)
  std::uint64_t n_masked = 0;
  Model model;
  std::vector<BlockEntry> blocks;
  std::vector<std::uint64_t> block_checksums;
  std::uint64_t payload_offset = 0;
  std::uint64_t payload_length = 0;

  std::uint64_t frame_pixels() const { return header.pixels(); }
  std::uint64_t frame_bytes() const { return header.pixels() * header.stored_itemsize; }
  std::uint64_t decoded_bytes() const { return header.n_frames * frame_bytes(); }
};

// Reads and validates header, footer, section table, section checksums, metadata,
// pixel mask, model, block index and block checksums. Throws FormatError (naming
// the section or block), UnsupportedError (a major version other than 1) or IoError.
QemLayout parse_qem_layout(const File& file);

// The parsing steps on their own, for tests: each takes the bytes it validates.
Header parse_header(const std::uint8_t* bytes, std::uint64_t actual_file_size);
void check_footer(const std::uint8_t* bytes, const Header& header);
Model parse_model(const std::uint8_t* bytes, std::uint64_t length, std::uint64_t pixels);
void check_metadata(const Json& metadata, const Header& header);
void check_metadata_mask(const Json& metadata, bool mask_present, std::uint64_t n_masked);

}  // namespace qemnative
