// Fixture loading for the node:test contract tests (web/fixtures, made by tools/make_fixtures.py).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "fixtures");

export function fixtureBytes(name: string): Uint8Array {
  return new Uint8Array(readFileSync(join(FIXTURES, name)));
}

export function fixtureJson<T>(name: string): T {
  return JSON.parse(readFileSync(join(FIXTURES, name), "utf8")) as T;
}

export interface DetectorProducts {
  kind: "disk" | "annulus";
  center: [number, number];
  radius?: number;
  inner?: number;
  outer?: number;
  mask_pixels: number;
  masked_sum: string[];
  com: { row: (number | null)[]; col: (number | null)[] };
}

export interface FileProducts {
  file: string;
  scan_shape: [number, number];
  detector_shape: [number, number];
  dtype: string;
  counts_xxh3: string;
  region: [number, number, number, number];
  region_xxh3: string;
  pixel_mask: number[];
  pattern_sum: string[];
  mean_dp: (number | null)[];
  com_all: { row: (number | null)[]; col: (number | null)[] };
  detectors: Record<string, DetectorProducts>;
}

export const QEM_FIXTURES = ["mixed-v1.qem", "mixed-v2.qem", "small-v1.qem", "small-v2.qem", "vector-v1.qem"];

/** Python's float list (NaN stored as null) as numbers. */
export function pyFloats(values: (number | null)[]): number[] {
  return values.map((v) => (v === null ? Number.NaN : v));
}
