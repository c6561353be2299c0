// An open, validated .qem file held in memory (the browser has the bytes: a File read
// into an ArrayBuffer). Everything §14 lists is checked when the file is opened, in the
// Python reader's order (quantem/stem4d/io/qem/reader.py); blocks are checksummed and
// decoded only when a request needs them.
import { QemFormatError } from "../errors.js";
import type { JsonValue } from "../json.js";
import { pyRepr } from "../pyrepr.js";
import { xxh3 } from "../xxh3.js";
import * as fmt from "./format.js";
import { decodeRansBlock1, decodeRansBlock2, OK, readRaw, STATUS_MESSAGES, type Counts } from "./rans.js";

export class QemFile {
  readonly path: string;
  readonly bytes: Uint8Array;
  readonly header: fmt.Header;
  readonly metadata: { [key: string]: JsonValue };
  readonly pixelMask: Uint32Array;
  readonly model: fmt.Model;
  readonly blockIndex: fmt.BlockEntry[];
  readonly blockChecksums: BigUint64Array;
  readonly version2: boolean;
  readonly nBands: number;
  readonly bandFirstRow: number[];
  readonly bandRows: number[];
  readonly bandQuad0: number[];
  private readonly verified: Uint8Array;

  /** Validate `bytes` (the whole file) named `path` in messages. `initXxh3()` must have run. */
  constructor(bytes: Uint8Array, path: string, readonly verify = true) {
    this.path = path;
    this.bytes = bytes;
    const size = bytes.length;
    if (size < fmt.HEADER_SIZE + fmt.FOOTER_SIZE) {
      throw new QemFormatError(path, `file too short to be .qem (${size} bytes)`, { section: "header" });
    }
    const header = fmt.parseHeader(bytes.subarray(0, fmt.HEADER_SIZE + fmt.FOOTER_SIZE), path);
    if (header.fileSize !== BigInt(size)) {
      throw new QemFormatError(path, `file is ${size} bytes but the header says ${header.fileSize} (truncated?)`, {
        section: "header",
      });
    }
    fmt.parseFooter(bytes.subarray(size - fmt.FOOTER_SIZE), header, path);
    this.header = header;
    this.checkSections();
    this.metadata = fmt.parseMetadata(this.sectionBytes(fmt.SECTION_METADATA), header, path);
    const [detR, detC] = header.detectorShape;
    const pixels = detR * detC;
    if (header.sections[fmt.SECTION_PIXEL_MASK]!.length > 0n) {
      const raw = this.sectionBytes(fmt.SECTION_PIXEL_MASK);
      const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      this.pixelMask = new Uint32Array(pixels);
      for (let p = 0; p < pixels; p++) this.pixelMask[p] = view.getUint32(4 * p, true);
      if (!this.pixelMask.some((v) => v !== 0)) {
        throw new QemFormatError(path, "present pixel mask is all zero", { section: "PIXEL_MASK" });
      }
    } else this.pixelMask = new Uint32Array(pixels);
    const declared = this.metadata["pixel_mask"] as { [key: string]: JsonValue };
    const nMasked = this.pixelMask.reduce((n, v) => n + (v !== 0 ? 1 : 0), 0);
    if (declared["n_masked"] !== nMasked) {
      throw new QemFormatError(
        path,
        `metadata pixel_mask ${pyRepr(declared)} disagrees with the mask (${nMasked} masked)`,
        { section: "METADATA" },
      );
    }
    this.model = fmt.parseModel(this.sectionBytes(fmt.SECTION_MODEL), header, path);
    this.blockIndex = fmt.parseBlockIndex(this.sectionBytes(fmt.SECTION_BLOCK_INDEX), header, path);
    const checks = this.sectionBytes(fmt.SECTION_BLOCK_CHECKSUMS);
    const checkView = new DataView(checks.buffer, checks.byteOffset, checks.byteLength);
    this.blockChecksums = new BigUint64Array(header.nBlocks);
    for (let b = 0; b < header.nBlocks; b++) this.blockChecksums[b] = checkView.getBigUint64(8 * b, true);
    this.version2 = header.versionMajor === fmt.VERSION_2;
    this.nBands = fmt.nBands(detR, header.bandRows);
    const geometry = fmt.bandGeometry(detR, header.bandRows);
    this.bandFirstRow = geometry.first;
    this.bandRows = geometry.rows;
    this.bandQuad0 = fmt.bandQuads(detR, detC, header.bandRows);
    this.verified = new Uint8Array(header.nBlocks);
  }

