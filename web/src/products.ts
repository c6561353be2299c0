// Exact detector products on the CPU, defined as quantem.stem4d's CPU kernels define them
// (quantem/stem4d/detector/cpu_kernels.py, masks.py, session.py): integer sums in 64 bits
// (bigint), the centre of mass from exact integer moments.
import { DetectorError } from "./errors.js";
import type { Counts } from "./qem/rans.js";

/** Squared distance (float64) of every pixel centre from (row, col), as masks.distance_squared. */
function distanceSquared(detR: number, detC: number, row: number, col: number): Float64Array {
  const out = new Float64Array(detR * detC);
  for (let r = 0; r < detR; r++) {
    const dr = (r - row) ** 2;
    for (let c = 0; c < detC; c++) out[r * detC + c] = dr + (c - col) ** 2;
  }
  return out;
}

/** Pixels whose centre lies within `radius` of (row, col), inclusive (masks.disk_mask). */
export function diskMask(detR: number, detC: number, row: number, col: number, radius: number): Uint8Array {
  if (!(radius > 0) || !Number.isFinite(radius)) throw new DetectorError(`radius must be positive, got ${radius}`);
  const d2 = distanceSquared(detR, detC, row, col);
  const out = new Uint8Array(d2.length);
  for (let p = 0; p < d2.length; p++) out[p] = d2[p]! <= radius * radius ? 1 : 0;
  return out;
}

export interface DetectorSpec {
  kind: "disk" | "annulus";
  center: [number, number];
  radius?: number;
  inner?: number;
  outer?: number;
}

/** The 0/1 mask of a BF disk or an annulus. */
export function detectorMask(spec: DetectorSpec, detR: number, detC: number): Uint8Array {
  const [row, col] = spec.center;
  return spec.kind === "disk"
    ? diskMask(detR, detC, row, col, spec.radius!)
    : annulusMask(detR, detC, row, col, spec.inner!, spec.outer!);
}

/** Pixels with inner < distance <= outer (masks.annulus_mask). */
export function annulusMask(
  detR: number,
  detC: number,
  row: number,
  col: number,
  inner: number,
  outer: number,
): Uint8Array {
  if (!(inner >= 0) || !(outer > 0)) throw new DetectorError(`invalid radii ${inner}, ${outer}`);
  if (outer <= inner) throw new DetectorError(`outer radius ${outer} must exceed inner radius ${inner}`);
  const d2 = distanceSquared(detR, detC, row, col);
  const out = new Uint8Array(d2.length);
  for (let p = 0; p < d2.length; p++) out[p] = d2[p]! > inner * inner && d2[p]! <= outer * outer ? 1 : 0;
  return out;
}

/** Masked-pixel indices of a 0/1 mask. */
function maskedPixels(mask: Uint8Array): Int32Array {
  const list: number[] = [];
  mask.forEach((m, p) => {
    if (m) list.push(p);
  });
  return Int32Array.from(list);
}

/** Sum of each frame over the masked pixels, exact (bigint per frame). */
export function maskedSum(frames: Counts, framePixels: number, mask: Uint8Array): bigint[] {
  const pixels = maskedPixels(mask);
  const n = frames.length / framePixels;
  const out: bigint[] = [];
  for (let t = 0; t < n; t++) {
    // a frame's masked sum of uint32 counts stays below 2^53 while pixels < 2^21
    let sum = 0;
    let big = 0n;
    const base = t * framePixels;
    for (let k = 0; k < pixels.length; k++) {
      sum += frames[base + pixels[k]!]!;
      if (sum > Number.MAX_SAFE_INTEGER - 0xffffffff) {
        big += BigInt(sum);
        sum = 0;
      }
    }
    out.push(big + BigInt(sum));
  }
  return out;
}

