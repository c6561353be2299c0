// The explorer page (web/explorer/explorer.html): open a local .qem, show its mean pattern,
// draw a BF disk or an annulus, see the virtual image. The file is read in the page only.
// `window.explorer` exposes the state the Chromium test reads (path used, exact sums).
import { QemFile } from "./qem/reader.js";
import type { Counts } from "./qem/rans.js";
import { detectorMask, maskedSum, meanPattern, patternSum, withValidity, type DetectorSpec } from "./products.js";
import { initXxh3 } from "./xxh3.js";
import { GpuQem, requestDevice } from "./gpu/engine.js";

interface State {
  qem: QemFile | null;
  gpu: GpuQem | null;
  frames: Counts | null;
  path: "webgpu" | "cpu" | "";
  gpuReason: string;
  maskedSum: string[];
  detector: DetectorSpec | null;
  busy: boolean;
  error: string;
}

const state: State = {
  qem: null,
  gpu: null,
  frames: null,
  path: "",
  gpuReason: "",
  maskedSum: [],
  detector: null,
  busy: false,
  error: "",
};
(globalThis as unknown as { explorer: State }).explorer = state;

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const SCALE = 8;

function setStatus(text: string): void {
  $("status").textContent = text;
}

function detectorFromInputs(): DetectorSpec {
  const kind = (document.querySelector('input[name="kind"]:checked') as HTMLInputElement).value as "disk" | "annulus";
  const center: [number, number] = [Number($<HTMLInputElement>("row").value), Number($<HTMLInputElement>("col").value)];
  const outer = Number($<HTMLInputElement>("outer").value);
  return kind === "disk" ? { kind, center, radius: outer } : { kind, center, inner: Number($<HTMLInputElement>("inner").value), outer };
}

function drawGray(canvas: HTMLCanvasElement, width: number, height: number, values: ArrayLike<number>, scale: number): void {
  canvas.width = width * scale;
  canvas.height = height * scale;
  const context = canvas.getContext("2d")!;
  let low = Infinity;
  let high = -Infinity;
  for (let k = 0; k < values.length; k++) {
    low = Math.min(low, values[k]!);
    high = Math.max(high, values[k]!);
  }
  const image = context.createImageData(width, height);
  for (let k = 0; k < values.length; k++) {
    const gray = high > low ? Math.round((255 * (values[k]! - low)) / (high - low)) : 0;
    image.data.set([gray, gray, gray, 255], 4 * k);
  }
  // one image pixel per data pixel, then scaled up without smoothing
  const small = document.createElement("canvas");
  small.width = width;
  small.height = height;
  small.getContext("2d")!.putImageData(image, 0, 0);
  context.imageSmoothingEnabled = false;
  context.drawImage(small, 0, 0, width * scale, height * scale);
}

let patternValues: Float64Array = new Float64Array(0);

function drawPattern(): void {
  const qem = state.qem!;
  const [detR, detC] = qem.detectorShape;
  const canvas = $<HTMLCanvasElement>("pattern");
  drawGray(canvas, detC, detR, patternValues.map((v) => Math.log1p(v)), SCALE);
  const d = state.detector;
  if (!d) return;
  const context = canvas.getContext("2d")!;
  context.strokeStyle = "#e33";
  context.lineWidth = 2;
  // pixel (r, c) has its centre at ((c + 0.5), (r + 0.5)) * SCALE on the canvas
  const x = (d.center[1] + 0.5) * SCALE;
  const y = (d.center[0] + 0.5) * SCALE;
  for (const radius of d.kind === "disk" ? [d.radius!] : [d.inner!, d.outer!]) {
    context.beginPath();
    context.arc(x, y, radius * SCALE, 0, 2 * Math.PI);
    context.stroke();
  }
}

// Updates can overlap (a GPU sum is awaited): only the newest may write the state.
let generation = 0;

