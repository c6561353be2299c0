// Bitshuffle-LZ4 chunks of ARINA shards (quantem/stem4d/io/arina_layout.py, docs/arina.md),
// decoded in TypeScript: the reference for small files.
//
//   u64 BE uncompressed bytes, u32 BE block bytes,
//   then per block: u32 BE compressed length, one LZ4 block of a bit-shuffled block;
//   the last n_elements % 8 elements are stored raw at the end.

export class ChunkFormatError extends Error {}

/** One LZ4 block (no frame) into `out[start, start + size)`; returns the bytes written. */
export function lz4Block(src: Uint8Array, out: Uint8Array, start: number, size: number): number {
  let i = 0;
  let o = start;
  const end = start + size;
  while (i < src.length) {
    const token = src[i++]!;
    let literals = token >> 4;
    if (literals === 15) {
      let b: number;
      do {
        if (i >= src.length) throw new ChunkFormatError("LZ4 literal length runs past the block");
        b = src[i++]!;
        literals += b;
      } while (b === 255);
    }
    if (i + literals > src.length || o + literals > end) throw new ChunkFormatError("LZ4 literals overrun");
    out.set(src.subarray(i, i + literals), o);
    i += literals;
    o += literals;
    if (i === src.length) break; // the last sequence has literals only
    if (i + 2 > src.length) throw new ChunkFormatError("LZ4 match offset missing");
    const offset = src[i]! | (src[i + 1]! << 8);
    i += 2;
    if (offset === 0 || offset > o - start) throw new ChunkFormatError("LZ4 match offset out of range");
    let length = (token & 15) + 4;
    if ((token & 15) === 15) {
      let b: number;
      do {
        if (i >= src.length) throw new ChunkFormatError("LZ4 match length runs past the block");
        b = src[i++]!;
        length += b;
      } while (b === 255);
    }
    if (o + length > end) throw new ChunkFormatError("LZ4 match overruns the block");
    for (let k = 0; k < length; k++, o++) out[o] = out[o - offset]!;
  }
  return o - start;
}

/** Undo bitshuffle of `n` elements (n a multiple of 8) of `size` bytes: bit b of byte j of
 * element i sits in bit plane j * 8 + b, at bit i % 8 of byte i / 8 of that plane. */
export function bitUnshuffle(src: Uint8Array, out: Uint8Array, outStart: number, n: number, size: number): void {
  const planeBytes = n / 8;
  for (let j = 0; j < size; j++) {
    for (let b = 0; b < 8; b++) {
      const plane = (j * 8 + b) * planeBytes;
      for (let q = 0; q < planeBytes; q++) {
        const bits = src[plane + q]!;
        if (bits === 0) continue;
        for (let t = 0; t < 8; t++) {
          if ((bits >> t) & 1) out[outStart + (8 * q + t) * size + j]! |= 1 << b;
        }
      }
    }
  }
}

/** One compressed chunk of `elements` elements of `size` bytes, to its raw bytes. */
export function decodeChunk(chunk: Uint8Array, elements: number, size: number): Uint8Array {
  if (chunk.length < 12) throw new ChunkFormatError(`chunk of ${chunk.length} bytes is shorter than its header`);
  const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  const total = Number(view.getBigUint64(0, false));
  const blockBytes = view.getUint32(8, false);
  if (total !== elements * size) throw new ChunkFormatError(`chunk says ${total} bytes, the frame has ${elements * size}`);
  if (blockBytes === 0 || blockBytes % (8 * size) !== 0) throw new ChunkFormatError(`block size ${blockBytes} invalid`);
  const out = new Uint8Array(total);
  const blockElements = blockBytes / size;
  const shuffled = elements - (elements % 8);
  let position = 12;
  const scratch = new Uint8Array(blockBytes);
  for (let first = 0; first < shuffled; first += blockElements) {
    const n = Math.min(blockElements, shuffled - first);
    if (position + 4 > chunk.length) throw new ChunkFormatError("chunk ends inside a block header");
    const length = view.getUint32(position, false);
    position += 4;
    if (position + length > chunk.length) throw new ChunkFormatError("block runs past the chunk");
    scratch.fill(0);
    if (lz4Block(chunk.subarray(position, position + length), scratch, 0, n * size) !== n * size) {
      throw new ChunkFormatError("LZ4 block decodes to the wrong size");
    }
    position += length;
    bitUnshuffle(scratch, out, first * size, n, size);
  }
  const rest = (elements - shuffled) * size;
  if (position + rest !== chunk.length) throw new ChunkFormatError("chunk length disagrees with its blocks");
  out.set(chunk.subarray(position, position + rest), shuffled * size);
  return out;
}
