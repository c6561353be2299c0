// GPU decoder for the HDF5 bitshuffle-LZ4 filter's chunks (one chunk = one detector frame).
//
// Chunk layout (bitshuffle HDF5 filter, id 32008, with LZ4):
//   bytes 0..7   big-endian u64: uncompressed bytes of the chunk (must be the frame's size)
//   bytes 8..11  big-endian u32: block size in BYTES (a multiple of 8 * ELEM_SIZE)
//   then, for every block: big-endian u32 compressed length, then one LZ4 raw block whose
//   decoded content is the bit-transposed block (8 * ELEM_SIZE rows of N/8 bytes, row b
//   holding bit b of every element, element i at bit i % 8 of byte i / 8);
//   the last block covers the frame's leftover elements rounded down to a multiple of 8;
//   the final (leftover % 8) elements follow raw, uncompressed.
//
// Two kernels per batch of chunks:
//   walk_chunks:   one thread per chunk: validates the header, walks the block-length chain
//                  (every length and offset checked against the chunk's end before anything
//                  reads it), records each block's source offset and length, copies the raw
//                  tail, and records an error code per chunk.
//   decode_blocks: one warp per block: stages the compressed block in shared memory,
//                  decodes LZ4 into shared memory (all lanes parse the sequence headers in
//                  lock step, lanes copy literals and matches together), validates every
//                  literal run, match offset and length, then undoes the bit transpose from
//                  shared memory into the output with 8 * ELEM_SIZE byte stores per lane.
//
// Constants injected as #defines by quantem/cuda/module_loader.py:
//   ELEM_SIZE      1, 2 or 4
//   FRAME_ELEMS    elements per frame (det_r * det_c)
//   BLOCK_BYTES    the chunks' block size in bytes
//   CBOUND         compressed staging bytes per warp (LZ4 bound of BLOCK_BYTES, 16-aligned)
//   WARPS_PER_CTA  warps per thread block of decode_blocks
//   VECTOR_STORES  1 when every group of 8 elements in the output is 8*ELEM_SIZE aligned
//   STAGE_COMPRESSED 1: copy each compressed block to shared memory before parsing it
//   LZ4_SCHEDULE, LZ4_WIDE_MIN, LZ4_TRANSPOSE: variants (defaults below; benchmarks and
//                  tests set them)

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define BLOCK_ELEMS (BLOCK_BYTES / ELEM_SIZE)
#define FULL_BLOCKS (FRAME_ELEMS / BLOCK_ELEMS)
#define LEFTOVER_ELEMS (FRAME_ELEMS % BLOCK_ELEMS)
#define LAST_ELEMS (LEFTOVER_ELEMS - LEFTOVER_ELEMS % 8)
#define TAIL_BYTES ((LEFTOVER_ELEMS % 8) * ELEM_SIZE)
#define BLOCKS_PER_FRAME (FULL_BLOCKS + (LAST_ELEMS > 0 ? 1 : 0))
#define FRAME_BYTES ((i64)FRAME_ELEMS * ELEM_SIZE)
#define HEADER_BYTES 12

// Error codes; mirrored by quantem/cuda/lz4_bitshuffle.py (CHUNK_ERRORS).
#define ERR_CHUNK_TOO_SHORT 1
#define ERR_HEADER_SIZE 2
#define ERR_HEADER_BLOCK_SIZE 3
#define ERR_BLOCK_LENGTH 4
#define ERR_CHUNK_LENGTH 5
#define ERR_LZ4_LITERAL 6
#define ERR_LZ4_OFFSET 7
#define ERR_LZ4_MATCH 8
#define ERR_LZ4_OUTPUT_SIZE 9
#define ERR_LZ4_TRUNCATED 10
#define ERR_CHUNK_BOUNDS 11

