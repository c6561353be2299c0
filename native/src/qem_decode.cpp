// The block decoder of docs/qem-format.md section 12, written for speed on one core:
// byte-sized slot tables (all contexts stay in the L1 cache), a branch-free
// renormalisation, phase B walking only the set bits of each group's mask. (Decoding in
// 32-symbol rounds, as a GPU does, was tried and was not faster on the CPU.)
#include "qemnative/qem_decode.hpp"

#include <array>
#include <cstring>
#include <string>

#include "qemnative/bytes.hpp"
#include "qemnative/error.hpp"
#include "qemnative/hashing.hpp"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "qem-native stores decoded counts in host order and assumes a little-endian host"
#endif

namespace qemnative {

namespace {

// Set bits of each byte value (no popcount instruction is assumed on the target).
constexpr std::array<std::uint8_t, 256> make_bit_count() {
  std::array<std::uint8_t, 256> t{};
  for (unsigned v = 0; v < 256; ++v) {
    unsigned n = 0;
    for (unsigned b = v; b; b >>= 1) n += b & 1u;
    t[v] = static_cast<std::uint8_t>(n);
  }
  return t;
}
constexpr std::array<std::uint8_t, 256> kBitCount = make_bit_count();

// For each byte value, the positions of its set bits, ascending (unused entries 0).
constexpr std::array<std::array<std::uint8_t, 8>, 256> make_bit_positions() {
  std::array<std::array<std::uint8_t, 8>, 256> t{};
  for (unsigned v = 0; v < 256; ++v) {
    unsigned k = 0;
    for (unsigned i = 0; i < 8; ++i) {
      if (v & (1u << i)) t[v][k++] = static_cast<std::uint8_t>(i);
    }
  }
  return t;
}
constexpr std::array<std::array<std::uint8_t, 8>, 256> kBitPositions = make_bit_positions();

[[noreturn]] void block_error(std::uint32_t b, const std::string& detail) {
  throw FormatError("", detail, b);
}

// The rANS state of the 32 lanes and the shared word stream of one block.
//
// The renormalisation read is branch-free: a state that needs a word takes
// words[pos] (or a zero stand-in once the stream is exhausted) and pos advances by
// one. An exhausted stream shows as pos > n_words; the caller checks that at the end
// of every frame of phase A, before raising any other error and at the end of the
// block, which reports the same first error as the sequential algorithm of section 12
// (exhaustion can only have happened at or before the symbol being checked).
struct LaneDecoder {
  std::uint32_t x[kLanes];
  const std::uint8_t* words;  // u16 little-endian
  std::uint32_t n_words;
  std::uint32_t pos = 0;
  std::uint32_t block;

  bool exhausted() const { return pos > n_words; }
  void check_words() const {
    if (exhausted()) block_error(block, "word stream exhausted");
  }

