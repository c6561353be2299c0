// The TypeScript CPU path against the Python package's products (web/fixtures/products.json).
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { QemFile } from "../src/qem/reader.js";
import {
  centerOfMass,
  exactRatio,
  detectorMask,
  maskedSum,
  meanPattern,
  moments,
  patternSum,
  withValidity,
  type DetectorSpec,
} from "../src/products.js";
import { initXxh3, xxh3 } from "../src/xxh3.js";
import { fixtureBytes, fixtureJson, pyFloats, QEM_FIXTURES, type FileProducts } from "./fixtures.js";

const products = fixtureJson<Record<string, FileProducts>>("products.json");

function hex(value: bigint): string {
  return value.toString(16).padStart(16, "0");
}

function bytesOf(array: ArrayBufferView): Uint8Array {
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}

before(async () => {
  await initXxh3();
});

test("xxh3 of the empty input is the value of docs/qem-format.md §1", () => {
  assert.equal(xxh3(new Uint8Array(0)), 0x2d06800538d394c2n);
});

for (const name of QEM_FIXTURES) {
  describe(name, () => {
    const held = products[name]!;
    const open = () => new QemFile(fixtureBytes(name), name);

    test("decodes every count as Python does (XXH3 of the counts)", () => {
      const qem = open();
      assert.deepEqual(qem.scanShape, held.scan_shape);
      assert.deepEqual(qem.detectorShape, held.detector_shape);
      assert.equal(qem.dtype, held.dtype);
      assert.deepEqual(Array.from(qem.pixelMask), held.pixel_mask);
      assert.equal(hex(xxh3(bytesOf(qem.readAll()))), held.counts_xxh3);
    });

    test("random access to a scan region equals Python's read_region", () => {
      const [r0, r1, c0, c1] = held.region;
      assert.equal(hex(xxh3(bytesOf(open().readRegion(r0, r1, c0, c1)))), held.region_xxh3);
    });

    test("pattern sum and mean pattern", () => {
      const qem = open();
      const sum = patternSum(qem.readAll(), qem.framePixels).map((s, p) => (qem.pixelMask[p] ? 0n : s));
      assert.deepEqual(sum.map(String), held.pattern_sum);
      assert.deepEqual(Array.from(meanPattern(sum, qem.nFrames)), pyFloats(held.mean_dp));
    });

    test("centre of mass over all valid pixels", () => {
      const qem = open();
      const [detR, detC] = qem.detectorShape;
      const all = withValidity(new Uint8Array(qem.framePixels).fill(1), qem.pixelMask);
      const com = centerOfMass(moments(qem.readAll(), detR, detC, all));
      assert.deepEqual(Array.from(com.row), pyFloats(held.com_all.row));
      assert.deepEqual(Array.from(com.col), pyFloats(held.com_all.col));
    });

    for (const [detector, spec] of Object.entries(held.detectors)) {
      test(`${detector}: masked sum (exact 64-bit) and centre of mass`, () => {
        const qem = open();
        const [detR, detC] = qem.detectorShape;
        const mask = detectorMask(spec as DetectorSpec, detR, detC);
        assert.equal(mask.reduce((n, m) => n + m, 0), spec.mask_pixels);
        const effective = withValidity(mask, qem.pixelMask);
        const frames = qem.readAll();
        assert.deepEqual(maskedSum(frames, qem.framePixels, effective).map(String), spec.masked_sum);
        const com = centerOfMass(moments(frames, detR, detC, effective));
        assert.deepEqual(Array.from(com.row), pyFloats(spec.com.row));
        assert.deepEqual(Array.from(com.col), pyFloats(spec.com.col));
      });
    }
  });
}

test("exactRatio rounds the exact quotient once, as quantem's exact_ratio (operands past 2^53)", () => {
  const cases = fixtureJson<[string, string, number][]>("ratios.json");
  assert.ok(cases.length >= 40);
  for (const [n, t, expected] of cases) assert.equal(exactRatio(BigInt(n), BigInt(t)), expected, `${n} / ${t}`);
});
