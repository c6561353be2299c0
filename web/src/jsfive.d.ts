// The parts of jsfive (a pure JavaScript HDF5 reader, no type declarations) this package uses.
declare module "jsfive" {
  export class Dataset {
    readonly shape: number[];
    readonly dtype: string | unknown[];
    readonly value: unknown;
    readonly attrs: Record<string, unknown>;
  }
  export class Group {
    readonly attrs: Record<string, unknown>;
    readonly keys: string[];
    get(path: string): Group | Dataset | null;
  }
  export class File extends Group {
    constructor(buffer: ArrayBuffer, filename?: string);
  }
  export const Filters: Map<number, (buffer: ArrayBuffer, itemsize: number, clientData?: unknown) => ArrayBuffer>;
}
