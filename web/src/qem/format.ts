// The .qem byte layout (versions 1.0 and 2.0), from docs/qem-format.md: constants and
// parsers, one per section of the document. Each check mirrors the Python reader
// (quantem/stem4d/io/qem/format.py) in order and wording, so both refuse a damaged file
// with the same message.
import { QemFormatError, QemVersionError } from "../errors.js";
import { isJsonInt, JsonFloat, parseJson, type JsonValue } from "../json.js";
import { pyRepr } from "../pyrepr.js";
import { xxh3 } from "../xxh3.js";

// §1-§4
export const ITEMSIZE_TO_DTYPE: Record<number, string> = { 1: "uint8", 2: "uint16", 4: "uint32" };
export const SECTION_ALIGN = 64n;
export const PAYLOAD_ALIGN = 4096n;
export const BLOCK_ALIGN = 16;
export const FOOTER_ALIGN = 64n;
export const MAGIC = [0x89, 0x51, 0x45, 0x4d, 0x0d, 0x0a, 0x1a, 0x0a];
export const SUPPORTED_VERSIONS: Record<number, number> = { 1: 0, 2: 0 };
export const VERSION_MINOR = 0;
export const VERSION_2 = 2;
export const HEADER_SIZE = 256;
export const HEADER_CHECKSUM_OFFSET = 248;
export const SECTION_TABLE_OFFSET = 64;
export const SECTION_ENTRY_SIZE = 24;
export const MAX_DETECTOR_SIDE = 65535;
export const MAX_FRAME_PIXELS = 1 << 28;
export const MAX_FRAMES = 1n << 40n;
export const MAX_BLOCK_PIXELS = 1n << 31n;
export const SECTION_METADATA = 0;
export const SECTION_PIXEL_MASK = 1;
export const SECTION_MODEL = 2;
export const SECTION_BLOCK_INDEX = 3;
export const SECTION_BLOCK_CHECKSUMS = 4;
export const SECTION_PAYLOAD = 5;
export const SECTION_SPATIAL_INDEX = 6;
export const N_SECTIONS = 7;
export const SECTION_NAMES = [
  "METADATA",
  "PIXEL_MASK",
  "MODEL",
  "BLOCK_INDEX",
  "BLOCK_CHECKSUMS",
  "PAYLOAD",
  "SPATIAL_INDEX",
];
export const MAX_METADATA_BYTES = 16n << 20n;
// §7, §8, §11, §19
export const GROUP_PIXELS = 8;
export const MAX_CLASSES = 4;
export const ALPHABET = 256;
export const ESCAPE_SYMBOL = 255;
export const ESCAPE_MIN_VALUE = 256;
export const MODEL_HEADER_SIZE = 16;
export const BLOCK_ENTRY_SIZE = 48;
export const MODE_ZERO = 0;
export const MODE_RAW = 1;
export const MODE_RANS = 2;
export const LANES = 32;
export const LANE_STATES_SIZE = 4 * LANES;
export const PROB_BITS = 12;
export const PROB_SCALE = 1 << PROB_BITS;
export const RANS_L = 1 << 16;
export const STATES_2 = 128;
export const STATES_2_SIZE = 4 * STATES_2;
export const QUAD_PIXELS = 4;
export const FOOTER_MAGIC = [0x51, 0x45, 0x4d, 0x2d, 0x45, 0x4e, 0x44, 0x1a];
export const FOOTER_SIZE = 32;
const U64 = (1n << 64n) - 1n;

export function alignUp(value: bigint, alignment: bigint): bigint {
  return ((value + alignment - 1n) / alignment) * alignment;
}

export function alignUpNumber(value: number, alignment: number): number {
  return Math.ceil(value / alignment) * alignment;
}

export function nBands(detR: number, bandRows: number): number {
  return bandRows ? Math.ceil(detR / bandRows) : 1;
}

