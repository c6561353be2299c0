// rANS decode of resident .qem blocks (docs/qem-format.md §12 for 1.0, §19.4 for 2.0).
// One invocation decodes one block-index entry in the reference order, with the checks and
// status codes of the CPU decoders (src/qem/rans.ts, quantem/stem4d/io/qem/rans*.py), so a
// damaged block gives the same error on every path. Counts are written as u32 per pixel.

struct Params {
  n_entries: u32,
  frame_pixels: u32,
  itemsize: u32,
  version: u32,
};

struct Entry {
  offset: u32,
  mode: u32,
  n_frames: u32,
  n_words: u32,
  n_nonzero: u32,
  n_escapes: u32,
  row0: u32,
  band: u32,
};

struct Band {
  pixel0: u32,
  pixels: u32,
  quad0: u32,
  pad: u32,
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> file_words: array<u32>;
@group(0) @binding(2) var<storage, read> entries: array<Entry>;
@group(0) @binding(3) var<storage, read> bands: array<Band>;
@group(0) @binding(4) var<storage, read> decode_table: array<u32>;
@group(0) @binding(5) var<storage, read> class_map: array<u32>;
@group(0) @binding(6) var<storage, read> freq: array<u32>;
@group(0) @binding(7) var<storage, read_write> counts: array<u32>;
@group(0) @binding(8) var<storage, read_write> status: array<u32>;

const RANS_L: u32 = 65536u;
const ESCAPE: u32 = 255u;
const ERR_STATE_RANGE: u32 = 1u;
const ERR_WORDS_EXHAUSTED: u32 = 2u;
const ERR_MASK_PADDING: u32 = 3u;
const ERR_NONZERO_COUNT: u32 = 4u;
const ERR_ESCAPES_EXHAUSTED: u32 = 5u;
const ERR_ESCAPE_VALUE: u32 = 6u;
const ERR_UNUSED_ESCAPES: u32 = 7u;
const ERR_UNUSED_WORDS: u32 = 8u;
const ERR_FINAL_STATE: u32 = 9u;
const ERR_PADDING: u32 = 10u;

fn byte_at(k: u32) -> u32 {
  return (file_words[k >> 2u] >> ((k & 3u) * 8u)) & 0xffu;
}

fn uint_at(k: u32, nbytes: u32) -> u32 {
  var value = 0u;
  for (var b = 0u; b < nbytes; b++) {
    value = value | (byte_at(k + b) << (8u * b));
  }
  return value;
}

fn word_at(k: u32) -> u32 {
  return byte_at(k) | (byte_at(k + 1u) << 8u);
}

// One symbol of `context` on `state`: returns (symbol, new state before renormalisation).
fn step(state: u32, context: u32) -> vec2<u32> {
  let slot = state & 4095u;
  let entry = decode_table[context * 4096u + slot];
  let f = ((entry >> 8u) & 0xfffu) + 1u;
  return vec2<u32>(entry & 0xffu, f * (state >> 12u) + (entry >> 20u));
}

var<private> x: array<u32, 128>;

fn decode_v1(e: Entry) -> u32 {
  let P = params.frame_pixels;
  let w = params.itemsize;
  let groups = (P + 7u) / 8u;
  let start = e.offset;
  for (var lane = 0u; lane < 32u; lane++) {
    x[lane] = uint_at(start + 4u * lane, 4u);
    if (x[lane] < RANS_L) { return ERR_STATE_RANGE; }
  }
  var position = start + 128u;
  let words_end = position + 2u * e.n_words;
  let tail_bits = P % 8u;
  // phase A: group masks, written as 0/1 flags into the block's pixels
  var a = 0u;
  for (var t = 0u; t < e.n_frames; t++) {
    let base = (e.row0 + t) * P;
    var m = 0u;
    for (var j = 0u; j < groups; j++) {
      let lane = a & 31u;
      let r = step(x[lane], 2u * class_map[j]);
      var state = r.y;
      if (state < RANS_L) {
        // a read past the words takes a word from the block's start, reported after the phase
        let at = select(start, position, position < words_end);
        state = (state << 16u) | word_at(at);
        position += 2u;
      }
      x[lane] = state;
      m = r.x;
      for (var i = 0u; i < 8u; i++) {
        let p = 8u * j + i;
        if (p < P) { counts[base + p] = (m >> i) & 1u; }
      }
      a++;
    }
    if (tail_bits != 0u && (m >> tail_bits) != 0u) { return ERR_MASK_PADDING; }
  }
  if (position > words_end) { return ERR_WORDS_EXHAUSTED; }
  var escape_position = start + ((128u + 2u * e.n_words + 3u) / 4u) * 4u;
  for (var k = words_end; k < escape_position; k++) {
    if (byte_at(k) != 0u) { return ERR_PADDING; }
  }
  let escape_end = escape_position + e.n_escapes * w;
  // phase B: values of the flagged pixels, in pixel order
  var v = 0u;
  for (var t = 0u; t < e.n_frames; t++) {
    let base = (e.row0 + t) * P;
    for (var p = 0u; p < P; p++) {
      if (counts[base + p] == 0u) { continue; }
      let lane = v & 31u;
      let r = step(x[lane], 2u * class_map[p / 8u] + 1u);
      var state = r.y;
      if (state < RANS_L) {
        let at = select(start, position, position < words_end);
        state = (state << 16u) | word_at(at);
        position += 2u;
      }
      x[lane] = state;
      v++;
      if (r.x != ESCAPE) {
        counts[base + p] = r.x + 1u;
      } else {
        if (escape_position >= escape_end) { return ERR_ESCAPES_EXHAUSTED; }
        let value = uint_at(escape_position, w);
        escape_position += w;
        if (value < 256u) { return ERR_ESCAPE_VALUE; }
        counts[base + p] = value;
      }
    }
  }
  if (v != e.n_nonzero) { return ERR_NONZERO_COUNT; }
  if (position > words_end) { return ERR_WORDS_EXHAUSTED; }
  if (escape_position != escape_end) { return ERR_UNUSED_ESCAPES; }
  if (position != words_end) { return ERR_UNUSED_WORDS; }
  for (var lane = 0u; lane < 32u; lane++) {
    if (x[lane] != RANS_L) { return ERR_FINAL_STATE; }
  }
  return 0u;
}

fn decode_v2(e: Entry) -> u32 {
  let P = params.frame_pixels;
  let w = params.itemsize;
  let band = bands[e.band];
  let start = e.offset;
  for (var i = 0u; i < 128u; i++) {
    x[i] = uint_at(start + 4u * i, 4u);
    if (x[i] < RANS_L) { return ERR_STATE_RANGE; }
  }
  var position = start + 512u;
  let words_end = position + 2u * e.n_words;
  var escape_position = start + ((512u + 2u * e.n_words + 3u) / 4u) * 4u;
  for (var k = words_end; k < escape_position; k++) {
    if (byte_at(k) != 0u) { return ERR_PADDING; }
  }
  let escape_end = escape_position + e.n_escapes * w;
  for (var t = 0u; t < e.n_frames; t++) {
    let base = (e.row0 + t) * P + band.pixel0;
    for (var j0 = 0u; j0 < band.pixels; j0 += 128u) {
      let count = min(128u, band.pixels - j0);
      var escapes = 0u;
      // the round's symbols and word reads (symbol order); symbols parked in counts
      for (var i = 0u; i < count; i++) {
        let c = class_map[band.quad0 + ((j0 + i) >> 2u)];
        let r = step(x[i], c);
        var state = r.y;
        if (state < RANS_L) {
          if (position >= words_end) { return ERR_WORDS_EXHAUSTED; }
          state = (state << 16u) | word_at(position);
          position += 2u;
        }
        x[i] = state;
        counts[base + j0 + i] = r.x;
        escapes += select(0u, 1u, r.x == ESCAPE);
      }
      if (escape_position + escapes * w > escape_end) { return ERR_ESCAPES_EXHAUSTED; }
      for (var i = 0u; i < count; i++) {
        if (counts[base + j0 + i] == ESCAPE) {
          let c = class_map[band.quad0 + ((j0 + i) >> 2u)];
          let value = uint_at(escape_position, w);
          escape_position += w;
          if (value < ESCAPE && freq[c * 256u + value] > 0u) { return ERR_ESCAPE_VALUE; }
          counts[base + j0 + i] = value;
        }
      }
    }
  }
  if (escape_position != escape_end) { return ERR_UNUSED_ESCAPES; }
  if (position != words_end) { return ERR_UNUSED_WORDS; }
  for (var i = 0u; i < 128u; i++) {
    if (x[i] != RANS_L) { return ERR_FINAL_STATE; }
  }
  return 0u;
}

fn decode_raw(e: Entry, pixel0: u32, pixels: u32) {
  let P = params.frame_pixels;
  let w = params.itemsize;
  var position = e.offset;
  for (var t = 0u; t < e.n_frames; t++) {
    for (var j = 0u; j < pixels; j++) {
      counts[(e.row0 + t) * P + pixel0 + j] = uint_at(position, w);
      position += w;
    }
  }
}

@compute @workgroup_size(64)
fn decode_entries(@builtin(global_invocation_id) id: vec3<u32>) {
  let k = id.x;
  if (k >= params.n_entries) { return; }
  let e = entries[k];
  var pixel0 = 0u;
  var pixels = params.frame_pixels;
  if (params.version == 2u) {
    pixel0 = bands[e.band].pixel0;
    pixels = bands[e.band].pixels;
  }
  var result = 0u;
  if (e.mode == 2u) {
    if (params.version == 2u) { result = decode_v2(e); } else { result = decode_v1(e); }
  } else if (e.mode == 1u) {
    decode_raw(e, pixel0, pixels);
  } else {
    for (var t = 0u; t < e.n_frames; t++) {
      for (var j = 0u; j < pixels; j++) { counts[(e.row0 + t) * params.frame_pixels + pixel0 + j] = 0u; }
    }
  }
  status[k] = result;
}