#ifndef DECLARE_DYNAMIC_SHARED
#define DECLARE_DYNAMIC_SHARED(name) extern __shared__ __align__(16) u8 name[]
#endif
// Threads of a warp sharing a block: 32 on the GPU (decode_blocks is launched with 32 *
// WARPS_PER_CTA threads); the host routing tests run one thread a warp (LANES 1).
#ifndef LANES
#define LANES 32
#endif
// LZ4_EARLIER(index, start): a byte `out[index]` read in the same pass as the stores of the
// sequence starting at `start`, with no barrier between them, must have been written by an
// earlier sequence (index < start). Nothing on the GPU; the host tests count the reads that
// are not, which no comparison of outputs can see when the lanes run one after another.
#ifndef LZ4_EARLIER
#define LZ4_EARLIER(index, start)
#endif
#ifndef SYNC_LANES
#define SYNC_LANES() __syncwarp()
#endif

__device__ __forceinline__ u32 load_be32(const u8* p) {
    return ((u32)p[0] << 24) | ((u32)p[1] << 16) | ((u32)p[2] << 8) | (u32)p[3];
}

__device__ __forceinline__ u64 load_be64(const u8* p) {
    return ((u64)load_be32(p) << 32) | (u64)load_be32(p + 4);
}

__device__ __forceinline__ void record_error(int* errors, i64 frame, int code) {
    // First error wins; later ones for the same chunk are consequences of it.
    atomicCAS(errors + frame, 0, code);
}

// Chunk `frame` is buf[chunk_starts[frame], chunk_ends[frame]). Packed staging passes one
// offsets array twice (ends = offsets + 1); mapped staging passes file offsets relative to
// the mapped region, where chunks need not be adjacent.
extern "C" __global__ void walk_chunks(const u8* __restrict__ buf,
                                       const i64* __restrict__ chunk_starts,   // n_frames
                                       const i64* __restrict__ chunk_ends,     // n_frames
                                       i64 buf_bytes,
                                       i64 n_frames,
                                       i64* __restrict__ block_src,            // n_frames * BPF
                                       u32* __restrict__ block_len,            // n_frames * BPF
                                       u8* __restrict__ out,                   // frame 0 of batch
                                       int* __restrict__ errors) {
    i64 frame = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (frame >= n_frames) return;
    const i64 start = chunk_starts[frame];
    const i64 end = chunk_ends[frame];
    i64* src = block_src + frame * BLOCKS_PER_FRAME;
    u32* len = block_len + frame * BLOCKS_PER_FRAME;
    for (int k = 0; k < BLOCKS_PER_FRAME; ++k) len[k] = 0;
    if (start < 0 || end > buf_bytes) {
        record_error(errors, frame, ERR_CHUNK_BOUNDS);
        return;
    }
    if (end < start || end - start < HEADER_BYTES) {
        record_error(errors, frame, ERR_CHUNK_TOO_SHORT);
        return;
    }
    if (load_be64(buf + start) != (u64)FRAME_BYTES) {
        record_error(errors, frame, ERR_HEADER_SIZE);
        return;
    }
    if (load_be32(buf + start + 8) != (u32)BLOCK_BYTES) {
        record_error(errors, frame, ERR_HEADER_BLOCK_SIZE);
        return;
    }
    i64 pos = start + HEADER_BYTES;
    for (int k = 0; k < BLOCKS_PER_FRAME; ++k) {
        if (end - pos < 4) {
            record_error(errors, frame, ERR_BLOCK_LENGTH);
            return;
        }
        const u32 clen = load_be32(buf + pos);
        pos += 4;
        if (clen == 0 || clen > (u32)CBOUND || (i64)clen > end - pos) {
            record_error(errors, frame, ERR_BLOCK_LENGTH);
            return;
        }
        src[k] = pos;
        len[k] = clen;
        pos += clen;
    }
    if (end - pos != TAIL_BYTES) {
        for (int k = 0; k < BLOCKS_PER_FRAME; ++k) len[k] = 0;
        record_error(errors, frame, ERR_CHUNK_LENGTH);
        return;
    }
    u8* dst = out + frame * FRAME_BYTES + (FRAME_BYTES - TAIL_BYTES);
    for (int i = 0; i < TAIL_BYTES; ++i) dst[i] = buf[pos + i];
}

