// A small JSON parser that keeps the difference Python's json module keeps between
// integers and floats (`12` vs `12.0`): .qem METADATA requires JSON integers (§5), and
// JSON.parse would turn 12.0 into 12. Floats come back as JsonFloat.

export class JsonFloat {
  constructor(readonly value: number) {}
}

export type JsonValue =
  | null
  | boolean
  | number
  | JsonFloat
  | string
  | JsonValue[]
  | { [key: string]: JsonValue };

export class JsonSyntaxError extends Error {}

export function parseJson(text: string): JsonValue {
  let i = 0;
  const fail = (what: string): never => {
    throw new JsonSyntaxError(`${what} at char ${i}`);
  };
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  };
  const value = (): JsonValue => {
    space();
    const ch = text[i];
    if (ch === "{") {
      i++;
      const out: { [key: string]: JsonValue } = {};
      space();
      if (text[i] === "}") {
        i++;
        return out;
      }
      for (;;) {
        space();
        if (text[i] !== '"') fail("Expecting property name enclosed in double quotes");
        const key = string();
        space();
        if (text[i] !== ":") fail("Expecting ':' delimiter");
        i++;
        out[key] = value();
        space();
        if (text[i] === ",") i++;
        else if (text[i] === "}") {
          i++;
          return out;
        } else fail("Expecting ',' delimiter");
      }
    }
    if (ch === "[") {
      i++;
      const out: JsonValue[] = [];
      space();
      if (text[i] === "]") {
        i++;
        return out;
      }
      for (;;) {
        out.push(value());
        space();
        if (text[i] === ",") i++;
        else if (text[i] === "]") {
          i++;
          return out;
        } else fail("Expecting ',' delimiter");
      }
    }
    if (ch === '"') return string();
    for (const [word, result] of [
      ["true", true],
      ["false", false],
      ["null", null],
    ] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return result;
      }
    }
    const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/.exec(text.slice(i));
    if (!match) return fail("Expecting value");
    i += match[0].length;
    const number = Number(match[0]);
    return match[2] || match[3] ? new JsonFloat(number) : number;
  };
  const string = (): string => {
    const match = /^"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/.exec(text.slice(i));
    if (!match) return fail("Invalid string");
    i += match[0].length;
    return JSON.parse(match[0]) as string;
  };
  const result = value();
  space();
  if (i !== text.length) fail("Extra data");
  return result;
}

/** A JSON integer (not a float, not a bool), as Python's is_json_int. */
export function isJsonInt(value: unknown): value is number {
  return typeof value === "number";
}
