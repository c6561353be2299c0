// Block verification and decoding: docs/qem-format.md sections 9 to 12 and step 11
// of section 14. Each function works on one block, so blocks decode in parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "qemnative/qem_format.hpp"

namespace qemnative {

// Checks block b's XXH3-64 over its extent [offset, align_up(offset + length, 16))
// against BLOCK_CHECKSUMS, and that the trailing padding is zero. `extent` points at
// the block's first byte. Throws FormatError naming the block.
void verify_block(const QemLayout& layout, std::uint32_t b, const std::uint8_t* extent);

// Per-thread scratch space reused across blocks: the phase-A masks, and the pixel
// and context of each phase-B symbol (the nonzero pixels in block order).
struct DecodeScratch {
  std::vector<std::uint8_t> masks;
  std::vector<std::uint32_t> value_pixel;
  std::vector<std::uint8_t> value_context;
};

// Decodes block b (its bytes at `block`) into `out`, which holds n_block_frames * P
// values of stored_itemsize bytes, little-endian. Every check of section 12 is made;
// a failure throws FormatError naming the block. `out_is_zero` says `out` already
// reads as zero (fresh anonymous pages), so zero pixels need not be written.
void decode_block(const QemLayout& layout, std::uint32_t b, const std::uint8_t* block,
                  std::uint8_t* out, DecodeScratch& scratch, bool out_is_zero = false);

}  // namespace qemnative