__device__ __forceinline__ u64 transpose_bits_8x8(u64 x) {
    // Bit (8 * r + c) moves to bit (8 * c + r): rows become columns.
    u64 t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
    x = x ^ t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
    x = x ^ t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
    x = x ^ t ^ (t << 28);
    return x;
}

// Decode one LZ4 raw block from `in` (shared) into `out` (shared); returns 0 or an error code.
// Every lane runs the same control flow (the headers are read by all lanes), so the loop exits
// together; lanes split the byte copies.
__device__ int lz4_decode_block(const u8* in, int in_len, u8* out, int out_len, int lane,
                                int lanes) {
    int ip = 0;
    int op = 0;
    while (true) {
        if (ip >= in_len) return ERR_LZ4_TRUNCATED;
        const int token = in[ip++];
        int lit = token >> 4;
        if (lit == 15) {
            int b;
            do {
                if (ip >= in_len) return ERR_LZ4_TRUNCATED;
                b = in[ip++];
                lit += b;
            } while (b == 255);
        }
        if (lit > in_len - ip || lit > out_len - op) return ERR_LZ4_LITERAL;
        for (int i = lane; i < lit; i += lanes) out[op + i] = in[ip + i];
        ip += lit;
        op += lit;
        if (ip == in_len) break;  // the last sequence carries literals only
        if (in_len - ip < 2) return ERR_LZ4_TRUNCATED;
        const int offset = in[ip] | (in[ip + 1] << 8);
        ip += 2;
        if (offset == 0 || offset > op) return ERR_LZ4_OFFSET;
        int mlen = token & 15;
        if (mlen == 15) {
            int b;
            do {
                if (ip >= in_len) return ERR_LZ4_TRUNCATED;
                b = in[ip++];
                mlen += b;
            } while (b == 255);
        }
        mlen += 4;
        if (mlen > out_len - op) return ERR_LZ4_MATCH;
        SYNC_LANES();  // literals and earlier matches visible to every lane
        const int base = op - offset;
        if (offset >= mlen) {
            for (int i = lane; i < mlen; i += lanes) out[op + i] = out[base + i];
        } else {
            // Overlapping match: the output repeats with period `offset`, so byte i is a copy
            // of byte (i % offset) of the window, all of which precede op.
            for (int i = lane; i < mlen; i += lanes) out[op + i] = out[base + i % offset];
        }
        op += mlen;
    }
    if (op != out_len) return ERR_LZ4_OUTPUT_SIZE;
    return 0;
}

// LZ4_SCHEDULE 2 (default): lz4_decode_block_scheduled with wide match copies (below);
// 1: the same without them; 0: lz4_decode_block, the plain order, kept as the reference
// the tests hold the others to (same frames, same error code for every corruption:
// tests/test_cuda_routing.py, tests/test_cuda_emulated.py, tests/hardware/test_cuda_lz4.py).
// On the H200 (benchmarks/gpu_lz4.py, 262,144 192x192 uint16 chunks at dose 1,000), 2
// decodes 6% faster than 1 with either transpose.
#ifndef LZ4_SCHEDULE
#define LZ4_SCHEDULE 2
#endif

#if LZ4_SCHEDULE >= 2
// Matches of at least this many bytes are copied a 4-byte word a lane (LZ4_SCHEDULE 2).
#ifndef LZ4_WIDE_MIN
#define LZ4_WIDE_MIN 64
#endif

