// The TypeScript ARINA reader (jsfive + this package's bitshuffle-LZ4 decoder) against the
// same counts in the .qem file the Python package converted from the same acquisition.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { before, test } from "node:test";
import { readArina, type H5wasm } from "../src/arina/reader.js";
import { ChunkDecodeError } from "../src/errors.js";
import { QemFile } from "../src/qem/reader.js";
import { initXxh3 } from "../src/xxh3.js";
import { fixtureBytes, fixtureJson, type FileProducts } from "./fixtures.js";
import { join } from "node:path";
import { FIXTURES } from "./fixtures.js";

const held = fixtureJson<Record<string, any>>("products.json");

function arinaFiles(): Map<string, Uint8Array> {
  const names = readdirSync(join(FIXTURES, "arina"));
  return new Map(names.map((n) => [n, fixtureBytes(`arina/${n}`)]));
}

let h5wasm: H5wasm;

before(async () => {
  await initXxh3();
  const module = (await import("h5wasm/node")).default as unknown as { ready: Promise<{ FS: H5wasm["FS"] }>; File: H5wasm["File"] };
  const { FS } = await module.ready;
  h5wasm = { FS, File: module.File };
});

test("ARINA counts equal those of Python's .qem conversion of the same acquisition", () => {
  const { master, from_qem: fromQem } = held.arina as { master: string; from_qem: string };
  const acq = readArina(arinaFiles(), master.split("/").at(-1)!, { h5wasm });
  const qem = new QemFile(fixtureBytes(fromQem), fromQem);
  assert.deepEqual(acq.scanShape, qem.scanShape);
  assert.deepEqual(acq.detectorShape, qem.detectorShape);
  assert.deepEqual(Array.from(acq.pixelMask), (held[fromQem] as FileProducts).pixel_mask);
  const fromArina = Array.from(acq.frames);
  const stored = Array.from(qem.readAll());
  assert.equal(fromArina.length, stored.length);
  assert.ok(fromArina.some((v) => v > 0));
  assert.deepEqual(fromArina, stored);
});

test("a damaged chunk is a ChunkDecodeError naming the shard", () => {
  const files = arinaFiles();
  const name = [...files.keys()].find((n) => n.endsWith("_data_000001.h5"))!;
  const original = files.get(name)!;
  // damage the bytes of the frames' chunks (the end of the shard holds chunk data)
  let refused = 0;
  for (const back of [200, 600, 1200, 2000]) {
    const bytes = Uint8Array.from(original);
    bytes[bytes.length - back] = bytes[bytes.length - back]! ^ 0xff;
    files.set(name, bytes);
    try {
      readArina(files, held.arina.master.split("/").at(-1), { h5wasm });
    } catch (error) {
      if (error instanceof ChunkDecodeError) {
        assert.match(error.message, new RegExp(`^${name}: corrupt bitshuffle-LZ4 chunk`));
        refused++;
      } else throw error;
    }
  }
  assert.ok(refused >= 1, "no damaged chunk was refused");
});
