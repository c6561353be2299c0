// Headless Chromium for the WebGPU contract tests: the system browser (`chromium` on PATH or
// $HARNESS_CHROMIUM) through playwright-core; no browser is downloaded. Headless Chromium
// exposes WebGPU with --enable-unsafe-webgpu, on a page with a secure origin (file://): the
// adapter is SwiftShader's software Vulkan (vendor google, architecture swiftshader).
import { execFileSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";

export const CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu"];

export function chromiumPath(): string | null {
  if (process.env.HARNESS_CHROMIUM) return process.env.HARNESS_CHROMIUM;
  try {
    return execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim() || null;
  } catch {
    return null;
  }
}

/** Why the browser tests cannot run here, or null; with HARNESS_REQUIRE_BROWSER=1 this throws. */
export function browserSkipReason(): string | null {
  if (chromiumPath()) return null;
  const reason = "no system chromium on PATH (apt-get install -y chromium)";
  if (process.env.HARNESS_REQUIRE_BROWSER === "1") throw new Error(`${reason} and HARNESS_REQUIRE_BROWSER=1`);
  return reason;
}

export const BUILD = join(dirname(fileURLToPath(import.meta.url)), "..");

/** A page of build/ with the bundle loaded (file:// is a secure context, as WebGPU needs). */
export async function openPage(): Promise<{ browser: Browser; page: Page }> {
  const browser = await chromium.launch({ executablePath: chromiumPath()!, args: CHROMIUM_ARGS });
  const html = join(BUILD, "contract.html");
  if (!existsSync(html)) {
    writeFileSync(html, '<!doctype html><meta charset="utf-8"><script src="quantem-web.js"></script>\n');
  }
  const page = await browser.newPage();
  await page.goto("file://" + html);
  return { browser, page };
}
