// CPU rANS decoders of .qem blocks (1.0: §12; 2.0: §19.4). They make the checks of the
// Python reference decoders (quantem/stem4d/io/qem/rans.py, rans2.py) in the same order and
// return the same status codes, so a damaged block is reported with the same message.
import {
  ESCAPE_MIN_VALUE,
  ESCAPE_SYMBOL,
  LANE_STATES_SIZE,
  LANES,
  PROB_SCALE,
  RANS_L,
  STATES_2,
  STATES_2_SIZE,
  type Model,
} from "./format.js";

export const OK = 0;
export const ERR_STATE_RANGE = 1;
export const ERR_WORDS_EXHAUSTED = 2;
export const ERR_MASK_PADDING = 3;
export const ERR_NONZERO_COUNT = 4;
export const ERR_ESCAPES_EXHAUSTED = 5;
export const ERR_ESCAPE_VALUE = 6;
export const ERR_UNUSED_ESCAPES = 7;
export const ERR_UNUSED_WORDS = 8;
export const ERR_FINAL_STATE = 9;
export const ERR_PADDING = 10;
export const ERR_MODE = 11;

export const STATUS_MESSAGES: Record<number, string> = {
  [ERR_STATE_RANGE]: "initial lane state out of [2^16, 2^32)",
  [ERR_WORDS_EXHAUSTED]: "word stream exhausted",
  [ERR_MASK_PADDING]: "mask padding bit set",
  [ERR_NONZERO_COUNT]: "nonzero count differs from the block index",
  [ERR_ESCAPES_EXHAUSTED]: "escape array exhausted",
  [ERR_ESCAPE_VALUE]: "escaped value below 256",
  [ERR_UNUSED_ESCAPES]: "unused escapes",
  [ERR_UNUSED_WORDS]: "unused words",
  [ERR_FINAL_STATE]: "final lane state is not 2^16",
  [ERR_PADDING]: "padding between words and escapes is not zero",
  [ERR_MODE]: "unknown block mode",
};

export type Counts = Uint8Array | Uint16Array | Uint32Array;

function readUint(buffer: Uint8Array, position: number, nbytes: number): number {
  let value = 0;
  for (let k = nbytes - 1; k >= 0; k--) value = value * 256 + buffer[position + k]!;
  return value;
}

/** A 1.0 RANS block at `start` of `buffer` into frames `out[(row0 + t) * P + p]`. */
export function decodeRansBlock1(
  buffer: Uint8Array,
  start: number,
  nFrames: number,
  nWords: number,
  nNonzero: number,
  nEscapes: number,
  itemsize: number,
  framePixels: number,
  model: Model,
  out: Counts,
  row0: number,
): number {
  const groups = model.groupClass.length;
  const { freq, cum, slotSymbol } = model;
  const x = new Float64Array(LANES);
  for (let lane = 0; lane < LANES; lane++) {
    x[lane] = readUint(buffer, start + 4 * lane, 4);
    if (x[lane]! < RANS_L) return ERR_STATE_RANGE;
  }
  let position = start + LANE_STATES_SIZE;
  const wordsEnd = position + 2 * nWords;
  // Like the Python decoder, a read past the words takes a word from the block's start
  // and is reported after the phase (the read order, and so later checks, stay the same).
  const decode = (lane: number, context: number): number => {
    let state = x[lane]!;
    const slot = state % PROB_SCALE;
    const s = slotSymbol[context * PROB_SCALE + slot]!;
    state = freq[context * 256 + s]! * Math.floor(state / PROB_SCALE) + slot - cum[context * 257 + s]!;
    if (state < RANS_L) {
      const at = position < wordsEnd ? position : start;
      state = state * 65536 + (buffer[at]! | (buffer[at + 1]! << 8));
      position += 2;
    }
    x[lane] = state;
    return s;
  };
  const tailBits = framePixels % 8;
  const masks = new Uint8Array(nFrames * groups);
  let a = 0;
  for (let t = 0; t < nFrames; t++) {
    for (let j = 0; j < groups; j++) {
      masks[a] = decode(a & 31, 2 * model.groupClass[j]!);
      a++;
    }
    if (tailBits && masks[a - 1]! >> tailBits !== 0) return ERR_MASK_PADDING;
  }
  if (position > wordsEnd) return ERR_WORDS_EXHAUSTED;
  let escapePosition = start + Math.ceil((LANE_STATES_SIZE + 2 * nWords) / 4) * 4;
  for (let k = wordsEnd; k < escapePosition; k++) if (buffer[k] !== 0) return ERR_PADDING;
  const escapeEnd = escapePosition + nEscapes * itemsize;
  let v = 0;
  a = 0;
  for (let t = 0; t < nFrames; t++) {
    const base0 = (row0 + t) * framePixels;
    out.fill(0, base0, base0 + framePixels);
    for (let j = 0; j < groups; j++) {
      const m = masks[a++]!;
      if (m === 0) continue;
      const context = 2 * model.groupClass[j]! + 1;
      for (let i = 0; i < 8; i++) {
        if (!((m >> i) & 1)) continue;
        const s = decode(v & 31, context);
        v++;
        if (s !== ESCAPE_SYMBOL) out[base0 + 8 * j + i] = s + 1;
        else {
          if (escapePosition >= escapeEnd) return ERR_ESCAPES_EXHAUSTED;
          const value = readUint(buffer, escapePosition, itemsize);
          escapePosition += itemsize;
          if (value < ESCAPE_MIN_VALUE) return ERR_ESCAPE_VALUE;
          out[base0 + 8 * j + i] = value;
        }
      }
    }
  }
  if (v !== nNonzero) return ERR_NONZERO_COUNT;
  if (position > wordsEnd) return ERR_WORDS_EXHAUSTED;
  if (escapePosition !== escapeEnd) return ERR_UNUSED_ESCAPES;
  if (position !== wordsEnd) return ERR_UNUSED_WORDS;
  for (let lane = 0; lane < LANES; lane++) if (x[lane] !== RANS_L) return ERR_FINAL_STATE;
  return OK;
}