async function update(): Promise<void> {
  const qem = state.qem;
  if (!qem) return;
  const ticket = ++generation;
  let spec: DetectorSpec;
  try {
    spec = detectorFromInputs();
    const [detR, detC] = qem.detectorShape;
    const mask = withValidity(detectorMask(spec, detR, detC), qem.pixelMask);
    state.busy = true;
    const sums = state.gpu ? await state.gpu.maskedSum(mask) : maskedSum(state.frames!, qem.framePixels, mask);
    if (ticket !== generation) return;
    state.detector = spec;
    state.maskedSum = sums.map(String);
    state.error = "";
    const [scanR, scanC] = qem.scanShape;
    const scale = Math.max(1, Math.floor(384 / Math.max(scanR, scanC)));
    drawGray($<HTMLCanvasElement>("image"), scanC, scanR, sums.map(Number), scale);
    drawPattern();
    setStatus(`${qem.path}: ${scanR}x${scanC} frames of ${detR}x${detC} ${qem.dtype} · ${state.path}` +
      (state.gpuReason ? ` (${state.gpuReason})` : "") + ` · ${mask.reduce((n, m) => n + m, 0)} pixels in the detector`);
  } catch (error) {
    if (ticket !== generation) return;
    state.error = (error as Error).message;
    setStatus(state.error);
  } finally {
    if (ticket === generation) state.busy = false;
  }
}

async function open(file: File): Promise<void> {
  state.busy = true;
  setStatus(`reading ${file.name}…`);
  try {
    await initXxh3();
    const qem = new QemFile(new Uint8Array(await file.arrayBuffer()), file.name);
    state.gpu?.destroy();
    state.gpu = null;
    state.frames = null;
    const { device, reason } = await requestDevice();
    let sum: bigint[];
    if (device) {
      state.gpu = new GpuQem(device, qem);
      await state.gpu.decode();
      sum = await state.gpu.patternSum();
      state.path = "webgpu";
      state.gpuReason = "";
    } else {
      state.frames = qem.readAll();
      sum = patternSum(state.frames, qem.framePixels);
      state.path = "cpu";
      state.gpuReason = reason;
    }
    state.qem = qem;
    patternValues = meanPattern(sum.map((s, p) => (qem.pixelMask[p] ? 0n : s)), qem.nFrames);
    const [detR, detC] = qem.detectorShape;
    if (!$<HTMLInputElement>("outer").value) {
      $<HTMLInputElement>("row").value = String((detR - 1) / 2);
      $<HTMLInputElement>("col").value = String((detC - 1) / 2);
      $<HTMLInputElement>("outer").value = String(Math.min(detR, detC) / 4);
    }
    await update();
  } catch (error) {
    state.error = (error as Error).message;
    state.busy = false;
    setStatus(state.error);
  }
}

function wire(): void {
  $<HTMLInputElement>("file").addEventListener("change", (event) => {
    const file = (event.target as HTMLInputElement).files?.[0];
    if (file) void open(file);
  });
  const drop = $("drop");
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const file = event.dataTransfer?.files[0];
    if (file) void open(file);
  });
  for (const id of ["row", "col", "outer", "inner"]) $(id).addEventListener("change", () => void update());
  document.querySelectorAll('input[name="kind"]').forEach((input) => input.addEventListener("change", () => void update()));
  // draw: press at the centre, drag to the (outer) radius
  const canvas = $<HTMLCanvasElement>("pattern");
  let anchor: [number, number] | null = null;
  const position = (event: MouseEvent): [number, number] => {
    const box = canvas.getBoundingClientRect();
    return [(event.clientY - box.top) / SCALE - 0.5, (event.clientX - box.left) / SCALE - 0.5];
  };
  canvas.addEventListener("mousedown", (event) => {
    anchor = position(event);
    $<HTMLInputElement>("row").value = anchor[0].toFixed(2);
    $<HTMLInputElement>("col").value = anchor[1].toFixed(2);
  });
  canvas.addEventListener("mouseup", (event) => {
    if (!anchor) return;
    const [r, c] = position(event);
    const radius = Math.hypot(r - anchor[0], c - anchor[1]);
    if (radius > 0.25) $<HTMLInputElement>("outer").value = radius.toFixed(2);
    anchor = null;
    void update();
  });
}

if (typeof document !== "undefined") wire();