  private sectionError(id: number, detail: string): QemFormatError {
    const name = fmt.SECTION_NAMES[id]!;
    return new QemFormatError(this.path, `section ${name}: ${detail}`, { section: name });
  }

  private sectionBytes(id: number): Uint8Array {
    const s = this.header.sections[id]!;
    return this.bytes.subarray(Number(s.offset), Number(s.offset + s.length));
  }

  private checkSections(): void {
    const header = this.header;
    const lengths = header.sections.map((s) => s.length);
    const nBlocks = BigInt(header.nBlocks);
    const rules: [number, bigint, bigint][] = [
      [fmt.SECTION_METADATA, 1n, fmt.MAX_METADATA_BYTES],
      [fmt.SECTION_BLOCK_INDEX, 48n * nBlocks, 48n * nBlocks],
      [fmt.SECTION_BLOCK_CHECKSUMS, 8n * nBlocks, 8n * nBlocks],
    ];
    for (const [id, low, high] of rules) {
      if (!(low <= lengths[id]! && lengths[id]! <= high)) throw this.sectionError(id, `length ${lengths[id]} invalid`);
    }
    const maskLength = lengths[fmt.SECTION_PIXEL_MASK]!;
    if (maskLength !== 0n && maskLength !== 4n * BigInt(fmt.framePixels(header))) {
      throw this.sectionError(fmt.SECTION_PIXEL_MASK, `length ${maskLength} invalid`);
    }
    if (lengths[fmt.SECTION_MODEL]! < BigInt(fmt.MODEL_HEADER_SIZE)) throw this.sectionError(fmt.SECTION_MODEL, "too short");
    if (lengths[fmt.SECTION_SPATIAL_INDEX]! && header.versionMinor <= fmt.VERSION_MINOR) {
      throw this.sectionError(fmt.SECTION_SPATIAL_INDEX, "must be absent in 1.0");
    }
    if (header.sections[fmt.SECTION_PAYLOAD]!.xxh3 !== 0n) {
      throw this.sectionError(fmt.SECTION_PAYLOAD, "checksum field must be 0");
    }
    if (lengths.some((length) => length > header.fileSize)) {
      throw new QemFormatError(this.path, "section longer than the file", { section: "header" });
    }
    const { offsets, footer } = fmt.expectedSectionLayout(lengths);
    header.sections.forEach((s, id) => {
      if (s.offset !== offsets[id] || (s.length === 0n && id !== fmt.SECTION_PAYLOAD && s.xxh3)) {
        throw this.sectionError(id, "offset is not the canonical layout");
      }
    });
    if (footer + BigInt(fmt.FOOTER_SIZE) !== header.fileSize) {
      throw new QemFormatError(this.path, "file size disagrees with the section layout", { section: "footer" });
    }
    let position = fmt.HEADER_SIZE;
    const spans: [number, number, number][] = [];
    header.sections.forEach((s, id) => {
      if (s.length > 0n || id === fmt.SECTION_PAYLOAD) spans.push([Number(s.offset), Number(s.offset + s.length), id]);
    });
    spans.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
    spans.push([Number(footer), Number(footer), -1]);
    for (const [start, end, id] of spans) {
      if (start > position && this.bytes.subarray(position, start).some((b) => b !== 0)) {
        const where = id >= 0 ? fmt.SECTION_NAMES[id]! : "footer";
        throw new QemFormatError(this.path, `nonzero padding before ${where}`, { section: where });
      }
      position = Math.max(position, end);
    }
    header.sections.forEach((s, id) => {
      if (s.length > 0n && id !== fmt.SECTION_PAYLOAD && xxh3(this.sectionBytes(id)) !== s.xxh3) {
        throw this.sectionError(id, "checksum mismatch");
      }
    });
  }

  get scanShape(): [number, number] {
    return this.header.scanShape;
  }
  get detectorShape(): [number, number] {
    return this.header.detectorShape;
  }
  get nFrames(): number {
    return this.header.nFrames;
  }
  get framePixels(): number {
    return fmt.framePixels(this.header);
  }
  get dtype(): string {
    return fmt.ITEMSIZE_TO_DTYPE[this.header.storedItemsize]!;
  }
  get nFrameBlocks(): number {
    return Math.ceil(this.header.nFrames / this.header.blockFrames);
  }

  /** Block-index entries of frame blocks, every band of each in order. */
  entries(frameBlocks: number[]): number[] {
    return frameBlocks.flatMap((b) => Array.from({ length: this.nBands }, (_, k) => b * this.nBands + k));
  }