  // Section 11: decode one symbol of context c, whose tables are `sym` and `freq_cum`.
  inline unsigned decode(unsigned lane, const std::uint8_t* sym, const std::uint32_t* freq_cum) {
    static const std::uint8_t kZeroWord[2] = {0, 0};
    std::uint32_t state = x[lane];
    std::uint32_t slot = state & (kProbScale - 1);
    unsigned s = sym[slot];
    std::uint32_t fc = freq_cum[s];
    state = (fc & 0xFFFF) * (state >> kProbBits) + slot - (fc >> 16);
    const std::uint8_t* src = pos < n_words ? words + 2 * std::size_t{pos} : kZeroWord;
    std::uint32_t word = load_u16le(src);
    bool renormalise = state < kRansLow;
    x[lane] = renormalise ? (state << 16) | word : state;
    pos += renormalise ? 1u : 0u;
    return s;
  }
};

template <typename T>
void decode_rans(const QemLayout& layout, std::uint32_t b, const std::uint8_t* block, T* out,
                 DecodeScratch& scratch, bool out_is_zero) {
  const BlockEntry& e = layout.blocks[b];
  const Model& model = layout.model;
  const std::uint64_t P = layout.frame_pixels();
  const std::uint32_t G = model.n_groups;
  const std::uint64_t n = e.n_block_frames;
  const std::uint64_t w = sizeof(T);

  LaneDecoder dec;
  dec.block = b;
  for (unsigned l = 0; l < kLanes; ++l) {
    dec.x[l] = load_u32le(block + 4 * l);
    if (dec.x[l] < kRansLow) {
      block_error(b, "initial state of lane " + std::to_string(l) + " is below 2^16");
    }
  }
  dec.words = block + kLaneStatesBytes;
  dec.n_words = e.n_words;
  const std::uint64_t words_end = kLaneStatesBytes + 2ull * e.n_words;
  const std::uint64_t escapes_at = align_up(words_end, 4);
  for (std::uint64_t i = words_end; i < escapes_at; ++i) {
    if (block[i]) block_error(b, "padding between words and escapes is not zero");
  }
  const std::uint8_t* escapes = block + escapes_at;

  const std::uint8_t* sym_tables = model.sym.data();
  const std::uint32_t* fc_tables = model.freq_cum.data();
  // Bits of the last group that address pixels past P must be 0.
  const unsigned tail = static_cast<unsigned>(P % kGroupPixels);
  const unsigned tail_forbidden = tail ? (0xFFu << tail) & 0xFFu : 0u;

  // Phase A: the masks, symbol a = t * G + j on lane a mod 32.
  scratch.masks.resize(static_cast<std::size_t>(n) * G);
  std::uint8_t* masks = scratch.masks.data();
  std::uint64_t nonzero = 0;
  unsigned lane = 0;
  for (std::uint64_t t = 0; t < n; ++t) {
    std::uint8_t* frame_masks = masks + t * G;
    for (std::uint32_t j = 0; j < G; ++j) {
      const std::size_t c = std::size_t{2} * model.group_class[j];
      unsigned m = dec.decode(lane, sym_tables + c * kProbScale, fc_tables + c * kSymbols);
      lane = (lane + 1) & (kLanes - 1);
      frame_masks[j] = static_cast<std::uint8_t>(m);
      nonzero += kBitCount[m];
    }
    dec.check_words();
    if (tail_forbidden && (frame_masks[G - 1] & tail_forbidden)) {
      block_error(b, "mask padding bit set (frame " + std::to_string(e.frame_start + t) + ")");
    }
  }
  if (nonzero != e.n_nonzero) {
    block_error(b, "nonzero count: the masks have " + std::to_string(nonzero) +
                       " set bits, the block index says " + std::to_string(e.n_nonzero));
  }

  // Phase B's symbols in order: the nonzero pixels (frame, group, bit ascending),
  // listed without data-dependent branches: each group writes the positions of all
  // eight of its mask's bits from a table, and the list advances by the bit count.
  scratch.value_pixel.resize(static_cast<std::size_t>(nonzero) + kGroupPixels);
  scratch.value_context.resize(static_cast<std::size_t>(nonzero) + kGroupPixels);
  std::uint32_t* value_pixel = scratch.value_pixel.data();
  std::uint8_t* value_context = scratch.value_context.data();
  std::size_t listed = 0;
  for (std::uint64_t t = 0; t < n; ++t) {
    const std::uint8_t* frame_masks = masks + t * G;
    const auto frame_base = static_cast<std::uint32_t>(t * P);
    for (std::uint32_t j = 0; j < G; ++j) {
      const unsigned m = frame_masks[j];
      if (!m) continue;
      const std::uint8_t* bits = kBitPositions[m].data();
      const std::uint32_t base = frame_base + j * kGroupPixels;
      const auto c = static_cast<std::uint8_t>(2 * model.group_class[j] + 1);
      for (unsigned i = 0; i < kGroupPixels; ++i) {
        value_pixel[listed + i] = base + bits[i];
        value_context[listed + i] = c;
      }
      listed += kBitCount[m];
    }
  }

  // Phase B: the values, symbol v on lane v mod 32.
  if (!out_is_zero) std::memset(out, 0, static_cast<std::size_t>(n * P * w));
  std::uint32_t used_escapes = 0;
  for (std::size_t v = 0; v < listed; ++v) {
    const std::size_t c = value_context[v];
    const unsigned s = dec.decode(static_cast<unsigned>(v & (kLanes - 1)),
                                  sym_tables + c * kProbScale, fc_tables + c * kSymbols);
    std::uint32_t value = s + 1;
    if (s == kEscapeSymbol) {
      if (used_escapes == e.n_escapes) {
        dec.check_words();
        block_error(b, "escape array exhausted");
      }
      const std::uint8_t* p = escapes + std::size_t{used_escapes} * w;
      value = w == 1 ? p[0] : w == 2 ? load_u16le(p) : load_u32le(p);
      ++used_escapes;
      if (value < kMinEscapedValue) {
        dec.check_words();
        block_error(b, "escaped value below 256");
      }
    }
    out[value_pixel[v]] = static_cast<T>(value);
  }
  dec.check_words();
  if (used_escapes != e.n_escapes) {
    block_error(b, "unused escapes (" + std::to_string(e.n_escapes - used_escapes) + " of " +
                       std::to_string(e.n_escapes) + ")");
  }
  if (dec.pos != dec.n_words) {
    block_error(b, "unused words (" + std::to_string(dec.n_words - dec.pos) + " of " +
                       std::to_string(dec.n_words) + ")");
  }
  for (unsigned l = 0; l < kLanes; ++l) {
    if (dec.x[l] != kRansLow) {
      block_error(b, "final lane state of lane " + std::to_string(l) + " is " +
                         std::to_string(dec.x[l]) + ", not 2^16");
    }
  }
}

}  // namespace

void verify_block(const QemLayout& layout, std::uint32_t b, const std::uint8_t* extent) {
  const BlockEntry& e = layout.blocks[b];
  const std::uint64_t extent_length = e.extent_end() - e.offset;
  std::uint64_t computed = xxh3_64(extent, static_cast<std::size_t>(extent_length));
  if (computed != layout.block_checksums[b]) {
    block_error(b, "checksum mismatch: BLOCK_CHECKSUMS says 0x" +
                       to_hex(layout.block_checksums[b], 16) + ", the block hashes to 0x" +
                       to_hex(computed, 16));
  }
  for (std::uint64_t i = e.length; i < extent_length; ++i) {
    if (extent[i]) block_error(b, "trailing padding is not zero");
  }
}

void decode_block(const QemLayout& layout, std::uint32_t b, const std::uint8_t* block,
                  std::uint8_t* out, DecodeScratch& scratch, bool out_is_zero) {
  const BlockEntry& e = layout.blocks[b];
  const std::size_t bytes =
      static_cast<std::size_t>(std::uint64_t{e.n_block_frames} * layout.frame_bytes());
  switch (e.mode) {
    case BlockMode::Zero:
      if (!out_is_zero) std::memset(out, 0, bytes);
      return;
    case BlockMode::Raw:
      std::memcpy(out, block, bytes);
      return;
    case BlockMode::Rans:
      switch (layout.header.stored_itemsize) {
        case 1: decode_rans(layout, b, block, out, scratch, out_is_zero); return;
        case 2:
          decode_rans(layout, b, block, reinterpret_cast<std::uint16_t*>(out), scratch, out_is_zero);
          return;
        default:
          decode_rans(layout, b, block, reinterpret_cast<std::uint32_t*>(out), scratch, out_is_zero);
          return;
      }
  }
}

}  // namespace qemnative
