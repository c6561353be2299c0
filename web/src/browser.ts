// The browser bundle's entry point (build/quantem-web.js, global `quantemWeb`).
export * from "./errors.js";
export { initXxh3, xxh3 } from "./xxh3.js";
export { QemFile } from "./qem/reader.js";
export * from "./products.js";
export { GpuQem, requestDevice } from "./gpu/engine.js";
export { base64Bytes, gpuError, gpuProducts, timedLoad } from "./gpu/run.js";