// out[dst, dst + n) = out[dst - dist, dst - dist + n), where dist >= n and dist >= 4: no
// byte this reads is written by it. Aligned destination words, each from two aligned
// source words and a funnel shift; the few bytes before the first and after the last
// aligned word one by one. The second source word of the last destination word may reach
// up to 3 bytes past the source's end, into bytes this call writes: those bytes are shifted
// out, whatever a lane reads there.
__device__ __forceinline__ void copy_forward_words(u8* __restrict__ out, int dst, int dist, int n,
                                                   int lane, int lanes) {
    const int end = dst + n;
    const int first = (dst + 3) & ~3;
    const int last = end & ~3;
    if (first >= last) {
        for (int q = dst + lane; q < end; q += lanes) out[q] = out[q - dist];
        return;
    }
    for (int q = dst + lane; q < first; q += lanes) out[q] = out[q - dist];
    for (int q = last + lane; q < end; q += lanes) out[q] = out[q - dist];
    const int from = first - dist;
    const u32* src = reinterpret_cast<const u32*>(out + (from & ~3));
    u32* dw = reinterpret_cast<u32*>(out + first);
    const int words = (last - first) >> 2;
    const int shift = 8 * (from & 3);
    if (shift == 0) {
        for (int w = lane; w < words; w += lanes) dw[w] = src[w];
    } else {
        for (int w = lane; w < words; w += lanes) dw[w] = __funnelshift_r(src[w], src[w + 1], shift);
    }
}
#endif

// LZ4_SHORT (LZ4_SCHEDULE 1 and 2): a sequence of at most `lanes` literals and a straight
// match of at most `lanes` bytes lying wholly before them is copied in one pass, a byte of
// each a lane, with one barrier; 0: through the general loops. On the H200
// (benchmarks/gpu_lz4.py, doses 1,000 / 40,000 / 10^7) 1 decodes 8.1% / 7.6% / 7.8% faster
// than 0 (docs/performance/results.md, "The LZ4 kernel's short sequences"). A variant 2,
// which also took overlapping matches, measured slower than 1 and was removed.
#ifndef LZ4_SHORT
#define LZ4_SHORT 1
#endif

// LZ4_FAST 1 (LZ4_SCHEDULE 1 and 2): the common sequence takes one test of all its checks
// before the general parse (lz4_decode_block_scheduled); 0: the general parse only.
#ifndef LZ4_FAST
#define LZ4_FAST 1
#endif

