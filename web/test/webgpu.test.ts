// The WebGPU path (WGSL kernels in headless Chromium) against the Python package's products,
// exactly; and damaged blocks refused on the device with the Python reader's messages.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { browserSkipReason, openPage } from "./browser.js";
import { fixtureBytes, fixtureJson, pyFloats, QEM_FIXTURES, type FileProducts } from "./fixtures.js";

const products = fixtureJson<Record<string, FileProducts>>("products.json");
const skip = browserSkipReason();
let browser: Browser;
let page: Page;
let adapterReason: string | null = null;

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");

describe("WebGPU in headless Chromium", { skip: skip ?? false }, () => {
  before(async () => {
    ({ browser, page } = await openPage());
    adapterReason = await page.evaluate(async () => {
      const gpu = (navigator as Navigator).gpu;
      if (!gpu) return "navigator.gpu is absent";
      return (await gpu.requestAdapter()) ? null : "requestAdapter() returned null";
    });
    if (adapterReason && process.env.HARNESS_REQUIRE_WEBGPU === "1") {
      throw new Error(`no WebGPU adapter (${adapterReason}) and HARNESS_REQUIRE_WEBGPU=1`);
    }
  });
  after(async () => {
    await browser?.close();
  });

  for (const name of QEM_FIXTURES) {
    test(`${name}: decode and every product equal Python's`, async (t) => {
      if (adapterReason) return t.skip(`no WebGPU adapter: ${adapterReason}`);
      const held = products[name]!;
      const detectors = Object.fromEntries(
        Object.entries(held.detectors).map(([k, d]) => [k, { kind: d.kind, center: d.center, radius: d.radius, inner: d.inner, outer: d.outer }]),
      );
      const got = (await page.evaluate(
        ([data, file, specs]) => (globalThis as any).quantemWeb.gpuProducts(data, file, specs),
        [b64(fixtureBytes(name)), name, detectors] as const,
      )) as any;
      assert.equal(got.counts_xxh3, held.counts_xxh3);
      assert.deepEqual(got.pattern_sum, held.pattern_sum);
      assert.deepEqual(pyFloats(got.mean_dp), pyFloats(held.mean_dp));
      assert.deepEqual(pyFloats(got.com_all.row), pyFloats(held.com_all.row));
      assert.deepEqual(pyFloats(got.com_all.col), pyFloats(held.com_all.col));
      for (const [key, spec] of Object.entries(held.detectors)) {
        assert.deepEqual(got.detectors[key].masked_sum, spec.masked_sum, key);
        assert.deepEqual(pyFloats(got.detectors[key].com.row), pyFloats(spec.com.row), key);
        assert.deepEqual(pyFloats(got.detectors[key].com.col), pyFloats(spec.com.col), key);
      }
    });
  }

  test("damaged rANS streams: the device decoder reports Python's error", async (t) => {
    if (adapterReason) return t.skip(`no WebGPU adapter: ${adapterReason}`);
    interface Case {
      name: string;
      base: string;
      edits: [number, string][];
      error: { class: string; message: string } | null;
    }
    // every third case (the CPU test runs them all): each costs a device round trip
    const decodeCases = fixtureJson<{ decode_cases: Case[] }>("corruption.json").decode_cases.filter((_, k) => k % 3 === 0);
    assert.ok(decodeCases.filter((c) => c.error).length >= 50);
    const failures: string[] = [];
    for (const c of decodeCases) {
      const bytes = Uint8Array.from(fixtureBytes(c.base));
      for (const [offset, value] of c.edits) bytes[offset] = parseInt(value, 16);
      const got = await page.evaluate(
        ([data]) => (globalThis as any).quantemWeb.gpuError(data, "x.qem"),
        [b64(bytes)] as const,
      );
      if (JSON.stringify(got) !== JSON.stringify(c.error)) failures.push(`${c.name}: ${JSON.stringify(c.error)} vs ${JSON.stringify(got)}`);
    }
    assert.deepEqual(failures, []);
  });
});
