// The block decoder of docs/qem-format.md section 12, written for speed on one core:
// byte-sized slot tables (all contexts stay in the L1 cache), lane states and the word
// position in registers, a branch-free renormalisation, phase B over a branch-free list
// of the nonzero pixels and, where the CPU has AVX2, 8 phase-B symbols at a time
// (gathers for the table lookups, a permutation to hand out the words in lane order).
// Decoding whole 32-symbol rounds in scalar code, as a GPU does, was tried and was not
// faster.
#include "qemnative/qem_decode.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "qemnative/bytes.hpp"
#include "qemnative/error.hpp"
#include "qemnative/hashing.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QEM_NATIVE_AVX2 1
#endif

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

#define QEM_INLINE inline __attribute__((always_inline))

// The word stream of one block and its read position. Kept in local variables of
// the decoding functions (never behind a pointer that a byte store could alias), so
// the compiler holds them in registers.
struct WordStream {
  const std::uint8_t* words;  // u16 little-endian
  std::uint32_t n_words;
  std::uint32_t pos;
};

// Section 11: decode one symbol from lane state `state` with the context whose slot
// table is `sym` and freq/cum table is `freq_cum`. The renormalisation read is
// branch-free: a state that needs a word takes words[pos] (a zero stand-in once the
// stream is exhausted) and pos advances, so an exhausted stream shows as
// pos > n_words. Callers check that before raising any other error and at the end of
// each frame and phase, which reports the same first error as the sequential
// algorithm (exhaustion can only have happened at or before the symbol checked).
QEM_INLINE unsigned decode_symbol(std::uint32_t& state, const std::uint8_t* sym,
                                  const std::uint32_t* freq_cum, WordStream& ws) {
  static const std::uint8_t kZeroWord[2] = {0, 0};
  const std::uint32_t slot = state & (kProbScale - 1);
  const unsigned s = sym[slot];
  const std::uint32_t fc = freq_cum[s];
  const std::uint32_t next = (fc & 0xFFFF) * (state >> kProbBits) + slot - (fc >> 16);
  const std::uint8_t* src = ws.pos < ws.n_words ? ws.words + 2 * std::size_t{ws.pos} : kZeroWord;
  const std::uint32_t word = load_u16le(src);
  const bool renormalise = next < kRansLow;
  state = renormalise ? (next << 16) | word : next;
  ws.pos += renormalise ? 1u : 0u;
  return s;
}

QEM_INLINE void check_words(const WordStream& ws, std::uint32_t b) {
  if (ws.pos > ws.n_words) block_error(b, "word stream exhausted");
}

// Everything phase B needs, gathered so the two compiled variants share one body.
template <typename T>
struct PhaseB {
  std::uint32_t* x;  // the caller's lane states (copied in and out)
  WordStream* ws;
  const std::uint32_t* value_pixel;
  const std::uint8_t* value_context;
  std::size_t count;
  const std::uint8_t* sym_tables;
  const std::uint32_t* fc_tables;
  const std::uint8_t* escapes;
  std::uint32_t n_escapes;
  std::uint32_t block;
  T* out;
};

#ifdef QEM_NATIVE_AVX2
// For each 8-lane renormalisation mask, which of 8 consecutive words each lane takes:
// the number of lower lanes that also take one (the read order of section 11).
constexpr std::array<std::array<std::uint32_t, 8>, 256> make_word_rank() {
  std::array<std::array<std::uint32_t, 8>, 256> t{};
  for (unsigned m = 0; m < 256; ++m) {
    std::uint32_t rank = 0;
    for (unsigned i = 0; i < 8; ++i) {
      t[m][i] = rank;
      if (m & (1u << i)) ++rank;
    }
  }
  return t;
}
constexpr std::array<std::array<std::uint32_t, 8>, 256> kWordRank = make_word_rank();

// The AVX2 path is used when the CPU has it, unless QEM_NATIVE_SCALAR is set (the
// tests run both paths).
bool use_avx2() {
  static const bool use =
      __builtin_cpu_supports("avx2") && std::getenv("QEM_NATIVE_SCALAR") == nullptr;
  return use;
}