  /** Check the XXH3-64 and trailing padding of blocks (all by default). */
  verifyChecksums(blocks?: number[]): void {
    for (const b of blocks ?? Array.from({ length: this.header.nBlocks }, (_, k) => k)) {
      const { offset, length } = this.blockIndex[b]!;
      const end = fmt.blockExtentEnd(offset, length);
      if (xxh3(this.bytes.subarray(offset, end)) !== this.blockChecksums[b]) {
        throw new QemFormatError(this.path, "block checksum mismatch", { section: "PAYLOAD", block: b });
      }
      if (this.bytes.subarray(offset + length, end).some((v) => v !== 0)) {
        throw new QemFormatError(this.path, "nonzero block padding", { section: "PAYLOAD", block: b });
      }
      this.verified[b] = 1;
    }
  }

  newCounts(frames: number): Counts {
    const n = frames * this.framePixels;
    const w = this.header.storedItemsize;
    return w === 1 ? new Uint8Array(n) : w === 2 ? new Uint16Array(n) : new Uint32Array(n);
  }

  /** Decode frame blocks (every band of each) into (frames, det_r * det_c) counts. */
  decodeFrameBlocks(frameBlocks: number[]): Counts {
    const ids = this.entries(frameBlocks);
    if (this.verify) this.verifyChecksums(ids.filter((b) => !this.verified[b]));
    let total = 0;
    const rows = frameBlocks.map((b) => {
      const row = total;
      total += this.blockIndex[b * this.nBands]!.nFrames;
      return row;
    });
    const out = this.newCounts(total);
    const w = this.header.storedItemsize;
    const P = this.framePixels;
    const detC = this.detectorShape[1];
    ids.forEach((id, k) => {
      const entry = this.blockIndex[id]!;
      const row0 = rows[Math.floor(k / this.nBands)]!;
      const band = this.version2 ? entry.band : 0;
      const pixel0 = this.version2 ? this.bandFirstRow[band]! * detC : 0;
      const unit = this.version2 ? this.bandRows[band]! * detC : P;
      let status = OK;
      if (entry.mode === fmt.MODE_RANS) {
        status = this.version2
          ? decodeRansBlock2(this.bytes, entry.offset, entry.nFrames, entry.nWords, entry.nEscapes, w, unit,
              this.bandQuad0[band]!, this.model, out, row0, pixel0, P)
          : decodeRansBlock1(this.bytes, entry.offset, entry.nFrames, entry.nWords, entry.nNonzero, entry.nEscapes,
              w, P, this.model, out, row0);
      } else if (entry.mode === fmt.MODE_RAW) {
        readRaw(this.bytes, entry.offset, entry.nFrames, unit, w, out, row0, pixel0, P);
      } else {
        for (let t = 0; t < entry.nFrames; t++) out.fill(0, (row0 + t) * P + pixel0, (row0 + t) * P + pixel0 + unit);
      }
      if (status !== OK) {
        throw new QemFormatError(this.path, `block decode failed: ${STATUS_MESSAGES[status]}`, {
          section: "PAYLOAD",
          block: id,
        });
      }
    });
    return out;
  }

  /** Every frame, (n_frames, det_r * det_c). */
  readAll(): Counts {
    return this.decodeFrameBlocks(Array.from({ length: this.nFrameBlocks }, (_, k) => k));
  }

  /** Scan region [r0, r1) x [c0, c1): decodes only the frame blocks it touches. */
  readRegion(r0: number, r1: number, c0: number, c1: number): Counts {
    const [scanR, scanC] = this.scanShape;
    if (!(0 <= r0 && r0 < r1 && r1 <= scanR && 0 <= c0 && c0 < c1 && c1 <= scanC)) {
      throw new RangeError(`scan region [${r0}, ${r1})x[${c0}, ${c1}) outside ${scanR}x${scanC}`);
    }
    const frames: number[] = [];
    for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) frames.push(r * scanC + c);
    const bf = this.header.blockFrames;
    const blocks = [...new Set(frames.map((f) => Math.floor(f / bf)))].sort((a, b) => a - b);
    const decoded = this.decodeFrameBlocks(blocks);
    const rowOf = new Map(blocks.map((b, k) => [b, k * bf]));
    const P = this.framePixels;
    const out = this.newCounts(frames.length);
    frames.forEach((f, k) => {
      const local = rowOf.get(Math.floor(f / bf))! + (f % bf);
      out.set(decoded.subarray(local * P, (local + 1) * P), k * P);
    });
    return out;
  }
}