/** Per band: first row and number of rows (§19.1); one band (the frame) in 1.0. */
export function bandGeometry(detR: number, bandRows: number): { first: number[]; rows: number[] } {
  const bands = nBands(detR, bandRows);
  const per = bandRows || detR;
  const first = Array.from({ length: bands }, (_, k) => k * per);
  return { first, rows: first.map((f) => Math.min(per, detR - f)) };
}

/** Per band: index of its first quad in the 2.0 class map, and the total (§19.3). */
export function bandQuads(detR: number, detC: number, bandRows: number): number[] {
  const { rows } = bandGeometry(detR, bandRows);
  const out = [0];
  for (const r of rows) out.push(out[out.length - 1]! + Math.ceil((r * detC) / QUAD_PIXELS));
  return out;
}

export interface Section {
  offset: bigint;
  length: bigint;
  xxh3: bigint;
}

export interface Header {
  versionMajor: number;
  versionMinor: number;
  fileSize: bigint;
  nFrames: number;
  scanShape: [number, number];
  detectorShape: [number, number];
  storedItemsize: number;
  sourceItemsize: number;
  blockFrames: number;
  nBlocks: number;
  sections: Section[];
  headerXxh3: bigint;
  bandRows: number;
}

export function framePixels(header: Header): number {
  return header.detectorShape[0] * header.detectorShape[1];
}

function equalBytes(data: Uint8Array, offset: number, expected: number[]): boolean {
  return expected.every((b, k) => data[offset + k] === b);
}

