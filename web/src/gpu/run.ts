// In-page drivers of the WebGPU path, called by the Chromium contract tests and by the
// harness's webgpu backend: open bytes, decode on the device, compute the products.
import { QemFormatError } from "../errors.js";
import { QemFile } from "../qem/reader.js";
import { centerOfMass, detectorMask, withValidity, type DetectorSpec } from "../products.js";
import { initXxh3, xxh3 } from "../xxh3.js";
import { GpuQem, requestDevice } from "./engine.js";

export function base64Bytes(text: string): Uint8Array {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let k = 0; k < binary.length; k++) out[k] = binary.charCodeAt(k);
  return out;
}

function storedBytes(counts: Uint32Array, itemsize: number): Uint8Array {
  const typed = itemsize === 1 ? Uint8Array.from(counts) : itemsize === 2 ? Uint16Array.from(counts) : counts;
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

let shared: Promise<{ device: GPUDevice | null; reason: string; adapter: string }> | null = null;

/** One device per page, kept: pipelines compile once (slow on a software adapter). */
export function pageDevice(): Promise<{ device: GPUDevice | null; reason: string; adapter: string }> {
  shared ??= requestDevice();
  return shared;
}

const floats = (values: Float64Array) => Array.from(values, (v) => (Number.isNaN(v) ? null : v));

/** Every product of one file on the WebGPU path, as JSON-ready values (u64 as strings). */
export async function gpuProducts(
  fileBase64: string,
  name: string,
  detectors: Record<string, DetectorSpec>,
): Promise<Record<string, unknown>> {
  await initXxh3();
  const { device, reason, adapter } = await pageDevice();
  if (!device) return { skipped: reason };
  const qem = new QemFile(base64Bytes(fileBase64), name);
  const gpu = new GpuQem(device, qem);
  await gpu.decode();
  const [detR, detC] = qem.detectorShape;
  const counts = await gpu.counts();
  const pattern = (await gpu.patternSum()).map((s, p) => (qem.pixelMask[p] ? 0n : s));
  const all = withValidity(new Uint8Array(qem.framePixels).fill(1), qem.pixelMask);
  const comAll = centerOfMass(await gpu.moments(all));
  const out: Record<string, unknown> = {
    adapter,
    counts_xxh3: xxh3(storedBytes(counts, qem.header.storedItemsize)).toString(16).padStart(16, "0"),
    pattern_sum: pattern.map(String),
    mean_dp: pattern.map((s) => Number(s) / qem.nFrames),
    com_all: { row: floats(comAll.row), col: floats(comAll.col) },
    detectors: {},
  };
  for (const [key, spec] of Object.entries(detectors)) {
    const mask = withValidity(detectorMask(spec, detR, detC), qem.pixelMask);
    const com = centerOfMass(await gpu.moments(mask));
    (out.detectors as Record<string, unknown>)[key] = {
      masked_sum: (await gpu.maskedSum(mask)).map(String),
      com: { row: floats(com.row), col: floats(com.col) },
    };
  }
  gpu.destroy();
  return out;
}

/** Open and decode damaged bytes on the WebGPU path: the error's class and message, or null. */
export async function gpuError(fileBase64: string, name: string): Promise<{ class: string; message: string } | null | string> {
  await initXxh3();
  const { device, reason } = await pageDevice();
  if (!device) return reason;
  try {
    const gpu = new GpuQem(device, new QemFile(base64Bytes(fileBase64), name));
    await gpu.decode();
    gpu.destroy();
    return null;
  } catch (error) {
    if (!(error instanceof QemFormatError)) throw error;
    return { class: error.constructor.name, message: error.message };
  }
}

/**
 * One timed load for the harness's webgpu backend. The clock (performance.now) starts after
 * the file's bytes are in page memory: it covers validation, block checksums, upload and
 * decode on the device (status read back), then each product. Sample frames are read back
 * after the clock stops, for the harness's hash check.
 */
export async function timedLoad(
  fileBase64: string,
  name: string,
  sampleFrames: number[],
  detector: DetectorSpec,
): Promise<Record<string, unknown>> {
  await initXxh3();
  const { device, reason, adapter } = await pageDevice();
  if (!device) return { skipped: reason };
  const bytes = base64Bytes(fileBase64);
  const t0 = performance.now();
  const qem = new QemFile(bytes, name);
  const t1 = performance.now();
  const gpu = new GpuQem(device, qem);
  await gpu.decode();
  const t2 = performance.now();
  const [detR, detC] = qem.detectorShape;
  const mask = withValidity(detectorMask(detector, detR, detC), qem.pixelMask);
  const sums = await gpu.maskedSum(mask);
  const t3 = performance.now();
  const com = centerOfMass(await gpu.moments(mask));
  const t4 = performance.now();
  const pattern = await gpu.patternSum();
  const t5 = performance.now();
  const counts = await gpu.counts();
  const P = qem.framePixels;
  const out = {
    adapter,
    shape: [...qem.scanShape, detR, detC],
    load_seconds: (t2 - t0) / 1000,
    stages: {
      webgpu_open_validate: (t1 - t0) / 1000,
      webgpu_checksum_upload_decode: (t2 - t1) / 1000,
      webgpu_masked_sum: (t3 - t2) / 1000,
      webgpu_center_of_mass: (t4 - t3) / 1000,
      webgpu_pattern_sum: (t5 - t4) / 1000,
    },
    masked_sum: sums.map(String),
    com_row: floats(com.row),
    pattern_sum: pattern.map(String),
    sample_frames: sampleFrames.map((f) => Array.from(counts.subarray(f * P, (f + 1) * P))),
  };
  gpu.destroy();
  return out;
}
