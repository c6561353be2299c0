// XXH3-64 (seed 0) as a bigint, through hash-wasm's WebAssembly build. The hasher is made
// once (asynchronously) and then used synchronously by the readers.
import { createXXHash3, type IHasher } from "hash-wasm";

let hasher: IHasher | null = null;

/** Make the hasher; call (and await) once before any reader runs. */
export async function initXxh3(): Promise<void> {
  if (hasher === null) hasher = await createXXHash3(0, 0);
}

/** XXH3-64 of `data` with seed 0 (docs/qem-format.md §1). */
export function xxh3(data: Uint8Array): bigint {
  if (hasher === null) throw new Error("initXxh3() must be awaited before xxh3()");
  hasher.init();
  hasher.update(data);
  return BigInt("0x" + hasher.digest("hex"));
}

/** XXH3-64 of the empty input (§1), the checksum of a ZERO block (§9). */
export const XXH3_EMPTY = 0x2d06800538d394c2n;