#if LZ4_SCHEDULE
// The same parse, checks and error order as lz4_decode_block, scheduled for latency: a
// sequence's match header (offset, extended length) and the next token are loaded before
// its literals are copied, the inputs are never written (restrict), an overlapping match
// steps its source index by (lanes mod offset) instead of a division per byte, and a run
// of period 1, 2 or 4 (bit planes' zero runs: 95% of the matched bytes of ARINA frames) is
// stored a 4-byte word a lane. 7-12% less decode time on the H200 (docs/performance/results.md).
__device__ int lz4_decode_block_scheduled(const u8* __restrict__ in, int in_len, u8* __restrict__ out,
                                   int out_len, int lane, int lanes) {
    int ip = 0;
    int op = 0;
    if (in_len <= 0) return ERR_LZ4_TRUNCATED;
    int token = in[ip++];
    while (true) {
#if LZ4_FAST
        {
            // The common sequence (81% of those of ARINA frames at dose 1,000), parsed with
            // one branch for all of its checks: no length byte follows the token, the match
            // header and the next token lie inside the block, and the match reads only bytes
            // of earlier sequences: a straight copy lying wholly before the literals, or,
            // with no literals, a run of period 1, 2, 4, 8 or 16. Whatever else (a length
            // byte, an overlap, any damage) takes the general parse below from this token,
            // whose checks then fail or pass exactly as they would have.
            const int lit = token >> 4;
            const int mlen = (token & 15) + 4;
            const int at = ip + lit;  // the match offset's first byte
            if (lit != 15 && mlen != 19 && at + 2 < in_len) {
                const int offset = in[at] | (in[at + 1] << 8);
                const int next = in[at + 2];
                const bool straight = offset >= lit + mlen;
                const bool period = lit == 0 && offset < mlen && ((0x10116u >> offset) & 1u);
                if ((straight || period) && offset <= op + lit && mlen <= out_len - op - lit) {
                    const int mask = straight ? -1 : offset - 1;
                    const int from = op + lit - offset;
                    SYNC_LANES();  // earlier sequences' bytes visible to every lane
                    // At most 14 literals and 18 match bytes here (lit != 15, mlen != 19):
                    // with 18 lanes or more (32 on the GPU) a lane copies at most one byte
                    // of each, with no loop; fewer lanes (the host tests' 1) loop.
#if LANES >= 18
                    if (lane < lit) out[op + lane] = in[ip + lane];
                    if (lane < mlen) {
                        const int src = from + (lane & mask);
                        LZ4_EARLIER(src, op);
                        out[op + lit + lane] = out[src];
                    }
#else
                    for (int i = lane; i < lit; i += lanes) out[op + i] = in[ip + i];
                    for (int i = lane; i < mlen; i += lanes) {
                        const int src = from + (i & mask);
                        LZ4_EARLIER(src, op);
                        out[op + lit + i] = out[src];
                    }
#endif
                    op += lit + mlen;
                    ip = at + 3;
                    token = next;
                    continue;
                }
            }
        }
#endif
        int lit = token >> 4;
        if (lit == 15) {
            int b;
            do {
                if (ip >= in_len) return ERR_LZ4_TRUNCATED;
                b = in[ip++];
                lit += b;
            } while (b == 255);
        }
        if (lit > in_len - ip || lit > out_len - op) return ERR_LZ4_LITERAL;
        const int lit_ip = ip;
        ip += lit;
        if (ip == in_len) {  // the last sequence carries literals only
            for (int i = lane; i < lit; i += lanes) out[op + i] = in[lit_ip + i];
            op += lit;
            break;
        }
        if (in_len - ip < 2) return ERR_LZ4_TRUNCATED;
        const int offset = in[ip] | (in[ip + 1] << 8);
        ip += 2;
        if (offset == 0 || offset > op + lit) return ERR_LZ4_OFFSET;
        int mlen = token & 15;
        if (mlen == 15) {
            int b;
            do {
                if (ip >= in_len) return ERR_LZ4_TRUNCATED;
                b = in[ip++];
                mlen += b;
            } while (b == 255);
        }
        mlen += 4;
        if (mlen > out_len - op - lit) return ERR_LZ4_MATCH;
        const int next = ip < in_len ? in[ip] : 0;  // before the copies
#if LZ4_SHORT
        if (lit <= lanes && mlen <= lanes && offset >= lit + mlen) {
            // A short sequence whose match lies wholly before its literals (71% of the
            // sequences of ARINA frames are straight copies, most of them short): a lane
            // stores at most one literal and one match byte, with no loop and one barrier.
            SYNC_LANES();  // earlier sequences' bytes visible to every lane
            if (lane < lit) out[op + lane] = in[lit_ip + lane];
            if (lane < mlen) {
                const int src = op + lit - offset + lane;
                LZ4_EARLIER(src, op);
                out[op + lit + lane] = out[src];
            }
            op += lit + mlen;
            if (ip >= in_len) return ERR_LZ4_TRUNCATED;
            token = next;
            ++ip;
            continue;
        }
#endif
        for (int i = lane; i < lit; i += lanes) out[op + i] = in[lit_ip + i];
        op += lit;
        SYNC_LANES();  // literals and earlier matches visible to every lane
        const int base = op - offset;
#if LZ4_SCHEDULE >= 2
        if (offset >= mlen) {
            if (mlen >= LZ4_WIDE_MIN && offset >= 4) {
                copy_forward_words(out, op, offset, mlen, lane, lanes);
            } else {
                for (int i = lane; i < mlen; i += lanes) out[op + i] = out[base + i];
            }
        } else if ((offset == 1 || offset == 2 || offset == 4) && mlen >= 16) {
            // A period dividing 4: every aligned 4-byte word of the run is the same word;
            // byte q of the run (absolute) is out[base + ((q - op) & (offset - 1))].
            const int m = offset - 1;
            const int end = op + mlen;
            const int first = (op + 3) & ~3;
            const int last = end & ~3;
            const int a = op & m;
            u32 word = 0;
            for (int j = 0; j < 4; ++j) word |= (u32)out[base + ((j - a) & m)] << (8 * j);
            for (int q = op + lane; q < first; q += lanes) out[q] = out[base + ((q - op) & m)];
            for (int q = last + lane; q < end; q += lanes) out[q] = out[base + ((q - op) & m)];
            u32* words = reinterpret_cast<u32*>(out + first);
            for (int w = lane; w < (last - first) >> 2; w += lanes) words[w] = word;
        } else if (offset >= 4 && mlen >= LZ4_WIDE_MIN) {
            // A longer period (zero bit planes matched against an earlier plane): rounds of
            // forward copies, each from all that the run holds so far (a whole number of
            // periods, so out[q] = out[q - dist] holds), doubling what each round copies.
            int done = 0;
            while (true) {
                const int dist = offset + done;
                const int n = dist < mlen - done ? dist : mlen - done;
                copy_forward_words(out, op + done, dist, n, lane, lanes);
                done += n;
                if (done == mlen) break;
                SYNC_LANES();
            }
        } else if ((offset & (offset - 1)) == 0) {
            const int m = offset - 1;
            for (int i = lane; i < mlen; i += lanes) out[op + i] = out[base + (i & m)];
        } else {
#else
        if (offset >= mlen) {
            for (int i = lane; i < mlen; i += lanes) out[op + i] = out[base + i];
        } else if ((offset == 1 || offset == 2 || offset == 4) && mlen >= 16) {
            // A period dividing 4: every aligned 4-byte word of the run is the same word.
            // Byte q of the run (absolute) is out[base + (q - op) mod offset]; bytes before
            // the first aligned word and after the last are stored one by one.
            const int end = op + mlen;
            const int first = (op + 3) & ~3;
            const int last = end & ~3;
            const int a = op % offset;
            u32 word = 0;
            for (int j = 0; j < 4; ++j) word |= (u32)out[base + (j + offset - a) % offset] << (8 * j);
            for (int q = op + lane; q < first; q += lanes) out[q] = out[base + (q - op) % offset];
            for (int q = last + lane; q < end; q += lanes) out[q] = out[base + (q - op) % offset];
            u32* words = reinterpret_cast<u32*>(out + first);
            for (int w = lane; w < (last - first) / 4; w += lanes) words[w] = word;
        } else {
#endif
            // byte i repeats byte (i % offset) of the window: r = i % offset, stepped
            const int step = lanes % offset;
            int r = lane % offset;
            for (int i = lane; i < mlen; i += lanes) {
                out[op + i] = out[base + r];
                r += step;
                if (r >= offset) r -= offset;
            }
        }
        op += mlen;
        if (ip >= in_len) return ERR_LZ4_TRUNCATED;
        token = next;
        ++ip;
    }
    if (op != out_len) return ERR_LZ4_OUTPUT_SIZE;
    return 0;
}
#define LZ4_DECODE lz4_decode_block_scheduled
#else
#define LZ4_DECODE lz4_decode_block
#endif

// LZ4_TRANSPOSE 2 (default; uint16 with vector stores, blocks of a multiple of 32
// elements, other cases take 1): four adjacent groups of 8 elements a lane, each row read
// as one 32-bit word holding the four groups' bytes, the four 8x8 bit transposes done
// together on those 8 words (3 rounds of masked swaps between rows), the output bytes
// gathered with byte permutes; 1: one group a lane, 8 byte loads and a 64-bit 8x8
// transpose per byte plane. On the H200 (as above) 2 decodes 13% faster than 1 at dose
// 1,000, 10% at 40,000 and 5% at 10^7; with LZ4_SCHEDULE 2, 22%, 16% and 6%.
#ifndef LZ4_TRANSPOSE
#define LZ4_TRANSPOSE 2
#endif

#if LZ4_TRANSPOSE == 2 && ELEM_SIZE == 2 && VECTOR_STORES
// Rows r and r + d: bit (e + d) of every byte of w[r] swaps with bit e of w[r + d] where bit
// e of the byte's index within its d-bit field is clear (mask), i.e. one round of the 8x8
// bit transpose applied to four matrices at once (one per byte of the words).
__device__ __forceinline__ void swap_rows(u32& lo, u32& hi, int d, u32 mask) {
    const u32 t = ((lo >> d) ^ hi) & mask;
    hi ^= t;
    lo ^= t << d;
}

__device__ __forceinline__ void transpose_rows8(u32 (&w)[8]) {
    swap_rows(w[0], w[1], 1, 0x55555555u);
    swap_rows(w[2], w[3], 1, 0x55555555u);
    swap_rows(w[4], w[5], 1, 0x55555555u);
    swap_rows(w[6], w[7], 1, 0x55555555u);
    swap_rows(w[0], w[2], 2, 0x33333333u);
    swap_rows(w[1], w[3], 2, 0x33333333u);
    swap_rows(w[4], w[6], 2, 0x33333333u);
    swap_rows(w[5], w[7], 2, 0x33333333u);
    swap_rows(w[0], w[4], 4, 0x0F0F0F0Fu);
    swap_rows(w[1], w[5], 4, 0x0F0F0F0Fu);
    swap_rows(w[2], w[6], 4, 0x0F0F0F0Fu);
    swap_rows(w[3], w[7], 4, 0x0F0F0F0Fu);
}

// decoded: 16 rows of `groups` bytes (row b: bit b of every element); dst: the block's
// 8 * groups elements. After transpose_rows8 on a plane's 8 row words, byte c of word e is
// byte p (the plane) of element 8 * (4q + c) + e.
__device__ __forceinline__ void transpose_quads(const u8* decoded, int groups, u8* dst_block,
                                                int lane, int lanes) {
    const int quads = groups >> 2;
    const u32* rows = reinterpret_cast<const u32*>(decoded);
    const int stride = groups >> 2;  // words a row
    for (int q = lane; q < quads; q += lanes) {
        u32 lo[8], hi[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            lo[r] = rows[r * stride + q];
            hi[r] = rows[(8 + r) * stride + q];
        }
        transpose_rows8(lo);
        transpose_rows8(hi);
        uint4* dst = reinterpret_cast<uint4*>(dst_block + (i64)q * 64);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            // element e: low byte lo[e] byte c, high byte hi[e] byte c
            const u32 sel = (u32)c | ((u32)(c + 4) << 4) | ((u32)c << 8) | ((u32)(c + 4) << 12);
            uint4 v;
            v.x = __byte_perm(__byte_perm(lo[0], hi[0], sel), __byte_perm(lo[1], hi[1], sel), 0x5410);
            v.y = __byte_perm(__byte_perm(lo[2], hi[2], sel), __byte_perm(lo[3], hi[3], sel), 0x5410);
            v.z = __byte_perm(__byte_perm(lo[4], hi[4], sel), __byte_perm(lo[5], hi[5], sel), 0x5410);
            v.w = __byte_perm(__byte_perm(lo[6], hi[6], sel), __byte_perm(lo[7], hi[7], sel), 0x5410);
            dst[c] = v;
        }
    }
}
#endif