// Decodes 8 consecutive phase-B symbols on lanes lane0..lane0+7 at once: each lane's
// symbol and next state (gathers from the slot and freq/cum tables), then the
// renormalisation, each lane that needs a word taking the next one in lane order.
// Returns false, changing nothing, when one of the 8 is ESCAPE or fewer than 8 words
// remain; the caller then decodes those symbols one at a time (which also reports any
// error in the sequential order). The slot tables have 3 readable bytes past their
// end (a gather loads 4 bytes per slot).
__attribute__((target("avx2"), always_inline)) inline bool decode_values8(
    std::uint32_t* x, WordStream& ws, unsigned lane0, const std::uint8_t* contexts,
    const std::uint8_t* sym_tables, const std::uint32_t* fc_tables, std::uint32_t* values) {
  if (ws.pos > ws.n_words || ws.n_words - ws.pos < 8) return false;
  const __m256i state = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + lane0));
  std::uint64_t context_bytes;
  std::memcpy(&context_bytes, contexts, 8);
  const __m256i c =
      _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(context_bytes)));
  const __m256i slot = _mm256_and_si256(state, _mm256_set1_epi32(kProbScale - 1));
  const __m256i sym_at = _mm256_add_epi32(_mm256_slli_epi32(c, kProbBits), slot);
  const __m256i s = _mm256_and_si256(
      _mm256_i32gather_epi32(reinterpret_cast<const int*>(sym_tables), sym_at, 1),
      _mm256_set1_epi32(0xFF));
  const __m256i escape = _mm256_cmpeq_epi32(s, _mm256_set1_epi32(kEscapeSymbol));
  if (_mm256_movemask_ps(_mm256_castsi256_ps(escape))) return false;
  const __m256i fc_at = _mm256_add_epi32(_mm256_slli_epi32(c, 8), s);
  const __m256i fc = _mm256_i32gather_epi32(reinterpret_cast<const int*>(fc_tables), fc_at, 4);
  const __m256i freq = _mm256_and_si256(fc, _mm256_set1_epi32(0xFFFF));
  const __m256i cum = _mm256_srli_epi32(fc, 16);
  __m256i next = _mm256_sub_epi32(
      _mm256_add_epi32(_mm256_mullo_epi32(freq, _mm256_srli_epi32(state, kProbBits)), slot),
      cum);
  const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(next, 16), _mm256_setzero_si256());
  const auto m = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(need)));
  const __m256i w = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(ws.words + 2 * std::size_t{ws.pos})));
  const __m256i rank =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWordRank[m].data()));
  const __m256i refilled =
      _mm256_or_si256(_mm256_slli_epi32(next, 16), _mm256_permutevar8x32_epi32(w, rank));
  next = _mm256_blendv_epi8(next, refilled, need);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + lane0), next);
  ws.pos += kBitCount[m];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(values),
                      _mm256_add_epi32(s, _mm256_set1_epi32(1)));
  return true;
}
#endif

// One phase-B symbol (section 12), v on lane v mod 32, written to its pixel.
template <typename T>
QEM_INLINE void phase_b_step(const PhaseB<T>& job, std::size_t v, std::uint32_t* x,
                             WordStream& ws, std::uint32_t& used_escapes) {
  constexpr std::size_t w = sizeof(T);
  const std::size_t c = job.value_context[v];
  const unsigned s = decode_symbol(x[v & (kLanes - 1)], job.sym_tables + c * kProbScale,
                                   job.fc_tables + c * kSymbols, ws);
  std::uint32_t value = s + 1;
  if (s == kEscapeSymbol) {
    if (used_escapes == job.n_escapes) {
      check_words(ws, job.block);
      block_error(job.block, "escape array exhausted");
    }
    const std::uint8_t* p = job.escapes + std::size_t{used_escapes} * w;
    value = w == 1 ? p[0] : w == 2 ? load_u16le(p) : load_u32le(p);
    ++used_escapes;
    if (value < kMinEscapedValue) {
      check_words(ws, job.block);
      block_error(job.block, "escaped value below 256");
    }
  }
  job.out[job.value_pixel[v]] = static_cast<T>(value);
}

// Phase B of section 12, one symbol at a time. Lane states and the word position are
// copied into locals (registers) and back. Returns the number of escapes used.
template <typename T>
__attribute__((noinline)) std::uint32_t phase_b_scalar(const PhaseB<T>& job) {
  std::uint32_t x[kLanes];
  std::memcpy(x, job.x, sizeof x);
  WordStream ws = *job.ws;
  std::uint32_t used_escapes = 0;
  for (std::size_t v = 0; v < job.count; ++v) phase_b_step(job, v, x, ws, used_escapes);
  std::memcpy(job.x, x, sizeof x);
  *job.ws = ws;
  return used_escapes;
}

#ifdef QEM_NATIVE_AVX2
// Phase B with 8 symbols at a time where decode_values8 can take them.
template <typename T>
__attribute__((target("avx2"), noinline)) std::uint32_t phase_b_avx2(const PhaseB<T>& job) {
  std::uint32_t x[kLanes];
  std::memcpy(x, job.x, sizeof x);
  WordStream ws = *job.ws;
  std::uint32_t used_escapes = 0;
  for (std::size_t v = 0; v < job.count;) {
    if ((v & 7) == 0 && job.count - v >= 8) {
      std::uint32_t values[8];
      if (decode_values8(x, ws, static_cast<unsigned>(v & (kLanes - 1)), job.value_context + v,
                         job.sym_tables, job.fc_tables, values)) {
        for (unsigned i = 0; i < 8; ++i) job.out[job.value_pixel[v + i]] = static_cast<T>(values[i]);
        v += 8;
        continue;
      }
    }
    phase_b_step(job, v, x, ws, used_escapes);
    ++v;
  }
  std::memcpy(job.x, x, sizeof x);
  *job.ws = ws;
  return used_escapes;
}
#endif

