// Python's repr() of JSON values, so that error messages quoting a metadata value read
// exactly as the Python reader's (`[3, 4]`, `'uint16'`, `{'n_masked': 2}`, `None`).

import { JsonFloat } from "./json.js";

export function pyRepr(value: unknown): string {
  if (value instanceof JsonFloat) {
    const text = pyNumber(value.value);
    return /[.en]/.test(text) ? text : text + ".0";
  }
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return pyNumber(value);
  if (typeof value === "string") return pyString(value);
  if (Array.isArray(value)) return "[" + value.map(pyRepr).join(", ") + "]";
  if (typeof value === "object") {
    const items = Object.entries(value as Record<string, unknown>);
    return "{" + items.map(([k, v]) => `${pyString(k)}: ${pyRepr(v)}`).join(", ") + "}";
  }
  return String(value);
}

function pyNumber(value: number): string {
  if (Number.isInteger(value) && !Object.is(value, -0) && Math.abs(value) < 1e16) {
    return String(value);
  }
  const text = String(value);
  return /[.e]/.test(text) ? text.replace(/e\+?/, "e+").replace("e+-", "e-") : text + ".0";
}

function pyString(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + ch;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + quote;
}
