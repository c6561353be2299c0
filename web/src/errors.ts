// Error classes mirroring quantem/stem4d/errors.py: the same names, the same message form
// ("<path>: <detail> (section X, block N)"), so a browser and Python report one damage alike.

export type ErrorFields = Record<string, string | number | bigint | null | undefined>;

export class QuantemError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

export class SourceError extends QuantemError {
  readonly path: string | null;
  readonly detail: string;
  readonly fields: ErrorFields;

  constructor(path: string | null, detail: string, fields: ErrorFields = {}) {
    const where = path ? `${path}: ` : "";
    const extra = Object.entries(fields)
      .filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    super(`${where}${detail}` + (extra ? ` (${extra})` : ""));
    this.path = path;
    this.detail = detail;
    this.fields = fields;
  }
}

export class SourceNotFoundError extends SourceError {}
export class ArinaFormatError extends SourceError {}
export class ChunkDecodeError extends SourceError {}
export class QemFormatError extends SourceError {}
export class QemVersionError extends QemFormatError {}
export class DetectorError extends QuantemError {}