/** Validate the fixed header (§3, §14 steps 1-4 except the file size) and parse it. */
export function parseHeader(data: Uint8Array, path: string | null): Header {
  if (data.length < HEADER_SIZE + FOOTER_SIZE) {
    throw new QemFormatError(path, `file too short to be .qem (${data.length} bytes)`, {
      section: "header",
    });
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const major = view.getUint16(8, true);
  const minor = view.getUint16(10, true);
  const headerSize = view.getUint32(12, true);
  const fileSize = view.getBigUint64(16, true);
  const nFrames = view.getBigUint64(24, true);
  const scanR = view.getUint32(32, true);
  const scanC = view.getUint32(36, true);
  const detR = view.getUint32(40, true);
  const detC = view.getUint32(44, true);
  const stored = view.getUint8(48);
  const source = view.getUint8(49);
  const reserved0 = view.getUint16(50, true);
  const blockFrames = view.getUint32(52, true);
  const nBlocks = view.getUint32(56, true);
  const reserved1 = view.getUint32(60, true);
  if (!equalBytes(data, 0, MAGIC)) {
    throw new QemFormatError(path, "not a .qem file (bad magic)", { section: "header" });
  }
  if (!(major in SUPPORTED_VERSIONS)) {
    const known = Object.entries(SUPPORTED_VERSIONS)
      .map(([a, b]) => `${a}.x (up to ${a}.${b})`)
      .join(", ");
    throw new QemVersionError(
      path,
      `unsupported .qem major version ${major}.${minor}; this reader supports ${known}`,
      { section: "header" },
    );
  }
  const storedChecksum = view.getBigUint64(HEADER_CHECKSUM_OFFSET, true);
  if (xxh3(data.subarray(0, HEADER_CHECKSUM_OFFSET)) !== storedChecksum) {
    throw new QemFormatError(path, "header checksum mismatch", { section: "header" });
  }
  const bad = (detail: string) => new QemFormatError(path, detail, { section: "header" });
  if (headerSize !== HEADER_SIZE) throw bad(`header_size ${headerSize} != ${HEADER_SIZE}`);
  const tail = data.subarray(SECTION_TABLE_OFFSET + N_SECTIONS * SECTION_ENTRY_SIZE, HEADER_CHECKSUM_OFFSET);
  const knownMinor = minor <= SUPPORTED_VERSIONS[major]!;
  const bandRows = major === VERSION_2 ? reserved1 : 0;
  if (knownMinor && (reserved0 || (reserved1 && major !== VERSION_2) || tail.some((b) => b !== 0))) {
    throw bad("reserved header field is not zero");
  }
  if (!(stored in ITEMSIZE_TO_DTYPE) || !(source in ITEMSIZE_TO_DTYPE)) {
    throw bad(`invalid item sizes stored=${stored} source=${source}`);
  }
  if (!(1 <= detR && detR <= MAX_DETECTOR_SIDE && 1 <= detC && detC <= MAX_DETECTOR_SIDE)) {
    throw bad(`detector shape ${detR}x${detC} out of range`);
  }
  if (detR * detC > MAX_FRAME_PIXELS) {
    throw bad(`${detR * detC} pixels per frame exceeds ${MAX_FRAME_PIXELS}`);
  }
  if (scanR < 1 || scanC < 1 || nFrames !== BigInt(scanR) * BigInt(scanC) || nFrames > MAX_FRAMES) {
    throw bad(`frame count ${nFrames} inconsistent with scan ${scanR}x${scanC}`);
  }
  if (blockFrames < 1 || BigInt(blockFrames) * BigInt(detR * detC) > MAX_BLOCK_PIXELS) {
    throw bad(`block_frames ${blockFrames} out of range`);
  }
  if (major === VERSION_2 && !(1 <= bandRows && bandRows <= detR)) {
    throw bad(`band_rows ${bandRows} out of range 1..${detR}`);
  }
  const bands = nBands(detR, bandRows);
  const frameBlocks = (nFrames + BigInt(blockFrames) - 1n) / BigInt(blockFrames);
  if (BigInt(nBlocks) !== frameBlocks * BigInt(bands)) {
    throw bad(
      `n_blocks ${nBlocks} != ceil(${nFrames} / ${blockFrames})` +
        (major === VERSION_2 ? ` * ${bands} bands` : ""),
    );
  }
  const sections: Section[] = [];
  for (let i = 0; i < N_SECTIONS; i++) {
    const at = SECTION_TABLE_OFFSET + SECTION_ENTRY_SIZE * i;
    sections.push({
      offset: view.getBigUint64(at, true),
      length: view.getBigUint64(at + 8, true),
      xxh3: view.getBigUint64(at + 16, true),
    });
  }
  return {
    versionMajor: major,
    versionMinor: minor,
    fileSize,
    nFrames: Number(nFrames),
    scanShape: [scanR, scanC],
    detectorShape: [detR, detC],
    storedItemsize: stored,
    sourceItemsize: source,
    blockFrames,
    nBlocks,
    sections,
    headerXxh3: storedChecksum,
    bandRows,
  };
}

/** Validate the footer against the header (§13). */
export function parseFooter(data: Uint8Array, header: Header, path: string | null): void {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  if (!equalBytes(data, 0, FOOTER_MAGIC)) {
    throw new QemFormatError(path, "bad footer magic (truncated or incomplete file?)", {
      section: "footer",
    });
  }
  if (xxh3(data.subarray(0, 24)) !== view.getBigUint64(24, true)) {
    throw new QemFormatError(path, "footer checksum mismatch", { section: "footer" });
  }
  if (view.getBigUint64(8, true) !== header.fileSize || view.getBigUint64(16, true) !== header.headerXxh3) {
    throw new QemFormatError(path, "footer does not match the header", { section: "footer" });
  }
}

/** Canonical offsets of the sections and of the footer for given lengths (§2). */
export function expectedSectionLayout(lengths: bigint[]): { offsets: bigint[]; footer: bigint } {
  const offsets: bigint[] = [];
  let end = BigInt(HEADER_SIZE);
  lengths.forEach((length, id) => {
    if (id === SECTION_PAYLOAD || length > 0n) {
      const start = alignUp(end, id === SECTION_PAYLOAD ? PAYLOAD_ALIGN : SECTION_ALIGN);
      offsets.push(start);
      end = start + length;
    } else offsets.push(0n);
  });
  return { offsets, footer: alignUp(end, FOOTER_ALIGN) };
}

const REQUIRED_METADATA_KEYS = [
  "scan_shape",
  "detector_shape",
  "n_frames",
  "dtype",
  "source_dtype",
  "pixel_mask",
  "calibration",
  "source",
  "encoder",
  "detector",
];
const SOURCE_METADATA_KEYS = ["kind", "files", "identity", "sha256"];

type JsonObject = { [key: string]: JsonValue };

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof JsonFloat);
}