/** Sum over all frames per detector pixel, exact (cpu_kernels.sum_frames). */
export function patternSum(frames: Counts, framePixels: number): bigint[] {
  const n = frames.length / framePixels;
  const partial = new Float64Array(framePixels);
  const big: bigint[] = new Array(framePixels).fill(0n);
  for (let t = 0; t < n; t++) {
    const base = t * framePixels;
    for (let p = 0; p < framePixels; p++) partial[p] = partial[p]! + frames[base + p]!;
    if ((t + 1) % 1_000_000 === 0) {
      for (let p = 0; p < framePixels; p++) {
        big[p] = big[p]! + BigInt(partial[p]!);
        partial[p] = 0;
      }
    }
  }
  return big.map((b, p) => b + BigInt(partial[p]!));
}

/** The mean pattern: the exact sum over frames divided by the frame count. */
export function meanPattern(sum: bigint[], nFrames: number): Float64Array {
  // as session.mean_dp: the sum converted to float64, then divided
  return Float64Array.from(sum, (s) => Number(s) / nFrames);
}

export interface Moments {
  total: bigint[];
  sumR: bigint[];
  sumC: bigint[];
}

/** Zeroth and first moments per frame over the masked pixels (cpu_kernels.moments). */
export function moments(frames: Counts, detR: number, detC: number, mask: Uint8Array): Moments {
  const P = detR * detC;
  const pixels = maskedPixels(mask);
  const n = frames.length / P;
  const out: Moments = { total: [], sumR: [], sumC: [] };
  for (let t = 0; t < n; t++) {
    let total = 0n;
    let sumR = 0n;
    let sumC = 0n;
    // per-row partial sums stay exact in doubles (det_c * 2^32 < 2^53)
    let row = -1;
    let rowTotal = 0;
    let rowCol = 0;
    const flush = () => {
      if (row >= 0) {
        total += BigInt(rowTotal);
        sumR += BigInt(row) * BigInt(rowTotal);
        sumC += BigInt(rowCol);
      }
    };
    const base = t * P;
    for (let k = 0; k < pixels.length; k++) {
      const p = pixels[k]!;
      const r = Math.floor(p / detC);
      if (r !== row) {
        flush();
        row = r;
        rowTotal = 0;
        rowCol = 0;
      }
      const v = frames[base + p]!;
      rowTotal += v;
      rowCol += v * (p - r * detC);
      if (rowCol > Number.MAX_SAFE_INTEGER / 2) {
        sumC += BigInt(rowCol);
        rowCol = 0;
      }
    }
    flush();
    out.total.push(total);
    out.sumR.push(sumR);
    out.sumC.push(sumC);
  }
  return out;
}

/** numerator / total as the float64 nearest the exact quotient (session.exact_ratio); NaN where total is 0. */
export function exactRatio(numerator: bigint, total: bigint): number {
  if (total === 0n) return Number.NaN;
  if (numerator < EXACT_FLOAT_LIMIT && total < EXACT_FLOAT_LIMIT) {
    return Number(numerator) / Number(total); // exact operands: IEEE division rounds once
  }
  // a quotient of at least 55 bits plus a sticky bit: Number() then rounds it correctly
  const shift = BigInt(Math.max(0, 55 - (numerator.toString(2).length - total.toString(2).length)));
  const scaled = numerator << shift;
  const quotient = scaled / total;
  const sticky = scaled % total === 0n ? 0n : 1n;
  return Number((quotient << 1n) | sticky) / 2 ** (Number(shift) + 1);
}

const EXACT_FLOAT_LIMIT = 1n << 53n;

/** Centre of mass (row, col) per frame from exact moments. */
export function centerOfMass(m: Moments): { row: Float64Array; col: Float64Array } {
  return {
    row: Float64Array.from(m.sumR, (s, k) => exactRatio(s, m.total[k]!)),
    col: Float64Array.from(m.sumC, (s, k) => exactRatio(s, m.total[k]!)),
  };
}

/** A detector mask intersected with the file's good pixels (pixel mask == 0). */
export function withValidity(mask: Uint8Array, pixelMask: Uint32Array): Uint8Array {
  return mask.map((m, p) => (m && pixelMask[p] === 0 ? 1 : 0));
}