/** A 2.0 RANS entry (one row band) at `start` into frames `out[(row0 + t) * P + pixel0 + j]`. */
export function decodeRansBlock2(
  buffer: Uint8Array,
  start: number,
  nFrames: number,
  nWords: number,
  nEscapes: number,
  itemsize: number,
  bandPixels: number,
  quad0: number,
  model: Model,
  out: Counts,
  row0: number,
  pixel0: number,
  framePixels: number,
): number {
  const { freq, cum, slotSymbol, groupClass } = model;
  const x = new Float64Array(STATES_2);
  for (let i = 0; i < STATES_2; i++) {
    x[i] = readUint(buffer, start + 4 * i, 4);
    if (x[i]! < RANS_L) return ERR_STATE_RANGE;
  }
  let position = start + STATES_2_SIZE;
  const wordsEnd = position + 2 * nWords;
  let escapePosition = start + Math.ceil((STATES_2_SIZE + 2 * nWords) / 4) * 4;
  for (let k = wordsEnd; k < escapePosition; k++) if (buffer[k] !== 0) return ERR_PADDING;
  const escapeEnd = escapePosition + nEscapes * itemsize;
  const symbols = new Int32Array(STATES_2);
  const contexts = new Int32Array(STATES_2);
  for (let t = 0; t < nFrames; t++) {
    const frame = (row0 + t) * framePixels + pixel0;
    for (let j0 = 0; j0 < bandPixels; j0 += STATES_2) {
      const count = Math.min(STATES_2, bandPixels - j0);
      let escapes = 0;
      for (let i = 0; i < count; i++) {
        const c = groupClass[quad0 + ((j0 + i) >> 2)]!;
        let state = x[i]!;
        const slot = state % PROB_SCALE;
        const s = slotSymbol[c * PROB_SCALE + slot]!;
        state = freq[c * 256 + s]! * Math.floor(state / PROB_SCALE) + slot - cum[c * 257 + s]!;
        if (state < RANS_L) {
          if (position >= wordsEnd) return ERR_WORDS_EXHAUSTED;
          state = state * 65536 + (buffer[position]! | (buffer[position + 1]! << 8));
          position += 2;
        }
        x[i] = state;
        symbols[i] = s;
        contexts[i] = c;
        if (s === ESCAPE_SYMBOL) escapes++;
      }
      if (escapePosition + escapes * itemsize > escapeEnd) return ERR_ESCAPES_EXHAUSTED;
      for (let i = 0; i < count; i++) {
        let s = symbols[i]!;
        if (s === ESCAPE_SYMBOL) {
          const value = readUint(buffer, escapePosition, itemsize);
          escapePosition += itemsize;
          if (value < ESCAPE_SYMBOL && freq[contexts[i]! * 256 + value]! > 0) return ERR_ESCAPE_VALUE;
          s = value;
        }
        out[frame + j0 + i] = s;
      }
    }
  }
  if (escapePosition !== escapeEnd) return ERR_UNUSED_ESCAPES;
  if (position !== wordsEnd) return ERR_UNUSED_WORDS;
  for (let i = 0; i < STATES_2; i++) if (x[i] !== RANS_L) return ERR_FINAL_STATE;
  return OK;
}

export function readRaw(
  buffer: Uint8Array,
  start: number,
  nFrames: number,
  unitPixels: number,
  itemsize: number,
  out: Counts,
  row0: number,
  pixel0: number,
  framePixels: number,
): void {
  let position = start;
  for (let t = 0; t < nFrames; t++) {
    const frame = (row0 + t) * framePixels + pixel0;
    for (let j = 0; j < unitPixels; j++) {
      out[frame + j] = readUint(buffer, position, itemsize);
      position += itemsize;
    }
  }
}