/** Parse METADATA JSON and check it agrees with the header (§5). */
export function parseMetadata(data: Uint8Array, header: Header, path: string | null): JsonObject {
  const bad = (detail: string) => new QemFormatError(path, detail, { section: "METADATA" });
  let metadata: JsonValue;
  try {
    metadata = parseJson(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch (error) {
    throw bad(`invalid JSON: ${(error as Error).message}`);
  }
  if (!isObject(metadata)) throw bad("not a JSON object");
  const missing = REQUIRED_METADATA_KEYS.filter((key) => !(key in metadata));
  if (missing.length) throw bad(`missing keys ${pyRepr(missing)}`);
  const checks: [string, number[] | number | string][] = [
    ["scan_shape", [...header.scanShape]],
    ["detector_shape", [...header.detectorShape]],
    ["n_frames", header.nFrames],
    ["dtype", ITEMSIZE_TO_DTYPE[header.storedItemsize]!],
    ["source_dtype", ITEMSIZE_TO_DTYPE[header.sourceItemsize]!],
  ];
  for (const [key, expected] of checks) {
    const value = metadata[key];
    let same: boolean;
    if (Array.isArray(expected)) {
      same =
        Array.isArray(value) &&
        value.length === expected.length &&
        value.every((v, k) => isJsonInt(v) && v === expected[k]);
    } else if (typeof expected === "number") {
      same = isJsonInt(value) && value === expected;
    } else same = typeof value === "string" && value === expected;
    if (!same) throw bad(`${key} ${pyRepr(value)} disagrees with the header (${pyRepr(expected)})`);
  }
  const mask = metadata["pixel_mask"];
  if (!isObject(mask)) throw bad("pixel_mask must be an object");
  const encoding = header.sections[SECTION_PIXEL_MASK]!.length > 0n ? "section" : "all-zero";
  if (mask["encoding"] !== encoding) throw bad(`pixel_mask.encoding must be ${pyRepr(encoding)}`);
  if (mask["dtype"] !== "uint32" || !isJsonInt(mask["n_masked"])) {
    throw bad("pixel_mask must have dtype 'uint32' and an integer n_masked");
  }
  for (const key of ["calibration", "source", "encoder", "detector"]) {
    if (!isObject(metadata[key])) throw bad(`${key} must be an object`);
  }
  const source = metadata["source"] as JsonObject;
  const missingSource = SOURCE_METADATA_KEYS.filter((key) => !(key in source));
  if (missingSource.length) throw bad(`source is missing keys ${pyRepr(missingSource)}`);
  if (typeof source["kind"] !== "string") throw bad("source.kind must be a string");
  const files = source["files"];
  if (!Array.isArray(files) || !files.every((f) => typeof f === "string")) {
    throw bad("source.files must be a list of strings");
  }
  for (const key of ["identity", "sha256"]) {
    if (source[key] !== null && !isObject(source[key])) throw bad(`source.${key} must be an object or null`);
  }
  return metadata;
}

export interface Model {
  nClasses: number;
  nContexts: number;
  /** 1.0: class of each 8-pixel group; 2.0: class of each band quad (§19.3). */
  groupClass: Uint8Array;
  /** [context * 256 + symbol] */
  freq: Uint16Array;
  /** [context * 257 + symbol] */
  cum: Uint32Array;
  /** [context * 4096 + slot] -> symbol */
  slotSymbol: Uint8Array;
}

/** Validate and parse the MODEL section (§7, §19.3). */
export function parseModel(data: Uint8Array, header: Header, path: string | null): Model {
  const bad = (detail: string) => new QemFormatError(path, detail, { section: "MODEL" });
  if (data.length < MODEL_HEADER_SIZE) throw bad("section too short");
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const nClasses = view.getUint32(0, true);
  const nContexts = view.getUint32(4, true);
  const nGroup = view.getUint32(8, true);
  const reserved = view.getUint32(12, true);
  const version2 = header.versionMajor === VERSION_2;
  const perClass = version2 ? 1 : 2;
  if (!(1 <= nClasses && nClasses <= MAX_CLASSES) || nContexts !== perClass * nClasses) {
    throw bad(`invalid class/context counts ${nClasses}/${nContexts}`);
  }
  const [detR, detC] = header.detectorShape;
  const expectedGroups = version2
    ? bandQuads(detR, detC, header.bandRows).at(-1)!
    : Math.ceil((detR * detC) / GROUP_PIXELS);
  const what = version2 ? "n_quads" : "n_groups";
  if (nGroup !== expectedGroups || reserved) {
    throw bad(`${what} ${nGroup} != ${expectedGroups} or reserved field set`);
  }
  const length = MODEL_HEADER_SIZE + alignUpNumber(nGroup, 4) + 2 * ALPHABET * nContexts;
  if (data.length !== length) throw bad(`length ${data.length} != ${length}`);
  const groupClass = data.slice(MODEL_HEADER_SIZE, MODEL_HEADER_SIZE + nGroup);
  if (data.subarray(MODEL_HEADER_SIZE + nGroup, MODEL_HEADER_SIZE + alignUpNumber(nGroup, 4)).some((b) => b)) {
    throw bad("class map padding is not zero");
  }
  if (groupClass.some((c) => c >= nClasses)) throw bad("class map value out of range");
  const start = MODEL_HEADER_SIZE + alignUpNumber(nGroup, 4);
  const freq = new Uint16Array(nContexts * ALPHABET);
  for (let k = 0; k < freq.length; k++) freq[k] = view.getUint16(start + 2 * k, true);
  for (let c = 0; c < nContexts; c++) {
    let sum = 0;
    for (let s = 0; s < ALPHABET; s++) sum += freq[c * ALPHABET + s]!;
    if (sum !== PROB_SCALE) throw bad(`frequency table of context ${c} sums to ${sum}, not 4096`);
  }
  if (perClass === 1) {
    for (let c = 0; c < nContexts; c++) {
      if (freq[c * ALPHABET + ESCAPE_SYMBOL] === 0) {
        throw bad(`frequency table of context ${c} gives ESCAPE no slot (2.0 needs one)`);
      }
    }
  }
  const cum = new Uint32Array(nContexts * (ALPHABET + 1));
  const slotSymbol = new Uint8Array(nContexts * PROB_SCALE);
  for (let c = 0; c < nContexts; c++) {
    for (let s = 0; s < ALPHABET; s++) {
      const f = freq[c * ALPHABET + s]!;
      const low = cum[c * 257 + s]!;
      cum[c * 257 + s + 1] = low + f;
      slotSymbol.fill(s, c * PROB_SCALE + low, c * PROB_SCALE + low + f);
    }
  }
  return { nClasses, nContexts, groupClass, freq, cum, slotSymbol };
}

export interface BlockEntry {
  frameStart: number;
  nFrames: number;
  mode: number;
  offset: number;
  length: number;
  nWords: number;
  nNonzero: number;
  nEscapes: number;
  band: number;
}

/** Validate the BLOCK_INDEX section (§8, §10, §14 step 10, §19.2). */
export function parseBlockIndex(data: Uint8Array, header: Header, path: string | null): BlockEntry[] {
  const nBlocks = header.nBlocks;
  if (data.length !== BLOCK_ENTRY_SIZE * nBlocks) {
    throw new QemFormatError(path, `length ${data.length} != 48 * ${nBlocks}`, { section: "BLOCK_INDEX" });
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const payload = header.sections[SECTION_PAYLOAD]!;
  const w = BigInt(header.storedItemsize);
  const version2 = header.versionMajor === VERSION_2;
  const [detR, detC] = header.detectorShape;
  const bands = nBands(detR, header.bandRows);
  const { rows: bandRows } = bandGeometry(detR, header.bandRows);
  const groups = BigInt(Math.ceil((detR * detC) / GROUP_PIXELS));
  const states = BigInt(version2 ? STATES_2_SIZE : LANE_STATES_SIZE);
  let previousEnd = payload.offset;
  const entries: BlockEntry[] = [];
  for (let e = 0; e < nBlocks; e++) {
    const at = BLOCK_ENTRY_SIZE * e;
    const frameStartField = view.getBigUint64(at, true);
    const nFramesField = view.getUint32(at + 8, true);
    const mode = view.getUint32(at + 12, true);
    const offset = view.getBigUint64(at + 16, true);
    const length = view.getBigUint64(at + 24, true);
    const nWords = BigInt(view.getUint32(at + 32, true));
    const nNonzero = BigInt(view.getUint32(at + 36, true));
    const nEscapes = BigInt(view.getUint32(at + 40, true));
    const bandField = view.getUint32(at + 44, true);
    const block = Math.floor(e / bands);
    const band = e % bands;
    const frameStart = BigInt(block) * BigInt(header.blockFrames);
    const nFrames = BigInt(Math.min(header.blockFrames, header.nFrames - Number(frameStart)));
    const unitPixels = BigInt(version2 ? bandRows[band]! * detC : detR * detC);
    const pixels = nFrames * unitPixels;
    const isRans = mode === MODE_RANS;
    const expectedLength =
      mode === MODE_RAW ? pixels * w : isRans ? ((states + 2n * nWords + 3n) / 4n) * 4n + nEscapes * w : 0n;
    const problems: [boolean, string][] = [
      [frameStartField !== frameStart, "frame_start"],
      [BigInt(nFramesField) !== nFrames, "frame count"],
      [mode > MODE_RANS, "unknown mode"],
      [bandField !== (version2 ? band : 0), version2 ? "band" : "reserved field"],
      [!isRans && (nWords | nNonzero | nEscapes) !== 0n, "counts on a non-RANS block"],
    ];
    if (version2) {
      problems.push(
        [nNonzero !== 0n, "n_nonzero must be 0 in 2.0"],
        [isRans && nEscapes > pixels, "n_escapes exceeds pixels"],
        [isRans && nWords > pixels, "too many words"],
      );
    } else {
      problems.push(
        [isRans && nNonzero > pixels, "n_nonzero exceeds pixels"],
        [isRans && nEscapes > nNonzero, "n_escapes exceeds n_nonzero"],
        [isRans && nEscapes > 0n && w === 1n, "escapes with uint8 data"],
        [isRans && nWords > nFrames * groups + nNonzero, "too many words"],
      );
    }
    problems.push([length !== expectedLength, "length inconsistent with mode and counts"]);
    // numpy uint64 arithmetic of the Python reader: wraps, never throws
    const end = (offset + length) & U64;
    const paddedEnd = (((end + 15n) & U64) / 16n) * 16n;
    problems.push([offset !== previousEnd || offset > header.fileSize, "offset"]);
    previousEnd = paddedEnd;
    const failed = problems.find(([bad]) => bad);
    if (failed) {
      throw new QemFormatError(path, `block index entry invalid: ${failed[1]}`, {
        section: "BLOCK_INDEX",
        block: e,
      });
    }
    entries.push({
      frameStart: Number(frameStart),
      nFrames: Number(nFrames),
      mode,
      offset: Number(offset),
      length: Number(length),
      nWords: Number(nWords),
      nNonzero: Number(nNonzero),
      nEscapes: Number(nEscapes),
      band: bandField,
    });
  }
  const total = nBlocks ? previousEnd - payload.offset : 0n;
  if (total !== payload.length) {
    throw new QemFormatError(path, `PAYLOAD length ${payload.length} != block extents ${total}`, {
      section: "PAYLOAD",
    });
  }
  return entries;
}

export function blockExtentEnd(offset: number, length: number): number {
  return alignUpNumber(offset + length, BLOCK_ALIGN);
}