template <typename T>
void decode_rans(const QemLayout& layout, std::uint32_t b, const std::uint8_t* block, T* out,
                 DecodeScratch& scratch, bool out_is_zero) {
  const BlockEntry& e = layout.blocks[b];
  const Model& model = layout.model;
  const std::uint64_t P = layout.frame_pixels();
  const std::uint32_t G = model.n_groups;
  const std::uint64_t n = e.n_block_frames;
  const std::uint64_t w = sizeof(T);

  std::uint32_t x[kLanes];
  for (unsigned l = 0; l < kLanes; ++l) {
    x[l] = load_u32le(block + 4 * l);
    if (x[l] < kRansLow) {
      block_error(b, "initial state of lane " + std::to_string(l) + " is below 2^16");
    }
  }
  WordStream ws{block + kLaneStatesBytes, e.n_words, 0};
  const std::uint64_t words_end = kLaneStatesBytes + 2ull * e.n_words;
  const std::uint64_t escapes_at = align_up(words_end, 4);
  for (std::uint64_t i = words_end; i < escapes_at; ++i) {
    if (block[i]) block_error(b, "padding between words and escapes is not zero");
  }
  const std::uint8_t* sym_tables = model.sym.data();
  const std::uint32_t* fc_tables = model.freq_cum.data();
  const std::uint8_t* group_class = model.group_class.data();
  // Bits of the last group that address pixels past P must be 0.
  const unsigned tail = static_cast<unsigned>(P % kGroupPixels);
  const unsigned tail_forbidden = tail ? (0xFFu << tail) & 0xFFu : 0u;

  // Phase A: the masks, symbol a = t * G + j on lane a mod 32.
  scratch.masks.resize(static_cast<std::size_t>(n) * G);
  std::uint8_t* const masks = scratch.masks.data();
  std::uint64_t nonzero = 0;
  unsigned lane = 0;
  for (std::uint64_t t = 0; t < n; ++t) {
    std::uint8_t* frame_masks = masks + t * G;
    for (std::uint32_t j = 0; j < G; ++j) {
      const std::size_t c = std::size_t{2} * group_class[j];
      const unsigned m =
          decode_symbol(x[lane], sym_tables + c * kProbScale, fc_tables + c * kSymbols, ws);
      lane = (lane + 1) & (kLanes - 1);
      frame_masks[j] = static_cast<std::uint8_t>(m);
      nonzero += kBitCount[m];
    }
    check_words(ws, b);
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
  std::uint32_t* const value_pixel = scratch.value_pixel.data();
  std::uint8_t* const value_context = scratch.value_context.data();
  std::size_t listed = 0;
  for (std::uint64_t t = 0; t < n; ++t) {
    const std::uint8_t* frame_masks = masks + t * G;
    const auto frame_base = static_cast<std::uint32_t>(t * P);
    for (std::uint32_t j = 0; j < G; ++j) {
      const unsigned m = frame_masks[j];
      if (!m) continue;
      const std::uint8_t* bits = kBitPositions[m].data();
      const std::uint32_t base = frame_base + j * kGroupPixels;
      const auto c = static_cast<std::uint8_t>(2 * group_class[j] + 1);
      for (unsigned i = 0; i < kGroupPixels; ++i) {
        value_pixel[listed + i] = base + bits[i];
        value_context[listed + i] = c;
      }
      listed += kBitCount[m];
    }
  }

  // Phase B.
  if (!out_is_zero) std::memset(out, 0, static_cast<std::size_t>(n * P * w));
  const PhaseB<T> job{x,          &ws,       value_pixel, value_context,
                      listed,     sym_tables, fc_tables,  block + escapes_at,
                      e.n_escapes, b,         out};
#ifdef QEM_NATIVE_AVX2
  const std::uint32_t used_escapes = use_avx2() ? phase_b_avx2(job) : phase_b_scalar(job);
#else
  const std::uint32_t used_escapes = phase_b_scalar(job);
#endif
  check_words(ws, b);
  if (used_escapes != e.n_escapes) {
    block_error(b, "unused escapes (" + std::to_string(e.n_escapes - used_escapes) + " of " +
                       std::to_string(e.n_escapes) + ")");
  }
  if (ws.pos != ws.n_words) {
    block_error(b, "unused words (" + std::to_string(ws.n_words - ws.pos) + " of " +
                       std::to_string(ws.n_words) + ")");
  }
  for (unsigned l = 0; l < kLanes; ++l) {
    if (x[l] != kRansLow) {
      block_error(b, "final lane state of lane " + std::to_string(l) + " is " +
                         std::to_string(x[l]) + ", not 2^16");
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