extern "C" __global__ void decode_blocks(const u8* __restrict__ buf,
                                         i64 n_frames,
                                         const i64* __restrict__ block_src,
                                         const u32* __restrict__ block_len,
                                         u8* __restrict__ out,
                                         int* __restrict__ errors) {
    DECLARE_DYNAMIC_SHARED(smem);
    const int lanes = LANES;
    const int lane = threadIdx.x % LANES;
    const int warp = threadIdx.x / LANES;
#if STAGE_COMPRESSED
    u8* decoded = smem + warp * (BLOCK_BYTES + CBOUND);
    u8* staged = decoded + BLOCK_BYTES;
#else
    u8* decoded = smem + warp * BLOCK_BYTES;
#endif
    const i64 item = (i64)blockIdx.x * (blockDim.x / LANES) + warp;
    if (item >= n_frames * BLOCKS_PER_FRAME) return;
#if BLOCKS_PER_FRAME > 0  // frames of fewer than 8 elements are all raw tail
    const i64 frame = item / BLOCKS_PER_FRAME;
    const int k = (int)(item % BLOCKS_PER_FRAME);
#else
    const i64 frame = 0;
    const int k = 0;
#endif
    const int clen = (int)block_len[item];
    if (clen == 0) return;  // walk_chunks rejected this chunk
    const int n_elems = k < FULL_BLOCKS ? BLOCK_ELEMS : LAST_ELEMS;
    const int n_bytes = n_elems * ELEM_SIZE;

    const u8* src = buf + block_src[item];
#if STAGE_COMPRESSED
    for (int i = lane; i < clen; i += lanes) staged[i] = src[i];
    SYNC_LANES();
#else
    const u8* staged = src;
#endif
    const int status = LZ4_DECODE(staged, clen, decoded, n_bytes, lane, lanes);
    if (status != 0) {
        if (lane == 0) record_error(errors, frame, status);
        return;
    }
    SYNC_LANES();

    // Undo the bit transpose: lane handles groups of 8 elements; for each byte plane p the 8
    // row bytes at column g form an 8x8 bit matrix whose transpose is byte p of the 8 elements.
    const int groups = n_elems / 8;
    u8* dst_block = out + frame * FRAME_BYTES + (i64)k * BLOCK_BYTES;
#if LZ4_TRANSPOSE == 2 && ELEM_SIZE == 2 && VECTOR_STORES
    if ((groups & 3) == 0) {
        transpose_quads(decoded, groups, dst_block, lane, lanes);
        return;
    }
#endif
    for (int g = lane; g < groups; g += lanes) {
        u64 planes[ELEM_SIZE];
#pragma unroll
        for (int p = 0; p < ELEM_SIZE; ++p) {
            u64 x = 0;
#pragma unroll
            for (int r = 0; r < 8; ++r) x |= (u64)decoded[(8 * p + r) * groups + g] << (8 * r);
            planes[p] = transpose_bits_8x8(x);
        }
        u8* dst = dst_block + (i64)g * 8 * ELEM_SIZE;
#if ELEM_SIZE == 1
#if VECTOR_STORES
        *reinterpret_cast<u64*>(dst) = planes[0];
#else
        for (int e = 0; e < 8; ++e) dst[e] = (u8)(planes[0] >> (8 * e));
#endif
#else
        u32 words[2 * ELEM_SIZE];
#pragma unroll
        for (int w = 0; w < 2 * ELEM_SIZE; ++w) {
            // Word w holds bytes 4w..4w+3 of the 8 * ELEM_SIZE output bytes.
            u32 word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int byte = 4 * w + j;
                const int e = byte / ELEM_SIZE;
                const int p = byte % ELEM_SIZE;
                word |= (u32)((planes[p] >> (8 * e)) & 0xFF) << (8 * j);
            }
            words[w] = word;
        }
#if VECTOR_STORES
#pragma unroll
        for (int v = 0; v < ELEM_SIZE / 2; ++v) {
            uint4 q;
            q.x = words[4 * v];
            q.y = words[4 * v + 1];
            q.z = words[4 * v + 2];
            q.w = words[4 * v + 3];
            reinterpret_cast<uint4*>(dst)[v] = q;
        }
#else
        for (int w = 0; w < 2 * ELEM_SIZE; ++w)
            for (int j = 0; j < 4; ++j) dst[4 * w + j] = (u8)(words[w] >> (8 * j));
#endif
#endif
    }
}
