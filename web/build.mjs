// Bundle the tests (for node:test) and the browser bundle (for the explorer and the
// Chromium contract tests) with esbuild. WGSL sources are imported as text.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";

mkdirSync("build", { recursive: true });
const tests = readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => `test/${f}`);
const common = { bundle: true, loader: { ".wgsl": "text" }, logLevel: "warning", sourcemap: "inline" };
await build({ ...common, entryPoints: tests, outdir: "build/test", platform: "node", format: "esm",
  outExtension: { ".js": ".mjs" }, packages: "external" });
await build({ ...common, entryPoints: ["src/explorer.ts"], outfile: "build/explorer.js", platform: "browser",
  format: "iife", sourcemap: false });
copyFileSync("explorer/explorer.html", "build/explorer.html");
await build({ ...common, entryPoints: ["src/browser.ts"], outfile: "build/quantem-web.js", platform: "browser",
  format: "iife", globalName: "quantemWeb", sourcemap: false });
