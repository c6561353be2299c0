// The explorer page in headless Chromium: load a fixture through the file picker, set a
// detector, and compare the virtual image (its exact sums and its canvas pixels) with the
// Python package's product; on WebGPU, and on the CPU fallback of a browser without WebGPU.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { chromium, type Browser, type Page } from "playwright-core";
import { BUILD, browserSkipReason, CHROMIUM_ARGS, chromiumPath } from "./browser.js";
import { FIXTURES, fixtureJson, type DetectorProducts, type FileProducts } from "./fixtures.js";

const products = fixtureJson<Record<string, FileProducts>>("products.json");
const skip = browserSkipReason();
const browsers: Browser[] = [];

async function explorer(args: string[]): Promise<Page> {
  const browser = await chromium.launch({ executablePath: chromiumPath()!, args });
  browsers.push(browser);
  const page = await browser.newPage();
  await page.goto("file://" + join(BUILD, "explorer.html"));
  return page;
}

async function settled(page: Page, spec?: DetectorProducts): Promise<any> {
  // with a spec: wait for the image of that detector, not of an earlier one still in flight
  await page.waitForFunction((want) => {
    const s = (globalThis as any).explorer;
    if (!s || s.busy || !(s.maskedSum.length > 0 || s.error)) return false;
    if (!want || s.error) return true;
    const d = s.detector;
    return d && d.kind === want.kind && d.center[0] === want.center[0] && d.center[1] === want.center[1];
  }, spec ?? null);
  return page.evaluate(() => {
    const s = (globalThis as any).explorer;
    return { path: s.path, maskedSum: s.maskedSum, error: s.error, detector: s.detector };
  });
}

async function setDetector(page: Page, spec: DetectorProducts): Promise<void> {
  await page.evaluate(() => ((globalThis as any).explorer.maskedSum = []));
  await page.check(`input[name=kind][value=${spec.kind}]`);
  await page.fill("#row", String(spec.center[0]));
  await page.fill("#col", String(spec.center[1]));
  await page.fill("#inner", String(spec.inner ?? 0));
  await page.fill("#outer", String(spec.kind === "disk" ? spec.radius : spec.outer));
  await page.dispatchEvent("#outer", "change");
}

/** The gray level of each scan position as the page draws it, from Python's sums. */
function expectedGray(sums: string[]): number[] {
  const values = sums.map(Number);
  const low = Math.min(...values);
  const high = Math.max(...values);
  return values.map((v) => (high > low ? Math.round((255 * (v - low)) / (high - low)) : 0));
}

async function canvasGray(page: Page, scanR: number, scanC: number): Promise<number[]> {
  return page.evaluate(
    ([rows, cols]) => {
      const canvas = document.getElementById("image") as HTMLCanvasElement;
      const scale = canvas.width / cols;
      const data = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height).data;
      const out: number[] = [];
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < cols; c++) out.push(data[4 * ((r * scale + scale / 2) * canvas.width + c * scale + scale / 2)]!);
      }
      return out;
    },
    [scanR, scanC] as const,
  );
}

describe("explorer page", { skip: skip ?? false }, () => {
  after(async () => {
    for (const browser of browsers) await browser.close();
  });

  for (const [label, args, path] of [
    ["WebGPU", CHROMIUM_ARGS, "webgpu"],
    ["CPU fallback (no WebGPU in this browser)", ["--no-sandbox"], "cpu"],
  ] as const) {
    test(`${label}: virtual images equal Python's, in numbers and in pixels`, async (t) => {
      const page = await explorer([...args]);
      const name = "small-v2.qem";
      const held = products[name]!;
      await page.setInputFiles("#file", join(FIXTURES, name));
      const first = await settled(page);
      assert.equal(first.error, "");
      if (path === "webgpu" && first.path !== "webgpu") {
        if (process.env.HARNESS_REQUIRE_WEBGPU === "1") assert.fail("no WebGPU adapter and HARNESS_REQUIRE_WEBGPU=1");
        return t.skip("this Chromium exposes no WebGPU adapter");
      }
      assert.equal(first.path, path);
      for (const spec of Object.values(held.detectors)) {
        await setDetector(page, spec);
        const state = await settled(page, spec);
        assert.equal(state.error, "");
        assert.equal(state.detector.kind, spec.kind);
        assert.deepEqual(state.maskedSum, spec.masked_sum);
        assert.deepEqual(await canvasGray(page, ...held.scan_shape), expectedGray(spec.masked_sum));
      }
    });
  }

  test("drag and drop: a file dropped on the page opens as the picker's does", async () => {
    const page = await explorer([...CHROMIUM_ARGS]);
    const name = "mixed-v2.qem";
    const held = products[name]!;
    const data = readFileSync(join(FIXTURES, name)).toString("base64");
    await page.evaluate(
      ([text, file]) => {
        const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], file));
        const event = new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true });
        document.getElementById("drop")!.dispatchEvent(event);
      },
      [data, name] as const,
    );
    const first = await settled(page);
    assert.equal(first.error, "");
    const spec = held.detectors["disk"]!;
    await setDetector(page, spec);
    const state = await settled(page, spec);
    assert.deepEqual(state.maskedSum, spec.masked_sum);
    assert.deepEqual(await canvasGray(page, ...held.scan_shape), expectedGray(spec.masked_sum));
  });
});

test("the dashboard's copy of the explorer is this build (npm run dashboard refreshes it)", async () => {
  for (const name of ["explorer.html", "explorer.js"]) {
    const built = readFileSync(join(BUILD, name), "utf8");
    const copy = readFileSync(join(BUILD, "..", "..", "reports_templates", "dashboard", name), "utf8");
    assert.ok(built === copy, `reports_templates/dashboard/${name} is stale: run npm run dashboard in web/`);
  }
});
