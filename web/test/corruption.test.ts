// Corrupt .qem input is refused with the Python reader's error class and message
// (cases and messages made by tools/make_fixtures.py, after tests/test_qem_corruption.py).
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { QemFormatError } from "../src/errors.js";
import { QemFile } from "../src/qem/reader.js";
import { initXxh3 } from "../src/xxh3.js";
import { fixtureBytes, fixtureJson } from "./fixtures.js";

export interface Case {
  name: string;
  base?: string;
  edits: [number, string][];
  size: number;
  tail: string;
  compare: "exact" | "prefix";
  error: { class: string; message: string } | null;
}

const {
  good: goodName,
  cases,
  decode_cases: decodeCases,
} = fixtureJson<{ good: string; cases: Case[]; decode_cases: Case[] }>("corruption.json");

function damaged(good: Uint8Array, c: Case): Uint8Array {
  const out = new Uint8Array(c.size);
  out.set(good.subarray(0, Math.min(c.size, good.length)));
  for (const [offset, value] of c.edits) out[offset] = parseInt(value, 16);
  const tail = c.tail.match(/../g) ?? [];
  tail.forEach((byte, k) => (out[good.length + k] = parseInt(byte, 16)));
  return out;
}

before(async () => {
  await initXxh3();
});

function refusals(list: Case[]): string[] {
  const failures: string[] = [];
  for (const c of list) {
    const good = fixtureBytes(c.base ?? goodName);
    let got: { class: string; message: string } | null = null;
    try {
      const qem = new QemFile(damaged(good, c), "x.qem");
      qem.verifyChecksums();
      qem.readAll();
    } catch (error) {
      if (!(error instanceof QemFormatError)) throw error;
      got = { class: error.constructor.name, message: error.message };
    }
    const expected = c.error;
    const same =
      expected === null || got === null
        ? expected === got
        : got.class === expected.class &&
          (c.compare === "exact"
            ? got.message === expected.message
            : got.message.startsWith(expected.message.slice(0, expected.message.indexOf(":", 8) + 1)));
    if (!same) failures.push(`${c.name}: python ${JSON.stringify(expected)} typescript ${JSON.stringify(got)}`);
  }
  return failures;
}

test(`${cases.length} damaged files: same error class and message as Python`, () => {
  assert.deepEqual(refusals(cases), []);
});

test(`${decodeCases.length} damaged rANS blocks (checksums recomputed): the decoder's checks match Python's`, () => {
  assert.ok(decodeCases.filter((c) => c.error).length >= 50);
  assert.deepEqual(refusals(decodeCases), []);
});
