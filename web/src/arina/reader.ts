// ARINA acquisitions (a master file and its data shards, docs/arina.md) read in TypeScript
// for small files. Two HDF5 readers, each where it serves: h5wasm (the HDF5 C library in
// WebAssembly) reads the master, whose /entry/data holds external links that jsfive cannot
// parse; jsfive (pure JavaScript) reads the shards, because its filter map takes this
// package's bitshuffle-LZ4 decoder (filter id 32008), which h5wasm has no plugin for.
import * as hdf5 from "jsfive";
import { ArinaFormatError, ChunkDecodeError } from "../errors.js";
import type { Counts } from "../qem/rans.js";
import { ChunkFormatError, decodeChunk } from "./bitshuffle.js";

const BSHUF_FILTER_ID = 32008;
const SHARD_DATASET = "entry/data/data";
const DATA_GROUP = "entry/data";
const PIXEL_MASK = "entry/instrument/detector/detectorSpecific/pixel_mask";

let shardFrame = { name: "", index: 0 };

(hdf5.Filters as Map<number, (buffer: ArrayBuffer, itemsize: number) => ArrayBuffer>).set(
  BSHUF_FILTER_ID,
  (buffer: ArrayBuffer, itemsize: number) => {
    const chunk = new Uint8Array(buffer);
    const view = new DataView(buffer);
    const total = chunk.length >= 8 ? Number(view.getBigUint64(0, false)) : 0;
    try {
      const out = decodeChunk(chunk, Math.floor(total / itemsize), itemsize);
      shardFrame.index++;
      return out.buffer as ArrayBuffer;
    } catch (error) {
      if (!(error instanceof ChunkFormatError)) throw error;
      throw new ChunkDecodeError(shardFrame.name, `corrupt bitshuffle-LZ4 chunk: ${error.message}`, {
        frame: shardFrame.index,
      });
    }
  },
);

export interface ArinaAcquisition {
  scanShape: [number, number];
  detectorShape: [number, number];
  dtype: string;
  pixelMask: Uint32Array;
  /** (frames, det_r * det_c) counts of the stored dtype */
  frames: Counts;
}

function asBuffer(bytes: Uint8Array): ArrayBuffer {
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
}

/** Read an acquisition from its files' bytes keyed by file name (`<name>_master.h5` and
 * `<name>_data_NNNNNN.h5`). */
interface H5Node {
  attrs: Record<string, { value: unknown } | undefined>;
  value?: unknown;
}
interface H5File {
  get(path: string): H5Node | null;
  close(): void;
}
/** The h5wasm module (`await import("h5wasm/node")` in Node, after `ready`). */
export interface H5wasm {
  FS: { writeFile(name: string, data: Uint8Array): void; unlink(name: string): void };
  File: new (name: string, mode: string) => H5File;
}

export function readArina(
  files: Map<string, Uint8Array>,
  masterName: string,
  options: { h5wasm: H5wasm },
): ArinaAcquisition {
  const masterBytes = files.get(masterName);
  if (!masterBytes) throw new ArinaFormatError(masterName, "no such master file");
  if (!masterName.endsWith("_master.h5")) throw new ArinaFormatError(masterName, "not a *_master.h5 file");
  const stem = masterName.slice(0, -"_master.h5".length);
  const h5 = options.h5wasm;
  const fsName = `quantem-${masterName}`;
  h5.FS.writeFile(fsName, masterBytes);
  let scanAttr: ArrayLike<number | bigint> | undefined;
  let maskValues: ArrayLike<number> | undefined;
  try {
    let master: H5File;
    try {
      master = new h5.File(fsName, "r");
    } catch (error) {
      throw new ArinaFormatError(masterName, `not a readable HDF5 file (${String(error)})`);
    }
    try {
      const group = master.get(DATA_GROUP);
      if (!group) throw new ArinaFormatError(masterName, `no ${DATA_GROUP} group`);
      scanAttr = group.attrs["scan_shape"]?.value as ArrayLike<number | bigint> | undefined;
      maskValues = master.get(PIXEL_MASK)?.value as ArrayLike<number> | undefined;
    } finally {
      master.close();
    }
  } finally {
    h5.FS.unlink(fsName);
  }
  const shards: Counts[] = [];
  let detectorShape: [number, number] = [0, 0];
  let dtype = "";
  for (let index = 1; ; index++) {
    const name = `${stem}_data_${String(index).padStart(6, "0")}.h5`;
    const bytes = files.get(name);
    if (!bytes) break;
    const shard = new hdf5.File(asBuffer(bytes), name);
    const dataset = shard.get(SHARD_DATASET) as hdf5.Dataset | null;
    if (!dataset) throw new ArinaFormatError(name, `no ${SHARD_DATASET} dataset`);
    const [n, detR, detC] = dataset.shape as [number, number, number];
    detectorShape = [detR, detC];
    dtype = ({ "<u1": "uint8", "<u2": "uint16", "<u4": "uint32" } as Record<string, string>)[String(dataset.dtype)] ?? "";
    if (!dtype) throw new ArinaFormatError(name, `unsupported dtype ${String(dataset.dtype)}`);
    shardFrame = { name, index: 0 };
    const values = dataset.value as number[];
    const typed = dtype === "uint8" ? Uint8Array.from(values) : dtype === "uint16" ? Uint16Array.from(values) : Uint32Array.from(values);
    if (typed.length !== n * detR * detC) throw new ArinaFormatError(name, "shard decodes to the wrong size");
    shards.push(typed);
  }
  if (!shards.length) throw new ArinaFormatError(masterName, "no data shards given");
  const total = shards.reduce((s, a) => s + a.length, 0);
  const frames = dtype === "uint8" ? new Uint8Array(total) : dtype === "uint16" ? new Uint16Array(total) : new Uint32Array(total);
  let at = 0;
  for (const shard of shards) {
    frames.set(shard, at);
    at += shard.length;
  }
  const P = detectorShape[0] * detectorShape[1];
  const nFrames = total / P;
  const scanShape: [number, number] = scanAttr
    ? [Number(scanAttr[0]), Number(scanAttr[1])]
    : [Math.round(Math.sqrt(nFrames)), Math.round(Math.sqrt(nFrames))];
  if (scanShape[0] * scanShape[1] !== nFrames) {
    throw new ArinaFormatError(masterName, `scan shape ${scanShape[0]}x${scanShape[1]} does not match ${nFrames} frames`);
  }
  const pixelMask = maskValues ? Uint32Array.from(maskValues) : new Uint32Array(P);
  return { scanShape, detectorShape, dtype, pixelMask, frames };
}
