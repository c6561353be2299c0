// The WebGPU path: a .qem file's blocks resident on the device, decoded there, and exact
// products computed there. Block checksums are verified on the CPU (XXH3 in WebAssembly)
// before upload; every other check runs in the decode kernel with the CPU's status codes.
import { QemFormatError } from "../errors.js";
import * as fmt from "../qem/format.js";
import { STATUS_MESSAGES } from "../qem/rans.js";
import type { QemFile } from "../qem/reader.js";
import type { Moments } from "../products.js";
import decodeSource from "./decode.wgsl";
import productsSource from "./products.wgsl";

/** A WebGPU device, or null (with the reason) where the browser exposes no adapter. */
export async function requestDevice(): Promise<{ device: GPUDevice | null; reason: string; adapter: string }> {
  const gpu = (globalThis.navigator as Navigator | undefined)?.gpu;
  if (!gpu) return { device: null, reason: "navigator.gpu is absent (WebGPU not enabled)", adapter: "" };
  const adapter = await gpu.requestAdapter();
  if (!adapter) return { device: null, reason: "navigator.gpu.requestAdapter() returned null", adapter: "" };
  const info = adapter.info;
  const device = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
    },
  });
  return { device, reason: "", adapter: `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.trim() };
}

function packDecodeTable(model: fmt.Model): Uint32Array {
  const table = new Uint32Array(model.nContexts * fmt.PROB_SCALE);
  for (let c = 0; c < model.nContexts; c++) {
    for (let slot = 0; slot < fmt.PROB_SCALE; slot++) {
      const s = model.slotSymbol[c * fmt.PROB_SCALE + slot]!;
      const f = model.freq[c * 256 + s]!;
      const bias = slot - model.cum[c * 257 + s]!;
      table[c * fmt.PROB_SCALE + slot] = (s | ((f - 1) << 8) | (bias << 20)) >>> 0;
    }
  }
  return table;
}

const U64 = (low: number, high: number) => (BigInt(high) << 32n) | BigInt(low);

/** The compiled pipelines of one device, made once and shared by every file opened on it. */
export class Kernels {
  readonly decodePipeline: GPUComputePipeline;
  readonly products: Record<string, GPUComputePipeline>;
  readonly productsLayout: GPUBindGroupLayout;

  constructor(readonly device: GPUDevice) {
    const decodeModule = device.createShaderModule({ code: decodeSource });
    this.decodePipeline = device.createComputePipeline({
      layout: "auto",
      compute: { module: decodeModule, entryPoint: "decode_entries" },
    });
    const productsModule = device.createShaderModule({ code: productsSource });
    // one explicit layout: an entry point that leaves a binding unused ("auto" would drop it)
    const storage = (type: GPUBufferBindingType): GPUBindGroupLayoutEntry["buffer"] => ({ type });
    this.productsLayout = device.createBindGroupLayout({
      entries: [storage("uniform"), storage("read-only-storage"), storage("read-only-storage"), storage("storage")].map(
        (buffer, binding) => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer }),
      ),
    });
    const layout = device.createPipelineLayout({ bindGroupLayouts: [this.productsLayout] });
    this.products = Object.fromEntries(
      ["masked_sum", "moments", "pattern_sum"].map((name) => [
        name,
        device.createComputePipeline({ layout, compute: { module: productsModule, entryPoint: name } }),
      ]),
    );
  }
}

const kernelCache = new WeakMap<GPUDevice, Kernels>();

export function kernelsOf(device: GPUDevice): Kernels {
  let kernels = kernelCache.get(device);
  if (!kernels) {
    kernels = new Kernels(device);
    kernelCache.set(device, kernels);
  }
  return kernels;
}

export class GpuQem {
  private countsBuffer: GPUBuffer | null = null;
  private readonly kernels: Kernels;

  constructor(
    readonly device: GPUDevice,
    readonly qem: QemFile,
  ) {
    this.kernels = kernelsOf(device);
  }

  private buffer(data: ArrayBufferView, usage: number): GPUBuffer {
    const size = Math.max(16, Math.ceil(data.byteLength / 4) * 4);
    const buffer = this.device.createBuffer({ size, usage, mappedAtCreation: true });
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buffer.unmap();
    return buffer;
  }

  private storage(data: ArrayBufferView): GPUBuffer {
    return this.buffer(data, GPUBufferUsage.STORAGE);
  }

  private async read(buffer: GPUBuffer, bytes: number): Promise<Uint32Array> {
    const staging = this.device.createBuffer({ size: bytes, usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, staging, 0, bytes);
    this.device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const out = new Uint32Array(staging.getMappedRange().slice(0));
    staging.unmap();
    staging.destroy();
    return out;
  }

  /** Upload the file and decode every block on the device (counts stay resident). */
  async decode(): Promise<void> {
    const qem = this.qem;
    if (qem.verify) qem.verifyChecksums();
    const P = qem.framePixels;
    const device = this.device;
    const entries = new Uint32Array(qem.header.nBlocks * 8);
    qem.blockIndex.forEach((e, k) => {
      entries.set([e.offset, e.mode, e.nFrames, e.nWords, e.nNonzero, e.nEscapes, e.frameStart, qem.version2 ? e.band : 0], 8 * k);
    });
    const bands = new Uint32Array(qem.nBands * 4);
    const detC = qem.detectorShape[1];
    for (let b = 0; b < qem.nBands; b++) {
      bands.set([qem.bandFirstRow[b]! * detC, qem.bandRows[b]! * detC, qem.bandQuad0[b]!, 0], 4 * b);
    }
    const params = new Uint32Array([qem.header.nBlocks, P, qem.header.storedItemsize, qem.header.versionMajor]);
    const countsBytes = qem.nFrames * P * 4;
    this.countsBuffer?.destroy();
    this.countsBuffer = device.createBuffer({ size: countsBytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    const status = device.createBuffer({
      size: Math.max(16, 4 * qem.header.nBlocks),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
    });
    const inputs = [
      this.buffer(params, GPUBufferUsage.UNIFORM),
      this.storage(qem.bytes),
      this.storage(entries),
      this.storage(bands),
      this.storage(packDecodeTable(qem.model)),
      this.storage(Uint32Array.from(qem.model.groupClass)),
      this.storage(Uint32Array.from(qem.model.freq)),
    ];
    const bindGroup = device.createBindGroup({
      layout: this.kernels.decodePipeline.getBindGroupLayout(0),
      entries: [...inputs, this.countsBuffer, status].map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(this.kernels.decodePipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(Math.ceil(qem.header.nBlocks / 64));
    pass.end();
    device.queue.submit([encoder.finish()]);
    const codes = await this.read(status, 4 * qem.header.nBlocks);
    inputs.forEach((b) => b.destroy());
    status.destroy();
    // the first failing entry in file order, as the CPU reader reports it
    const failed = codes.findIndex((c) => c !== 0);
    if (failed >= 0) {
      throw new QemFormatError(qem.path, `block decode failed: ${STATUS_MESSAGES[codes[failed]!]}`, {
        section: "PAYLOAD",
        block: failed,
      });
    }
  }

  /** The decoded counts, read back (u32 per pixel), for checks. */
  async counts(): Promise<Uint32Array> {
    if (!this.countsBuffer) throw new Error("decode() first");
    return this.read(this.countsBuffer, this.qem.nFrames * this.qem.framePixels * 4);
  }

  private async runProduct(name: string, mask: Uint8Array | null, wordsPerItem: number, items: number, groups: number): Promise<Uint32Array> {
    if (!this.countsBuffer) throw new Error("decode() first");
    const masked: number[] = [];
    mask?.forEach((m, p) => {
      if (m) masked.push(p);
    });
    const qem = this.qem;
    const params = new Uint32Array([qem.nFrames, qem.framePixels, qem.detectorShape[1], masked.length]);
    const result = this.device.createBuffer({
      size: Math.max(16, 4 * wordsPerItem * items),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
    });
    const uniform = this.buffer(params, GPUBufferUsage.UNIFORM);
    const list = this.storage(Uint32Array.from(masked.length ? masked : [0]));
    const pipeline = this.kernels.products[name]!;
    const bindGroup = this.device.createBindGroup({
      layout: this.kernels.productsLayout,
      entries: [uniform, this.countsBuffer, list, result].map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
    const encoder = this.device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    // frames beyond 65535 workgroups continue in y (the kernels index group.x + 65535 * group.y)
    pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535));
    pass.end();
    this.device.queue.submit([encoder.finish()]);
    const out = await this.read(result, 4 * wordsPerItem * items);
    [result, uniform, list].forEach((b) => b.destroy());
    return out;
  }

  /** Exact masked sum of every frame (mask: 0/1 per pixel, already intersected with validity). */
  async maskedSum(mask: Uint8Array): Promise<bigint[]> {
    const n = this.qem.nFrames;
    const out = await this.runProduct("masked_sum", mask, 2, n, n);
    return Array.from({ length: n }, (_, t) => U64(out[2 * t]!, out[2 * t + 1]!));
  }

  /** Exact moments (total, sum_r, sum_c) of every frame. */
  async moments(mask: Uint8Array): Promise<Moments> {
    const n = this.qem.nFrames;
    const out = await this.runProduct("moments", mask, 6, n, n);
    const pick = (m: number) => Array.from({ length: n }, (_, t) => U64(out[6 * t + 2 * m]!, out[6 * t + 2 * m + 1]!));
    return { total: pick(0), sumR: pick(1), sumC: pick(2) };
  }

  /** Exact sum over frames per pixel. */
  async patternSum(): Promise<bigint[]> {
    const P = this.qem.framePixels;
    const out = await this.runProduct("pattern_sum", null, 2, P, Math.ceil(P / 64));
    return Array.from({ length: P }, (_, p) => U64(out[2 * p]!, out[2 * p + 1]!));
  }

  destroy(): void {
    this.countsBuffer?.destroy();
    this.countsBuffer = null;
  }
}
