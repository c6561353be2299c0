"use strict";
(() => {
  // src/errors.ts
  var QuantemError = class extends Error {
    constructor(message) {
      super(message);
      this.name = new.target.name;
    }
  };
  var SourceError = class extends QuantemError {
    path;
    detail;
    fields;
    constructor(path, detail, fields = {}) {
      const where = path ? `${path}: ` : "";
      const extra = Object.entries(fields).filter(([, v]) => v !== null && v !== void 0).map(([k, v]) => `${k} ${v}`).join(", ");
      super(`${where}${detail}` + (extra ? ` (${extra})` : ""));
      this.path = path;
      this.detail = detail;
      this.fields = fields;
    }
  };
  var QemFormatError = class extends SourceError {
  };
  var QemVersionError = class extends QemFormatError {
  };
  var DetectorError = class extends QuantemError {
  };

  // src/json.ts
  var JsonFloat = class {
    constructor(value) {
      this.value = value;
    }
    value;
  };
  var JsonSyntaxError = class extends Error {
  };
  function parseJson(text) {
    let i = 0;
    const fail = (what) => {
      throw new JsonSyntaxError(`${what} at char ${i}`);
    };
    const space = () => {
      while (i < text.length && " 	\n\r".includes(text[i])) i++;
    };
    const value = () => {
      space();
      const ch = text[i];
      if (ch === "{") {
        i++;
        const out = {};
        space();
        if (text[i] === "}") {
          i++;
          return out;
        }
        for (; ; ) {
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
        const out = [];
        space();
        if (text[i] === "]") {
          i++;
          return out;
        }
        for (; ; ) {
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
      for (const [word, result2] of [
        ["true", true],
        ["false", false],
        ["null", null]
      ]) {
        if (text.startsWith(word, i)) {
          i += word.length;
          return result2;
        }
      }
      const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/.exec(text.slice(i));
      if (!match) return fail("Expecting value");
      i += match[0].length;
      const number = Number(match[0]);
      return match[2] || match[3] ? new JsonFloat(number) : number;
    };
    const string = () => {
      const match = /^"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/.exec(text.slice(i));
      if (!match) return fail("Invalid string");
      i += match[0].length;
      return JSON.parse(match[0]);
    };
    const result = value();
    space();
    if (i !== text.length) fail("Extra data");
    return result;
  }
  function isJsonInt(value) {
    return typeof value === "number";
  }

  // src/pyrepr.ts
  function pyRepr(value) {
    if (value instanceof JsonFloat) {
      const text = pyNumber(value.value);
      return /[.en]/.test(text) ? text : text + ".0";
    }
    if (value === null || value === void 0) return "None";
    if (value === true) return "True";
    if (value === false) return "False";
    if (typeof value === "number") return pyNumber(value);
    if (typeof value === "string") return pyString(value);
    if (Array.isArray(value)) return "[" + value.map(pyRepr).join(", ") + "]";
    if (typeof value === "object") {
      const items = Object.entries(value);
      return "{" + items.map(([k, v]) => `${pyString(k)}: ${pyRepr(v)}`).join(", ") + "}";
    }
    return String(value);
  }
  function pyNumber(value) {
    if (Number.isInteger(value) && !Object.is(value, -0) && Math.abs(value) < 1e16) {
      return String(value);
    }
    const text = String(value);
    return /[.e]/.test(text) ? text.replace(/e\+?/, "e+").replace("e+-", "e-") : text + ".0";
  }
  function pyString(text) {
    const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
    let out = quote;
    for (const ch of text) {
      const code = ch.codePointAt(0);
      if (ch === "\\") out += "\\\\";
      else if (ch === quote) out += "\\" + ch;
      else if (ch === "\n") out += "\\n";
      else if (ch === "\r") out += "\\r";
      else if (ch === "	") out += "\\t";
      else if (code < 32 || code === 127) out += "\\x" + code.toString(16).padStart(2, "0");
      else out += ch;
    }
    return out + quote;
  }

  // node_modules/hash-wasm/dist/index.esm.js
  function __awaiter(thisArg, _arguments, P, generator) {
    function adopt(value) {
      return value instanceof P ? value : new P(function(resolve) {
        resolve(value);
      });
    }
    return new (P || (P = Promise))(function(resolve, reject) {
      function fulfilled(value) {
        try {
          step(generator.next(value));
        } catch (e) {
          reject(e);
        }
      }
      function rejected(value) {
        try {
          step(generator["throw"](value));
        } catch (e) {
          reject(e);
        }
      }
      function step(result) {
        result.done ? resolve(result.value) : adopt(result.value).then(fulfilled, rejected);
      }
      step((generator = generator.apply(thisArg, _arguments || [])).next());
    });
  }
  var Mutex = class {
    constructor() {
      this.mutex = Promise.resolve();
    }
    lock() {
      let begin = () => {
      };
      this.mutex = this.mutex.then(() => new Promise(begin));
      return new Promise((res) => {
        begin = res;
      });
    }
    dispatch(fn) {
      return __awaiter(this, void 0, void 0, function* () {
        const unlock = yield this.lock();
        try {
          return yield Promise.resolve(fn());
        } finally {
          unlock();
        }
      });
    }
  };
  var _a;
  function getGlobal() {
    if (typeof globalThis !== "undefined")
      return globalThis;
    if (typeof self !== "undefined")
      return self;
    if (typeof window !== "undefined")
      return window;
    return global;
  }
  var globalObject = getGlobal();
  var nodeBuffer = (_a = globalObject.Buffer) !== null && _a !== void 0 ? _a : null;
  var textEncoder = globalObject.TextEncoder ? new globalObject.TextEncoder() : null;
  function hexCharCodesToInt(a, b) {
    return (a & 15) + (a >> 6 | a >> 3 & 8) << 4 | (b & 15) + (b >> 6 | b >> 3 & 8);
  }
  function writeHexToUInt8(buf, str) {
    const size = str.length >> 1;
    for (let i = 0; i < size; i++) {
      const index = i << 1;
      buf[i] = hexCharCodesToInt(str.charCodeAt(index), str.charCodeAt(index + 1));
    }
  }
  function hexStringEqualsUInt8(str, buf) {
    if (str.length !== buf.length * 2) {
      return false;
    }
    for (let i = 0; i < buf.length; i++) {
      const strIndex = i << 1;
      if (buf[i] !== hexCharCodesToInt(str.charCodeAt(strIndex), str.charCodeAt(strIndex + 1))) {
        return false;
      }
    }
    return true;
  }
  var alpha = "a".charCodeAt(0) - 10;
  var digit = "0".charCodeAt(0);
  function getDigestHex(tmpBuffer, input, hashLength) {
    let p = 0;
    for (let i = 0; i < hashLength; i++) {
      let nibble = input[i] >>> 4;
      tmpBuffer[p++] = nibble > 9 ? nibble + alpha : nibble + digit;
      nibble = input[i] & 15;
      tmpBuffer[p++] = nibble > 9 ? nibble + alpha : nibble + digit;
    }
    return String.fromCharCode.apply(null, tmpBuffer);
  }
  var getUInt8Buffer = nodeBuffer !== null ? (data) => {
    if (typeof data === "string") {
      const buf = nodeBuffer.from(data, "utf8");
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.length);
    }
    if (nodeBuffer.isBuffer(data)) {
      return new Uint8Array(data.buffer, data.byteOffset, data.length);
    }
    if (ArrayBuffer.isView(data)) {
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    }
    throw new Error("Invalid data type!");
  } : (data) => {
    if (typeof data === "string") {
      return textEncoder.encode(data);
    }
    if (ArrayBuffer.isView(data)) {
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    }
    throw new Error("Invalid data type!");
  };
  var base64Chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  var base64Lookup = new Uint8Array(256);
  for (let i = 0; i < base64Chars.length; i++) {
    base64Lookup[base64Chars.charCodeAt(i)] = i;
  }
  function getDecodeBase64Length(data) {
    let bufferLength = Math.floor(data.length * 0.75);
    const len = data.length;
    if (data[len - 1] === "=") {
      bufferLength -= 1;
      if (data[len - 2] === "=") {
        bufferLength -= 1;
      }
    }
    return bufferLength;
  }
  function decodeBase64(data) {
    const bufferLength = getDecodeBase64Length(data);
    const len = data.length;
    const bytes = new Uint8Array(bufferLength);
    let p = 0;
    for (let i = 0; i < len; i += 4) {
      const encoded1 = base64Lookup[data.charCodeAt(i)];
      const encoded2 = base64Lookup[data.charCodeAt(i + 1)];
      const encoded3 = base64Lookup[data.charCodeAt(i + 2)];
      const encoded4 = base64Lookup[data.charCodeAt(i + 3)];
      bytes[p] = encoded1 << 2 | encoded2 >> 4;
      p += 1;
      bytes[p] = (encoded2 & 15) << 4 | encoded3 >> 2;
      p += 1;
      bytes[p] = (encoded3 & 3) << 6 | encoded4 & 63;
      p += 1;
    }
    return bytes;
  }
  var MAX_HEAP = 16 * 1024;
  var WASM_FUNC_HASH_LENGTH = 4;
  var wasmMutex = new Mutex();
  var wasmModuleCache = /* @__PURE__ */ new Map();
  function WASMInterface(binary, hashLength) {
    return __awaiter(this, void 0, void 0, function* () {
      let wasmInstance = null;
      let memoryView = null;
      let initialized = false;
      if (typeof WebAssembly === "undefined") {
        throw new Error("WebAssembly is not supported in this environment!");
      }
      const writeMemory = (data, offset = 0) => {
        memoryView.set(data, offset);
      };
      const getMemory = () => memoryView;
      const getExports = () => wasmInstance.exports;
      const setMemorySize = (totalSize) => {
        wasmInstance.exports.Hash_SetMemorySize(totalSize);
        const arrayOffset = wasmInstance.exports.Hash_GetBuffer();
        const memoryBuffer = wasmInstance.exports.memory.buffer;
        memoryView = new Uint8Array(memoryBuffer, arrayOffset, totalSize);
      };
      const getStateSize = () => {
        const view = new DataView(wasmInstance.exports.memory.buffer);
        const stateSize = view.getUint32(wasmInstance.exports.STATE_SIZE, true);
        return stateSize;
      };
      const loadWASMPromise = wasmMutex.dispatch(() => __awaiter(this, void 0, void 0, function* () {
        if (!wasmModuleCache.has(binary.name)) {
          const asm = decodeBase64(binary.data);
          const promise = WebAssembly.compile(asm.buffer);
          wasmModuleCache.set(binary.name, promise);
        }
        const module = yield wasmModuleCache.get(binary.name);
        wasmInstance = yield WebAssembly.instantiate(module, {
          // env: {
          //   emscripten_memcpy_big: (dest, src, num) => {
          //     const memoryBuffer = wasmInstance.exports.memory.buffer;
          //     const memView = new Uint8Array(memoryBuffer, 0);
          //     memView.set(memView.subarray(src, src + num), dest);
          //   },
          //   print_memory: (offset, len) => {
          //     const memoryBuffer = wasmInstance.exports.memory.buffer;
          //     const memView = new Uint8Array(memoryBuffer, 0);
          //     console.log('print_int32', memView.subarray(offset, offset + len));
          //   },
          // },
        });
      }));
      const setupInterface = () => __awaiter(this, void 0, void 0, function* () {
        if (!wasmInstance) {
          yield loadWASMPromise;
        }
        const arrayOffset = wasmInstance.exports.Hash_GetBuffer();
        const memoryBuffer = wasmInstance.exports.memory.buffer;
        memoryView = new Uint8Array(memoryBuffer, arrayOffset, MAX_HEAP);
      });
      const init = (bits = null) => {
        initialized = true;
        wasmInstance.exports.Hash_Init(bits);
      };
      const updateUInt8Array = (data) => {
        let read = 0;
        while (read < data.length) {
          const chunk = data.subarray(read, read + MAX_HEAP);
          read += chunk.length;
          memoryView.set(chunk);
          wasmInstance.exports.Hash_Update(chunk.length);
        }
      };
      const update2 = (data) => {
        if (!initialized) {
          throw new Error("update() called before init()");
        }
        const Uint8Buffer = getUInt8Buffer(data);
        updateUInt8Array(Uint8Buffer);
      };
      const digestChars = new Uint8Array(hashLength * 2);
      const digest = (outputType, padding = null) => {
        if (!initialized) {
          throw new Error("digest() called before init()");
        }
        initialized = false;
        wasmInstance.exports.Hash_Final(padding);
        if (outputType === "binary") {
          return memoryView.slice(0, hashLength);
        }
        return getDigestHex(digestChars, memoryView, hashLength);
      };
      const save = () => {
        if (!initialized) {
          throw new Error("save() can only be called after init() and before digest()");
        }
        const stateOffset = wasmInstance.exports.Hash_GetState();
        const stateLength = getStateSize();
        const memoryBuffer = wasmInstance.exports.memory.buffer;
        const internalState = new Uint8Array(memoryBuffer, stateOffset, stateLength);
        const prefixedState = new Uint8Array(WASM_FUNC_HASH_LENGTH + stateLength);
        writeHexToUInt8(prefixedState, binary.hash);
        prefixedState.set(internalState, WASM_FUNC_HASH_LENGTH);
        return prefixedState;
      };
      const load = (state2) => {
        if (!(state2 instanceof Uint8Array)) {
          throw new Error("load() expects an Uint8Array generated by save()");
        }
        const stateOffset = wasmInstance.exports.Hash_GetState();
        const stateLength = getStateSize();
        const overallLength = WASM_FUNC_HASH_LENGTH + stateLength;
        const memoryBuffer = wasmInstance.exports.memory.buffer;
        if (state2.length !== overallLength) {
          throw new Error(`Bad state length (expected ${overallLength} bytes, got ${state2.length})`);
        }
        if (!hexStringEqualsUInt8(binary.hash, state2.subarray(0, WASM_FUNC_HASH_LENGTH))) {
          throw new Error("This state was written by an incompatible hash implementation");
        }
        const internalState = state2.subarray(WASM_FUNC_HASH_LENGTH);
        new Uint8Array(memoryBuffer, stateOffset, stateLength).set(internalState);
        initialized = true;
      };
      const isDataShort = (data) => {
        if (typeof data === "string") {
          return data.length < MAX_HEAP / 4;
        }
        return data.byteLength < MAX_HEAP;
      };
      let canSimplify = isDataShort;
      switch (binary.name) {
        case "argon2":
        case "scrypt":
          canSimplify = () => true;
          break;
        case "blake2b":
        case "blake2s":
          canSimplify = (data, initParam) => initParam <= 512 && isDataShort(data);
          break;
        case "blake3":
          canSimplify = (data, initParam) => initParam === 0 && isDataShort(data);
          break;
        case "xxhash64":
        // cannot simplify
        case "xxhash3":
        case "xxhash128":
        case "crc64":
          canSimplify = () => false;
          break;
      }
      const calculate = (data, initParam = null, digestParam = null) => {
        if (!canSimplify(data, initParam)) {
          init(initParam);
          update2(data);
          return digest("hex", digestParam);
        }
        const buffer = getUInt8Buffer(data);
        memoryView.set(buffer);
        wasmInstance.exports.Hash_Calculate(buffer.length, initParam, digestParam);
        return getDigestHex(digestChars, memoryView, hashLength);
      };
      yield setupInterface();
      return {
        getMemory,
        writeMemory,
        getExports,
        setMemorySize,
        init,
        update: update2,
        digest,
        save,
        load,
        calculate,
        hashLength
      };
    });
  }
  var mutex$l = new Mutex();
  var mutex$k = new Mutex();
  var uint32View = new DataView(new ArrayBuffer(4));
  var mutex$j = new Mutex();
  var mutex$i = new Mutex();
  var mutex$h = new Mutex();
  var mutex$g = new Mutex();
  var polyBuffer = new Uint8Array(8);
  var mutex$f = new Mutex();
  var mutex$e = new Mutex();
  var mutex$d = new Mutex();
  var mutex$c = new Mutex();
  var mutex$b = new Mutex();
  var mutex$a = new Mutex();
  var mutex$9 = new Mutex();
  var mutex$8 = new Mutex();
  var mutex$7 = new Mutex();
  var mutex$6 = new Mutex();
  var mutex$5 = new Mutex();
  var seedBuffer$2 = new Uint8Array(8);
  var name$6 = "xxhash3";
  var data$6 = "AGFzbQEAAAABNAhgAAF/YAR/f39/AGAHf39/f39/fwBgBH9+fn4BfmAEf39/fgF+YAN/f34BfmAAAGABfwADDg0AAQIDBAUFBQYHBgAGBQQBAQICBg8CfwFBgIAEC38AQcCBBAsHggEJBm1lbW9yeQIAD19fc3RhY2tfcG9pbnRlcgMADkhhc2hfR2V0QnVmZmVyAAAJSGFzaF9Jbml0AAgLSGFzaF9VcGRhdGUACQpIYXNoX0ZpbmFsAAoNSGFzaF9HZXRTdGF0ZQALDkhhc2hfQ2FsY3VsYXRlAAwKU1RBVEVfU0laRQMBCo9CDQYAQYCCBAvzAwQBfwh+AX8IfgJAIANFDQAgA0EDdCEEIAApAzAhBSAAKQM4IQYgACkDICEHIAApAyghCCAAKQMQIQkgACkDGCEKIAApAwAhCyAAKQMIIQxBACENA0AgBiABQTBqKQMAIg58IAIgDWoiA0E4aikDACABQThqKQMAIg+FIgZCIIggBkL/////D4N+fCEGIAggAUEgaikDACIQfCADQShqKQMAIAFBKGopAwAiEYUiCEIgiCAIQv////8Pg358IQggCiABQRBqKQMAIhJ8IANBGGopAwAgAUEYaikDACIThSIKQiCIIApC/////w+DfnwhCiAMIAEpAwAiFHwgA0EIaikDACABQQhqKQMAIhWFIgxCIIggDEL/////D4N+fCEMIANBMGopAwAgDoUiDkIgiCAOQv////8Pg34gBXwgD3whBSADQSBqKQMAIBCFIg5CIIggDkL/////D4N+IAd8IBF8IQcgA0EQaikDACAShSIOQiCIIA5C/////w+DfiAJfCATfCEJIAMpAwAgFIUiDkIgiCAOQv////8Pg34gC3wgFXwhCyABQcAAaiEBIAQgDUEIaiINRw0ACyAAIAo3AxggACALNwMAIAAgDDcDCCAAIAg3AyggACAJNwMQIAAgBjcDOCAAIAc3AyAgACAFNwMwCwveAgIBfwF+AkAgBCACIAEoAgAiB2siAkkNACAAIAMgBSAHQQN0aiACEAEgACAFIAZqIgcpAwAgACkDACIIQi+IhSAIhUKx893xCX43AwAgACAHKQMIIAApAwgiCEIviIUgCIVCsfPd8Ql+NwMIIAAgBykDECAAKQMQIghCL4iFIAiFQrHz3fEJfjcDECAAIAcpAxggACkDGCIIQi+IhSAIhUKx893xCX43AxggACAHKQMgIAApAyAiCEIviIUgCIVCsfPd8Ql+NwMgIAAgBykDKCAAKQMoIghCL4iFIAiFQrHz3fEJfjcDKCAAIAcpAzAgACkDMCIIQi+IhSAIhUKx893xCX43AzAgACAHKQM4IAApAzgiCEIviIUgCIVCsfPd8Ql+NwM4IAAgAyACQQZ0aiAFIAQgAmsiBxABIAEgBzYCAA8LIAAgAyAFIAdBA3RqIAQQASABIAcgBGo2AgALewEBfyACIAGFIAOnIgRB/4H8B3FBCHggBEEYeEH/gfwHcXKtQiCGIAOFfUEANQKAhAVCIIYgAEH8gwVqNQIAhIUiA0IxiSADQhiJhSADhUKlvuP00YyH2Z9/fiIDQiOIIACtfCADhUKlvuP00YyH2Z9/fiIDQhyIIAOFC2QAIAMgAiABc618IgNCIYhBAC0AgIQFQRB0IABBCHRyIABBAXYtAICEBUEYdHIgAEH/gwVqLQAAcq2FIAOFQs/W077Sx6vZQn4iA0IdiCADhUL5893xmfaZqxZ+IgNCIIggA4ULhwMBBX4CQCAAQQlJDQBBACkDgIQFIAEpAyAgASkDGIUgAnyFIgNCOIYgA0KA/gODQiiGhCADQoCA/AeDQhiGIANCgICA+A+DQgiGhIQgA0IIiEKAgID4D4MgA0IYiEKAgPwHg4QgA0IoiEKA/gODIANCOIiEhIQgAK18IABB+IMFaikDACABKQMwIAEpAyiFIAJ9hSICfCACQv////8PgyIEIANCIIgiBX4iBiACQiCIIgIgA0L/////D4MiB358IgNCIIggAiAFfnxCgICAgBBCACADIAZUG3wgA0IghiIDIAQgB358IgIgA1StfCAChXwiA0IliCADhUL5893xmfKZqxZ+IgNCIIggA4UPCwJAIABBBEkNACAAIAFBCGopAwAgAUEQaikDACACEAMPCwJAIABFDQAgACABKAIAIAFBBGooAgAgAhAEDwsgASkDOCABKQNAhSAChSIDQiGIIAOFQs/W077Sx6vZQn4iA0IdiCADhUL5893xmfaZqxZ+IgNCIIggA4ULzggBB34gAK1Ch5Wvr5i23puef34hAwJAIABBIUkNAAJAIABBwQBJDQACQCAAQeEASQ0AIAEpA2ggAn1BACkDuIQFhSIEQv////8PgyIFIAEpA2AgAnxBACkDsIQFhSIGQiCIIgd+IgggBEIgiCIJIAZC/////w+DIgZ+fCIEQiCIIAkgB358QoCAgIAQQgAgBCAIVBt8IARCIIYiBCAFIAZ+fCIFIARUrXwgBYUgA3wgASkDeCACfSAAQciDBWopAwCFIgNC/////w+DIgQgASkDcCACfCAAQcCDBWopAwCFIgVCIIgiBn4iByADQiCIIgggBUL/////D4MiBX58IgNCIIggCCAGfnxCgICAgBBCACADIAdUG3wgA0IghiIDIAQgBX58IgQgA1StfCAEhXwhAwsgASkDSCACfUEAKQOohAWFIgRC/////w+DIgUgASkDQCACfEEAKQOghAWFIgZCIIgiB34iCCAEQiCIIgkgBkL/////D4MiBn58IgRCIIggCSAHfnxCgICAgBBCACAEIAhUG3wgBEIghiIEIAUgBn58IgUgBFStfCAFhSADfCABKQNYIAJ9IABB2IMFaikDAIUiA0L/////D4MiBCABKQNQIAJ8IABB0IMFaikDAIUiBUIgiCIGfiIHIANCIIgiCCAFQv////8PgyIFfnwiA0IgiCAIIAZ+fEKAgICAEEIAIAMgB1QbfCADQiCGIgMgBCAFfnwiBCADVK18IASFfCEDCyABKQMoIAJ9QQApA5iEBYUiBEL/////D4MiBSABKQMgIAJ8QQApA5CEBYUiBkIgiCIHfiIIIARCIIgiCSAGQv////8PgyIGfnwiBEIgiCAJIAd+fEKAgICAEEIAIAQgCFQbfCAEQiCGIgQgBSAGfnwiBSAEVK18IAWFIAN8IAEpAzggAn0gAEHogwVqKQMAhSIDQv////8PgyIEIAEpAzAgAnwgAEHggwVqKQMAhSIFQiCIIgZ+IgcgA0IgiCIIIAVC/////w+DIgV+fCIDQiCIIAggBn58QoCAgIAQQgAgAyAHVBt8IANCIIYiAyAEIAV+fCIEIANUrXwgBIV8IQMLIAEpAwggAn1BACkDiIQFhSIEQv////8PgyIFIAEpAwAgAnxBACkDgIQFhSIGQiCIIgd+IgggBEIgiCIJIAZC/////w+DIgZ+fCIEQiCIIAkgB358QoCAgIAQQgAgBCAIVBt8IARCIIYiBCAFIAZ+fCIFIARUrXwgBYUgA3wgASkDGCACfSAAQfiDBWopAwCFIgNC/////w+DIgQgASkDECACfCAAQfCDBWopAwCFIgJCIIgiBX4iBiADQiCIIgMgAkL/////D4MiB358IgJCIIggAyAFfnxCgICAgBBCACACIAZUG3wgAkIghiICIAQgB358IgMgAlStfCADhXwiAkIliCAChUL5893xmfKZqxZ+IgJCIIggAoUL5QoEAX8GfgJ/AX5BACEDIAEpA3ggAn1BACkD+IQFhSIEQv////8PgyIFIAEpA3AgAnxBACkD8IQFhSIGQiCIIgd+IgggBEIgiCIJIAZC/////w+DIgZ+fCIEQiCIIAkgB358QoCAgIAQQgAgBCAIVBt8IARCIIYiBCAFIAZ+fCIFIARUrXwgBYUgASkDaCACfUEAKQPohAWFIgRC/////w+DIgUgASkDYCACfEEAKQPghAWFIgZCIIgiB34iCCAEQiCIIgkgBkL/////D4MiBn58IgRCIIggCSAHfnxCgICAgBBCACAEIAhUG3wgBEIghiIEIAUgBn58IgUgBFStfCAFhSABKQNYIAJ9QQApA9iEBYUiBEL/////D4MiBSABKQNQIAJ8QQApA9CEBYUiBkIgiCIHfiIIIARCIIgiCSAGQv////8PgyIGfnwiBEIgiCAJIAd+fEKAgICAEEIAIAQgCFQbfCAEQiCGIgQgBSAGfnwiBSAEVK18IAWFIAEpA0ggAn1BACkDyIQFhSIEQv////8PgyIFIAEpA0AgAnxBACkDwIQFhSIGQiCIIgd+IgggBEIgiCIJIAZC/////w+DIgZ+fCIEQiCIIAkgB358QoCAgIAQQgAgBCAIVBt8IARCIIYiBCAFIAZ+fCIFIARUrXwgBYUgASkDOCACfUEAKQO4hAWFIgRC/////w+DIgUgASkDMCACfEEAKQOwhAWFIgZCIIgiB34iCCAEQiCIIgkgBkL/////D4MiBn58IgRCIIggCSAHfnxCgICAgBBCACAEIAhUG3wgBEIghiIEIAUgBn58IgUgBFStfCAFhSABKQMoIAJ9QQApA6iEBYUiBEL/////D4MiBSABKQMgIAJ8QQApA6CEBYUiBkIgiCIHfiIIIARCIIgiCSAGQv////8PgyIGfnwiBEIgiCAJIAd+fEKAgICAEEIAIAQgCFQbfCAEQiCGIgQgBSAGfnwiBSAEVK18IAWFIAEpAxggAn1BACkDmIQFhSIEQv////8PgyIFIAEpAxAgAnxBACkDkIQFhSIGQiCIIgd+IgggBEIgiCIJIAZC/////w+DIgZ+fCIEQiCIIAkgB358QoCAgIAQQgAgBCAIVBt8IARCIIYiBCAFIAZ+fCIFIARUrXwgBYUgASkDCCACfUEAKQOIhAWFIgRC/////w+DIgUgASkDACACfEEAKQOAhAWFIgZCIIgiB34iCCAEQiCIIgkgBkL/////D4MiBn58IgRCIIggCSAHfnxCgICAgBBCACAEIAhUG3wgBEIghiIEIAUgBn58IgUgBFStfCAFhSAArUKHla+vmLbem55/fnx8fHx8fHx8IgRCJYggBIVC+fPd8ZnymasWfiIEQiCIIASFIQUCQCAAQZABSQ0AIABBcHFBgH9qIQoDQCABIANqIgtBC2opAwAgAn0gA0GIhQVqKQMAhSIEQv////8PgyIGIAtBA2opAwAgAnwgA0GAhQVqKQMAhSIHQiCIIgh+IgkgBEIgiCIMIAdC/////w+DIgd+fCIEQiCIIAwgCH58QoCAgIAQQgAgBCAJVBt8IARCIIYiBCAGIAd+fCIGIARUrXwgBoUgBXwhBSAKIANBEGoiA0cNAAsLIAEpA38gAn0gAEH4gwVqKQMAhSIEQv////8PgyIGIAEpA3cgAnwgAEHwgwVqKQMAhSICQiCIIgd+IgggBEIgiCIEIAJC/////w+DIgl+fCICQiCIIAQgB358QoCAgIAQQgAgAiAIVBt8IAJCIIYiAiAGIAl+fCIEIAJUrXwgBIUgBXwiAkIliCAChUL5893xmfKZqxZ+IgJCIIggAoUL4QUCAX4BfwJAAkBBACkDgIIEIgBQRQ0AQYCABCEBQgAhAAwBCwJAIABBACkDoIYFUg0AQQAhAQwBC0EAIQFBAEKvr+/XvPeSoP4AIAB9NwP4gwVBACAAQsWW6/nY0oWCKHw3A/CDBUEAQo/x442tj/SYTiAAfTcD6IMFQQAgAEKrrPjF1e/R0Hx8NwPggwVBAELTrdSykoW1tJ5/IAB9NwPYgwVBACAAQpea9I71lrztyQB8NwPQgwVBAELFg4L9r//EsWsgAH03A8iDBUEAIABC6ouzncjm9PVDfDcDwIMFQQBCyL/6y5yb3rnkACAAfTcDuIMFQQAgAEKKo4Hf1JntrDF8NwOwgwVBAEL5ue+9/PjCpx0gAH03A6iDBUEAIABCqPXb+7Ocp5o/fDcDoIMFQQBCuLK8t5TVt9ZYIAB9NwOYgwVBACAAQvHIobqptMP8zgB8NwOQgwVBAEKIoZfbuOOUl6N/IAB9NwOIgwVBACAAQrzQyNqb8rCAS3w3A4CDBUEAQuDrwLSe0I6TzAAgAH03A/iCBUEAIABCuJGYovf+kJKOf3w3A/CCBUEAQoK1we7H+b+5ISAAfTcD6IIFQQAgAELL85n3xJnw8vgAfDcD4IIFQQBC8oCRpfr27LMfIAB9NwPYggVBACAAQt6pt8u+kOTLW3w3A9CCBUEAQvyChOTyvsjWHCAAfTcDyIIFQQAgAEK4/bPLs4Tppb5/fDcDwIIFC0EAQgA3A5CGBUEAQgA3A4iGBUEAQgA3A4CGBUEAQr3cypUMNwOAggVBAEKHla+vmLbem55/NwOIggVBAELP1tO+0ser2UI3A5CCBUEAQvnz3fGZ9pmrFjcDmIIFQQBC49zKlfzO8vWFfzcDoIIFQQBC95Svrwg3A6iCBUEAQsXP2bLx5brqJzcDsIIFQQBCsfPd8Qk3A7iCBUEAIAA3A6CGBUEAIAE2ArCGBUEAQpCAgICAEDcDmIYFC9YKAQh/QQBBACkDkIYFIACtfDcDkIYFAkACQAJAQQAoAoCGBSIBIABqIgJBgAJLDQAgAUGAhAVqIQNBgIIEIQQCQCAAQQhPDQAgACEFDAILQYCCBCEEAkACQCAAQXhqIgFBOHFBOEcNACAAIQUMAQtBgIIEIQQgAUEDdkEBakEHcSIGIQUDQCADIAQpAwA3AwAgA0EIaiEDIARBCGohBCAFQX9qIgUNAAsgACAGQQN0ayEFIAFBOEkNAgsDQCADIAQpAwA3AwAgA0EIaiAEQQhqKQMANwMAIANBEGogBEEQaikDADcDACADQRhqIARBGGopAwA3AwAgA0EgaiAEQSBqKQMANwMAIANBKGogBEEoaikDADcDACADQTBqIARBMGopAwA3AwAgA0E4aiAEQThqKQMANwMAIANBwABqIQMgBEHAAGohBCAFQUBqIgVBB0sNAAwCCwtBgIIEIQQgAEGAggRqIQZBACgCsIYFIgNBwIIFIAMbIQUCQCABRQ0AIAFBgIQFaiEDQYCCBCEEAkACQEGAAiABayIHQQhPDQAgByECDAELQYCCBCEEAkACQEH4ASABayIAQThxQThHDQAgByECDAELQQAgAEEDdkEBakEHcSIIayECQYCCBCEEA0AgAyAEKQMANwMAIANBCGohAyAEQQhqIQQgAkEBaiICDQALQYACIAEgCEEDdGprIQIgAEE4SQ0BCwNAIAMgBCkDADcDACADQQhqIARBCGopAwA3AwAgA0EQaiAEQRBqKQMANwMAIANBGGogBEEYaikDADcDACADQSBqIARBIGopAwA3AwAgA0EoaiAEQShqKQMANwMAIANBMGogBEEwaikDADcDACADQThqIARBOGopAwA3AwAgA0HAAGohAyAEQcAAaiEEIAJBQGoiAkEHSw0ACwsCQCACRQ0AAkACQCACQQdxIgANACACIQAMAQsDQCADIAQtAAA6AAAgA0EBaiEDIARBAWohBCAAQX9qIgANAAsgAkF4cSEACyACQQhJDQADQCADIAQpAAA3AAAgA0EIaiEDIARBCGohBCAAQXhqIgANAAsLQYCCBUGIhgVBACgCmIYFQYCEBUEEIAVBACgCnIYFEAJBAEEANgKAhgUgB0GAggRqIQQLAkAgBEGAAmogBk8NACAGQYB+aiECA0BBgIIFQYiGBUEAKAKYhgUgBCIDQQQgBUEAKAKchgUQAiADQYACaiIEIAJJDQALQQAgAykDwAE3A8CFBUEAIAMpA8gBNwPIhQVBACADKQPQATcD0IUFQQAgAykD2AE3A9iFBUEAIAMpA+ABNwPghQVBACADKQPoATcD6IUFQQAgAykD8AE3A/CFBUEAIAMpA/gBNwP4hQULQYCEBSEDAkACQCAGIARrIgJBCE8NACACIQUMAQtBgIQFIQMgAiEFA0AgAyAEKQMANwMAIANBCGohAyAEQQhqIQQgBUF4aiIFQQdLDQALCyAFRQ0BIAMgBC0AADoAACAFQQFGDQEgAyAELQABOgABIAVBAkYNASADIAQtAAI6AAIgBUEDRg0BIAMgBC0AAzoAAyAFQQRGDQEgAyAELQAEOgAEIAVBBUYNASADIAQtAAU6AAUgBUEGRg0BIAMgBC0ABjoABgwBCyAFRQ0AAkACQCAFQQdxIgINACAFIQIMAQsDQCADIAQtAAA6AAAgA0EBaiEDIARBAWohBCACQX9qIgINAAsgBUF4cSECCwJAIAVBCEkNAANAIAMgBCkAADcAACADQQhqIQMgBEEIaiEEIAJBeGoiAg0ACwtBACgCgIYFIABqIQILQQAgAjYCgIYFC8oSBQR/CH4BfxB+BX8jACIAIQEgAEGAAWtBQHEiAiQAQQAoArCGBSIAQcCCBSAAGyEDAkACQAJAAkACQAJAQQApA5CGBSIEQvEBVA0AIAJBACkDgIIFNwMAIAJBACkDiIIFIgU3AwggAkEAKQOQggUiBjcDECACQQApA5iCBSIHNwMYIAJBACkDoIIFIgg3AyAgAkEAKQOoggUiCTcDKCACQQApA7CCBSIKNwMwIAJBACkDuIIFIgs3AzgCQEEAKAKAhgUiDEHAAEkNACACQQAoAoiGBTYCQCACIAJBwABqQQAoApiGBUGAhAUgDEF/akEGdiADQQAoApyGBSIAEAIgAyAAaiIAQXlqKQMAIQ0gACkDCSEOIAApAxkhDyAAKQMpIQUgDEHAgwVqKQMAIQogACkDASELIAxByIMFaikDACEQIAxB0IMFaikDACEGIAApAxEhByAMQdiDBWopAwAhESAMQeCDBWopAwAhCCAAKQMhIQkgDEHogwVqKQMAIRIgAikDACETIAIpAxAhFCACKQMgIRUgAikDMCEWIAIpAwghFyACKQMYIRggAikDKCEZIAIgAikDOCAMQfCDBWopAwAiGnwgACkDMSAMQfiDBWopAwAiG4UiHEIgiCAcQv////8Pg358NwM4IBkgCHwgCSAShSIJQiCIIAlC/////w+DfnwhCSAYIAZ8IAcgEYUiB0IgiCAHQv////8Pg358IQcgFyAKfCALIBCFIgtCIIggC0L/////D4N+fCELIBsgFiAFIBqFIgVCIIggBUL/////D4N+fHwhBSASIBUgDyAIhSIIQiCIIAhC/////w+Dfnx8IQggESAUIA4gBoUiBkIgiCAGQv////8Pg358fCEGIBAgEyANIAqFIgpCIIggCkL/////D4N+fHwhCgwFCyAMQcCFBWohHUHAACAMayEeIAJBwABqIQACQCAMQThNDQAgHiEfDAMLAkBBOCAMa0EDdiIAQQdGDQBBACAAQQFqQQdxIiBrIR8gAkHAAGohAANAIAAgHSkDADcDACAAQQhqIQAgHUEIaiEdIB9BAWoiHw0AC0HAACAMICBBA3RqayEfDAILIAJBwABqIQAgHiEfA0AgACAdKQMANwMAIABBCGogHUEIaikDADcDACAAQRBqIB1BEGopAwA3AwAgAEEYaiAdQRhqKQMANwMAIABBIGogHUEgaikDADcDACAAQShqIB1BKGopAwA3AwAgAEEwaiAdQTBqKQMANwMAIABBOGogHUE4aikDADcDACAAQcAAaiEAIB1BwABqIR0gH0FAaiIfQQdLDQAMAgsLIASnIQACQEEAKQOghgUiBVANAAJAIARCEFYNACAAQYCABCAFEAUhBAwGCwJAIARCgAFWDQAgAEGAgAQgBRAGIQQMBgsgAEGAgAQgBRAHIQQMBQsCQCAEQhBWDQAgACADQgAQBSEEDAULAkAgBEKAAVYNACAAIANCABAGIQQMBQsgACADQgAQByEEDAQLIB9FDQELIB9Bf2ohIQJAIB9BB3EiIEUNAANAIAAgHS0AADoAACAAQQFqIQAgHUEBaiEdICBBf2oiIA0ACyAfQXhxIR8LICFBB0kNAANAIAAgHSkAADcAACAAQQhqIQAgHUEIaiEdIB9BeGoiHw0ACwsgAkHAAGogHmohHUGAhAUhAAJAIAxBCEkNACAMQXhqIiBBA3ZBAWohH0GAhAUhAANAIB0gACkDADcDACAdQQhqIR0gAEEIaiEAIB9Bf2oiHw0ACyAMICBBeHFrQXhqIQwLAkAgDEUNAAJAAkAgDEEHcSIfDQAgDCEfDAELA0AgHSAALQAAOgAAIB1BAWohHSAAQQFqIQAgH0F/aiIfDQALIAxBeHEhHwsgDEEISQ0AA0AgHSAAKQAANwAAIB1BCGohHSAAQQhqIQAgH0F4aiIfDQALCyADQQAoApyGBWoiAEF5aikDACETIAApAwkhFCAAKQMZIRUgACkDKSEWIAApAwEhFyAAKQMRIRggACkDISEZIAIpAwAhGiACKQNAIRAgAikDSCERIAIpA1AhEiACKQNYIQ0gAikDYCEOIAIpA2ghDyACIAsgAikDcCIbfCAAKQMxIAIpA3giHIUiC0IgiCALQv////8Pg358NwM4IAkgDnwgGSAPhSIJQiCIIAlC/////w+DfnwhCSAHIBJ8IBggDYUiB0IgiCAHQv////8Pg358IQcgBSAQfCAXIBGFIgVCIIggBUL/////D4N+fCELIBwgFiAbhSIFQiCIIAVC/////w+DfiAKfHwhBSAPIBUgDoUiCkIgiCAKQv////8Pg34gCHx8IQggDSAUIBKFIgpCIIggCkL/////D4N+IAZ8fCEGIBEgGiATIBCFIgpCIIggCkL/////D4N+fHwhCgsgAykDQyACKQM4hSIQQv////8PgyIRIAMpAzsgBYUiBUIgiCISfiINIBBCIIgiECAFQv////8PgyIOfnwiBUIgiCAQIBJ+fEKAgICAEEIAIAUgDVQbfCAFQiCGIgUgESAOfnwiECAFVK18IBCFIAMpAzMgCYUiBUL/////D4MiCSADKQMrIAiFIghCIIgiEH4iESAFQiCIIhIgCEL/////D4MiCH58IgVCIIggEiAQfnxCgICAgBBCACAFIBFUG3wgBUIghiIFIAkgCH58IgkgBVStfCAJhSADKQMjIAeFIgVC/////w+DIgkgAykDGyAGhSIHQiCIIgh+IgYgBUIgiCIQIAdC/////w+DIgd+fCIFQiCIIBAgCH58QoCAgIAQQgAgBSAGVBt8IAVCIIYiBSAJIAd+fCIJIAVUrXwgCYUgAykDEyALhSIFQv////8PgyIJIAMpAwsgCoUiB0IgiCILfiIIIAVCIIgiBiAHQv////8PgyIHfnwiBUIgiCAGIAt+fEKAgICAEEIAIAUgCFQbfCAFQiCGIgUgCSAHfnwiCSAFVK18IAmFIARCh5Wvr5i23puef358fHx8IgRCJYggBIVC+fPd8ZnymasWfiIEQiCIIASFIQQLQQAgBEI4hiAEQoD+A4NCKIaEIARCgID8B4NCGIYgBEKAgID4D4NCCIaEhCAEQgiIQoCAgPgPgyAEQhiIQoCA/AeDhCAEQiiIQoD+A4MgBEI4iISEhDcDgIIEIAEkAAsGAEGAggULAgALC80BAQBBgIAEC8QBuP5sOSOkS758AYEs9yGtHN7UbemDkJfbckCkpLezZx/LeeZOzMDleIJa0H3M/3IhuAhGdPdDJI7gNZDmgTomTDwoUruRwwDLiNBlixtTLqNxZEiXog35TjgZ70ap3qzYqPp2P+OcND/53LvHxwtPHYpR4EvNtFkxyJ9+ydl4c2TqxayDNNPrw8WBoP/6E2PrFw3dUbfw2knTFlUmKdRonisWvlh9R6H8j/i40XrQMc5FyzqPlRYEKK/X+8q7S0B+QAIAAA==";
  var hash$6 = "8d0b08d4";
  var wasmJson$6 = {
    name: name$6,
    data: data$6,
    hash: hash$6
  };
  var mutex$4 = new Mutex();
  var seedBuffer$1 = new Uint8Array(8);
  function validateSeed$1(seed) {
    if (!Number.isInteger(seed) || seed < 0 || seed > 4294967295) {
      return new Error("Seed must be given as two valid 32-bit long unsigned integers (lo + high).");
    }
    return null;
  }
  function writeSeed$1(arr, low, high) {
    const buffer = new DataView(arr);
    buffer.setUint32(0, low, true);
    buffer.setUint32(4, high, true);
  }
  function createXXHash3(seedLow = 0, seedHigh = 0) {
    if (validateSeed$1(seedLow)) {
      return Promise.reject(validateSeed$1(seedLow));
    }
    if (validateSeed$1(seedHigh)) {
      return Promise.reject(validateSeed$1(seedHigh));
    }
    return WASMInterface(wasmJson$6, 8).then((wasm) => {
      const instanceBuffer = new Uint8Array(8);
      writeSeed$1(instanceBuffer.buffer, seedLow, seedHigh);
      wasm.writeMemory(instanceBuffer);
      wasm.init();
      const obj = {
        init: () => {
          wasm.writeMemory(instanceBuffer);
          wasm.init();
          return obj;
        },
        update: (data) => {
          wasm.update(data);
          return obj;
        },
        // biome-ignore lint/suspicious/noExplicitAny: Conflict with IHasher type
        digest: (outputType) => wasm.digest(outputType),
        save: () => wasm.save(),
        load: (data) => {
          wasm.load(data);
          return obj;
        },
        blockSize: 512,
        digestSize: 8
      };
      return obj;
    });
  }
  var mutex$3 = new Mutex();
  var seedBuffer = new Uint8Array(8);
  var mutex$2 = new Mutex();
  var mutex$1 = new Mutex();
  var mutex = new Mutex();

  // src/xxh3.ts
  var hasher = null;
  async function initXxh3() {
    if (hasher === null) hasher = await createXXHash3(0, 0);
  }
  function xxh3(data) {
    if (hasher === null) throw new Error("initXxh3() must be awaited before xxh3()");
    hasher.init();
    hasher.update(data);
    return BigInt("0x" + hasher.digest("hex"));
  }

  // src/qem/format.ts
  var ITEMSIZE_TO_DTYPE = { 1: "uint8", 2: "uint16", 4: "uint32" };
  var SECTION_ALIGN = 64n;
  var PAYLOAD_ALIGN = 4096n;
  var BLOCK_ALIGN = 16;
  var FOOTER_ALIGN = 64n;
  var MAGIC = [137, 81, 69, 77, 13, 10, 26, 10];
  var SUPPORTED_VERSIONS = { 1: 0, 2: 0 };
  var VERSION_MINOR = 0;
  var VERSION_2 = 2;
  var HEADER_SIZE = 256;
  var HEADER_CHECKSUM_OFFSET = 248;
  var SECTION_TABLE_OFFSET = 64;
  var SECTION_ENTRY_SIZE = 24;
  var MAX_DETECTOR_SIDE = 65535;
  var MAX_FRAME_PIXELS = 1 << 28;
  var MAX_FRAMES = 1n << 40n;
  var MAX_BLOCK_PIXELS = 1n << 31n;
  var SECTION_METADATA = 0;
  var SECTION_PIXEL_MASK = 1;
  var SECTION_MODEL = 2;
  var SECTION_BLOCK_INDEX = 3;
  var SECTION_BLOCK_CHECKSUMS = 4;
  var SECTION_PAYLOAD = 5;
  var SECTION_SPATIAL_INDEX = 6;
  var N_SECTIONS = 7;
  var SECTION_NAMES = [
    "METADATA",
    "PIXEL_MASK",
    "MODEL",
    "BLOCK_INDEX",
    "BLOCK_CHECKSUMS",
    "PAYLOAD",
    "SPATIAL_INDEX"
  ];
  var MAX_METADATA_BYTES = 16n << 20n;
  var GROUP_PIXELS = 8;
  var MAX_CLASSES = 4;
  var ALPHABET = 256;
  var ESCAPE_SYMBOL = 255;
  var ESCAPE_MIN_VALUE = 256;
  var MODEL_HEADER_SIZE = 16;
  var BLOCK_ENTRY_SIZE = 48;
  var MODE_RAW = 1;
  var MODE_RANS = 2;
  var LANES = 32;
  var LANE_STATES_SIZE = 4 * LANES;
  var PROB_BITS = 12;
  var PROB_SCALE = 1 << PROB_BITS;
  var RANS_L = 1 << 16;
  var STATES_2 = 128;
  var STATES_2_SIZE = 4 * STATES_2;
  var QUAD_PIXELS = 4;
  var FOOTER_MAGIC = [81, 69, 77, 45, 69, 78, 68, 26];
  var FOOTER_SIZE = 32;
  var U64 = (1n << 64n) - 1n;
  function alignUp(value, alignment) {
    return (value + alignment - 1n) / alignment * alignment;
  }
  function alignUpNumber(value, alignment) {
    return Math.ceil(value / alignment) * alignment;
  }
  function nBands(detR, bandRows) {
    return bandRows ? Math.ceil(detR / bandRows) : 1;
  }
  function bandGeometry(detR, bandRows) {
    const bands = nBands(detR, bandRows);
    const per = bandRows || detR;
    const first = Array.from({ length: bands }, (_, k) => k * per);
    return { first, rows: first.map((f) => Math.min(per, detR - f)) };
  }
  function bandQuads(detR, detC, bandRows) {
    const { rows } = bandGeometry(detR, bandRows);
    const out = [0];
    for (const r of rows) out.push(out[out.length - 1] + Math.ceil(r * detC / QUAD_PIXELS));
    return out;
  }
  function framePixels(header) {
    return header.detectorShape[0] * header.detectorShape[1];
  }
  function equalBytes(data, offset, expected) {
    return expected.every((b, k) => data[offset + k] === b);
  }
  function parseHeader(data, path) {
    if (data.length < HEADER_SIZE + FOOTER_SIZE) {
      throw new QemFormatError(path, `file too short to be .qem (${data.length} bytes)`, {
        section: "header"
      });
    }
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const major = view.getUint16(8, true);
    const minor = view.getUint16(10, true);
    const headerSize = view.getUint32(12, true);
    const fileSize = view.getBigUint64(16, true);
    const nFrames = view.getBigUint64(24, true);
    const scanR = view.getUint32(32, true);
    const scanC = view.getUint32(36, true);
    const detR = view.getUint32(40, true);
    const detC = view.getUint32(44, true);
    const stored = view.getUint8(48);
    const source = view.getUint8(49);
    const reserved0 = view.getUint16(50, true);
    const blockFrames = view.getUint32(52, true);
    const nBlocks = view.getUint32(56, true);
    const reserved1 = view.getUint32(60, true);
    if (!equalBytes(data, 0, MAGIC)) {
      throw new QemFormatError(path, "not a .qem file (bad magic)", { section: "header" });
    }
    if (!(major in SUPPORTED_VERSIONS)) {
      const known = Object.entries(SUPPORTED_VERSIONS).map(([a, b]) => `${a}.x (up to ${a}.${b})`).join(", ");
      throw new QemVersionError(
        path,
        `unsupported .qem major version ${major}.${minor}; this reader supports ${known}`,
        { section: "header" }
      );
    }
    const storedChecksum = view.getBigUint64(HEADER_CHECKSUM_OFFSET, true);
    if (xxh3(data.subarray(0, HEADER_CHECKSUM_OFFSET)) !== storedChecksum) {
      throw new QemFormatError(path, "header checksum mismatch", { section: "header" });
    }
    const bad = (detail) => new QemFormatError(path, detail, { section: "header" });
    if (headerSize !== HEADER_SIZE) throw bad(`header_size ${headerSize} != ${HEADER_SIZE}`);
    const tail = data.subarray(SECTION_TABLE_OFFSET + N_SECTIONS * SECTION_ENTRY_SIZE, HEADER_CHECKSUM_OFFSET);
    const knownMinor = minor <= SUPPORTED_VERSIONS[major];
    const bandRows = major === VERSION_2 ? reserved1 : 0;
    if (knownMinor && (reserved0 || reserved1 && major !== VERSION_2 || tail.some((b) => b !== 0))) {
      throw bad("reserved header field is not zero");
    }
    if (!(stored in ITEMSIZE_TO_DTYPE) || !(source in ITEMSIZE_TO_DTYPE)) {
      throw bad(`invalid item sizes stored=${stored} source=${source}`);
    }
    if (!(1 <= detR && detR <= MAX_DETECTOR_SIDE && 1 <= detC && detC <= MAX_DETECTOR_SIDE)) {
      throw bad(`detector shape ${detR}x${detC} out of range`);
    }
    if (detR * detC > MAX_FRAME_PIXELS) {
      throw bad(`${detR * detC} pixels per frame exceeds ${MAX_FRAME_PIXELS}`);
    }
    if (scanR < 1 || scanC < 1 || nFrames !== BigInt(scanR) * BigInt(scanC) || nFrames > MAX_FRAMES) {
      throw bad(`frame count ${nFrames} inconsistent with scan ${scanR}x${scanC}`);
    }
    if (blockFrames < 1 || BigInt(blockFrames) * BigInt(detR * detC) > MAX_BLOCK_PIXELS) {
      throw bad(`block_frames ${blockFrames} out of range`);
    }
    if (major === VERSION_2 && !(1 <= bandRows && bandRows <= detR)) {
      throw bad(`band_rows ${bandRows} out of range 1..${detR}`);
    }
    const bands = nBands(detR, bandRows);
    const frameBlocks = (nFrames + BigInt(blockFrames) - 1n) / BigInt(blockFrames);
    if (BigInt(nBlocks) !== frameBlocks * BigInt(bands)) {
      throw bad(
        `n_blocks ${nBlocks} != ceil(${nFrames} / ${blockFrames})` + (major === VERSION_2 ? ` * ${bands} bands` : "")
      );
    }
    const sections = [];
    for (let i = 0; i < N_SECTIONS; i++) {
      const at = SECTION_TABLE_OFFSET + SECTION_ENTRY_SIZE * i;
      sections.push({
        offset: view.getBigUint64(at, true),
        length: view.getBigUint64(at + 8, true),
        xxh3: view.getBigUint64(at + 16, true)
      });
    }
    return {
      versionMajor: major,
      versionMinor: minor,
      fileSize,
      nFrames: Number(nFrames),
      scanShape: [scanR, scanC],
      detectorShape: [detR, detC],
      storedItemsize: stored,
      sourceItemsize: source,
      blockFrames,
      nBlocks,
      sections,
      headerXxh3: storedChecksum,
      bandRows
    };
  }
  function parseFooter(data, header, path) {
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    if (!equalBytes(data, 0, FOOTER_MAGIC)) {
      throw new QemFormatError(path, "bad footer magic (truncated or incomplete file?)", {
        section: "footer"
      });
    }
    if (xxh3(data.subarray(0, 24)) !== view.getBigUint64(24, true)) {
      throw new QemFormatError(path, "footer checksum mismatch", { section: "footer" });
    }
    if (view.getBigUint64(8, true) !== header.fileSize || view.getBigUint64(16, true) !== header.headerXxh3) {
      throw new QemFormatError(path, "footer does not match the header", { section: "footer" });
    }
  }
  function expectedSectionLayout(lengths) {
    const offsets = [];
    let end = BigInt(HEADER_SIZE);
    lengths.forEach((length, id) => {
      if (id === SECTION_PAYLOAD || length > 0n) {
        const start = alignUp(end, id === SECTION_PAYLOAD ? PAYLOAD_ALIGN : SECTION_ALIGN);
        offsets.push(start);
        end = start + length;
      } else offsets.push(0n);
    });
    return { offsets, footer: alignUp(end, FOOTER_ALIGN) };
  }
  var REQUIRED_METADATA_KEYS = [
    "scan_shape",
    "detector_shape",
    "n_frames",
    "dtype",
    "source_dtype",
    "pixel_mask",
    "calibration",
    "source",
    "encoder",
    "detector"
  ];
  var SOURCE_METADATA_KEYS = ["kind", "files", "identity", "sha256"];
  function isObject(value) {
    return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof JsonFloat);
  }
  function parseMetadata(data, header, path) {
    const bad = (detail) => new QemFormatError(path, detail, { section: "METADATA" });
    let metadata;
    try {
      metadata = parseJson(new TextDecoder("utf-8", { fatal: true }).decode(data));
    } catch (error) {
      throw bad(`invalid JSON: ${error.message}`);
    }
    if (!isObject(metadata)) throw bad("not a JSON object");
    const missing = REQUIRED_METADATA_KEYS.filter((key) => !(key in metadata));
    if (missing.length) throw bad(`missing keys ${pyRepr(missing)}`);
    const checks = [
      ["scan_shape", [...header.scanShape]],
      ["detector_shape", [...header.detectorShape]],
      ["n_frames", header.nFrames],
      ["dtype", ITEMSIZE_TO_DTYPE[header.storedItemsize]],
      ["source_dtype", ITEMSIZE_TO_DTYPE[header.sourceItemsize]]
    ];
    for (const [key, expected] of checks) {
      const value = metadata[key];
      let same;
      if (Array.isArray(expected)) {
        same = Array.isArray(value) && value.length === expected.length && value.every((v, k) => isJsonInt(v) && v === expected[k]);
      } else if (typeof expected === "number") {
        same = isJsonInt(value) && value === expected;
      } else same = typeof value === "string" && value === expected;
      if (!same) throw bad(`${key} ${pyRepr(value)} disagrees with the header (${pyRepr(expected)})`);
    }
    const mask = metadata["pixel_mask"];
    if (!isObject(mask)) throw bad("pixel_mask must be an object");
    const encoding = header.sections[SECTION_PIXEL_MASK].length > 0n ? "section" : "all-zero";
    if (mask["encoding"] !== encoding) throw bad(`pixel_mask.encoding must be ${pyRepr(encoding)}`);
    if (mask["dtype"] !== "uint32" || !isJsonInt(mask["n_masked"])) {
      throw bad("pixel_mask must have dtype 'uint32' and an integer n_masked");
    }
    for (const key of ["calibration", "source", "encoder", "detector"]) {
      if (!isObject(metadata[key])) throw bad(`${key} must be an object`);
    }
    const source = metadata["source"];
    const missingSource = SOURCE_METADATA_KEYS.filter((key) => !(key in source));
    if (missingSource.length) throw bad(`source is missing keys ${pyRepr(missingSource)}`);
    if (typeof source["kind"] !== "string") throw bad("source.kind must be a string");
    const files = source["files"];
    if (!Array.isArray(files) || !files.every((f) => typeof f === "string")) {
      throw bad("source.files must be a list of strings");
    }
    for (const key of ["identity", "sha256"]) {
      if (source[key] !== null && !isObject(source[key])) throw bad(`source.${key} must be an object or null`);
    }
    return metadata;
  }
  function parseModel(data, header, path) {
    const bad = (detail) => new QemFormatError(path, detail, { section: "MODEL" });
    if (data.length < MODEL_HEADER_SIZE) throw bad("section too short");
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const nClasses = view.getUint32(0, true);
    const nContexts = view.getUint32(4, true);
    const nGroup = view.getUint32(8, true);
    const reserved = view.getUint32(12, true);
    const version2 = header.versionMajor === VERSION_2;
    const perClass = version2 ? 1 : 2;
    if (!(1 <= nClasses && nClasses <= MAX_CLASSES) || nContexts !== perClass * nClasses) {
      throw bad(`invalid class/context counts ${nClasses}/${nContexts}`);
    }
    const [detR, detC] = header.detectorShape;
    const expectedGroups = version2 ? bandQuads(detR, detC, header.bandRows).at(-1) : Math.ceil(detR * detC / GROUP_PIXELS);
    const what = version2 ? "n_quads" : "n_groups";
    if (nGroup !== expectedGroups || reserved) {
      throw bad(`${what} ${nGroup} != ${expectedGroups} or reserved field set`);
    }
    const length = MODEL_HEADER_SIZE + alignUpNumber(nGroup, 4) + 2 * ALPHABET * nContexts;
    if (data.length !== length) throw bad(`length ${data.length} != ${length}`);
    const groupClass = data.slice(MODEL_HEADER_SIZE, MODEL_HEADER_SIZE + nGroup);
    if (data.subarray(MODEL_HEADER_SIZE + nGroup, MODEL_HEADER_SIZE + alignUpNumber(nGroup, 4)).some((b) => b)) {
      throw bad("class map padding is not zero");
    }
    if (groupClass.some((c) => c >= nClasses)) throw bad("class map value out of range");
    const start = MODEL_HEADER_SIZE + alignUpNumber(nGroup, 4);
    const freq = new Uint16Array(nContexts * ALPHABET);
    for (let k = 0; k < freq.length; k++) freq[k] = view.getUint16(start + 2 * k, true);
    for (let c = 0; c < nContexts; c++) {
      let sum = 0;
      for (let s = 0; s < ALPHABET; s++) sum += freq[c * ALPHABET + s];
      if (sum !== PROB_SCALE) throw bad(`frequency table of context ${c} sums to ${sum}, not 4096`);
    }
    if (perClass === 1) {
      for (let c = 0; c < nContexts; c++) {
        if (freq[c * ALPHABET + ESCAPE_SYMBOL] === 0) {
          throw bad(`frequency table of context ${c} gives ESCAPE no slot (2.0 needs one)`);
        }
      }
    }
    const cum = new Uint32Array(nContexts * (ALPHABET + 1));
    const slotSymbol = new Uint8Array(nContexts * PROB_SCALE);
    for (let c = 0; c < nContexts; c++) {
      for (let s = 0; s < ALPHABET; s++) {
        const f = freq[c * ALPHABET + s];
        const low = cum[c * 257 + s];
        cum[c * 257 + s + 1] = low + f;
        slotSymbol.fill(s, c * PROB_SCALE + low, c * PROB_SCALE + low + f);
      }
    }
    return { nClasses, nContexts, groupClass, freq, cum, slotSymbol };
  }
  function parseBlockIndex(data, header, path) {
    const nBlocks = header.nBlocks;
    if (data.length !== BLOCK_ENTRY_SIZE * nBlocks) {
      throw new QemFormatError(path, `length ${data.length} != 48 * ${nBlocks}`, { section: "BLOCK_INDEX" });
    }
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const payload = header.sections[SECTION_PAYLOAD];
    const w = BigInt(header.storedItemsize);
    const version2 = header.versionMajor === VERSION_2;
    const [detR, detC] = header.detectorShape;
    const bands = nBands(detR, header.bandRows);
    const { rows: bandRows } = bandGeometry(detR, header.bandRows);
    const groups = BigInt(Math.ceil(detR * detC / GROUP_PIXELS));
    const states = BigInt(version2 ? STATES_2_SIZE : LANE_STATES_SIZE);
    let previousEnd = payload.offset;
    const entries = [];
    for (let e = 0; e < nBlocks; e++) {
      const at = BLOCK_ENTRY_SIZE * e;
      const frameStartField = view.getBigUint64(at, true);
      const nFramesField = view.getUint32(at + 8, true);
      const mode = view.getUint32(at + 12, true);
      const offset = view.getBigUint64(at + 16, true);
      const length = view.getBigUint64(at + 24, true);
      const nWords = BigInt(view.getUint32(at + 32, true));
      const nNonzero = BigInt(view.getUint32(at + 36, true));
      const nEscapes = BigInt(view.getUint32(at + 40, true));
      const bandField = view.getUint32(at + 44, true);
      const block = Math.floor(e / bands);
      const band = e % bands;
      const frameStart = BigInt(block) * BigInt(header.blockFrames);
      const nFrames = BigInt(Math.min(header.blockFrames, header.nFrames - Number(frameStart)));
      const unitPixels = BigInt(version2 ? bandRows[band] * detC : detR * detC);
      const pixels = nFrames * unitPixels;
      const isRans = mode === MODE_RANS;
      const expectedLength = mode === MODE_RAW ? pixels * w : isRans ? (states + 2n * nWords + 3n) / 4n * 4n + nEscapes * w : 0n;
      const problems = [
        [frameStartField !== frameStart, "frame_start"],
        [BigInt(nFramesField) !== nFrames, "frame count"],
        [mode > MODE_RANS, "unknown mode"],
        [bandField !== (version2 ? band : 0), version2 ? "band" : "reserved field"],
        [!isRans && (nWords | nNonzero | nEscapes) !== 0n, "counts on a non-RANS block"]
      ];
      if (version2) {
        problems.push(
          [nNonzero !== 0n, "n_nonzero must be 0 in 2.0"],
          [isRans && nEscapes > pixels, "n_escapes exceeds pixels"],
          [isRans && nWords > pixels, "too many words"]
        );
      } else {
        problems.push(
          [isRans && nNonzero > pixels, "n_nonzero exceeds pixels"],
          [isRans && nEscapes > nNonzero, "n_escapes exceeds n_nonzero"],
          [isRans && nEscapes > 0n && w === 1n, "escapes with uint8 data"],
          [isRans && nWords > nFrames * groups + nNonzero, "too many words"]
        );
      }
      problems.push([length !== expectedLength, "length inconsistent with mode and counts"]);
      const end = offset + length & U64;
      const paddedEnd = (end + 15n & U64) / 16n * 16n;
      problems.push([offset !== previousEnd || offset > header.fileSize, "offset"]);
      previousEnd = paddedEnd;
      const failed = problems.find(([bad]) => bad);
      if (failed) {
        throw new QemFormatError(path, `block index entry invalid: ${failed[1]}`, {
          section: "BLOCK_INDEX",
          block: e
        });
      }
      entries.push({
        frameStart: Number(frameStart),
        nFrames: Number(nFrames),
        mode,
        offset: Number(offset),
        length: Number(length),
        nWords: Number(nWords),
        nNonzero: Number(nNonzero),
        nEscapes: Number(nEscapes),
        band: bandField
      });
    }
    const total = nBlocks ? previousEnd - payload.offset : 0n;
    if (total !== payload.length) {
      throw new QemFormatError(path, `PAYLOAD length ${payload.length} != block extents ${total}`, {
        section: "PAYLOAD"
      });
    }
    return entries;
  }
  function blockExtentEnd(offset, length) {
    return alignUpNumber(offset + length, BLOCK_ALIGN);
  }

  // src/qem/rans.ts
  var OK = 0;
  var ERR_STATE_RANGE = 1;
  var ERR_WORDS_EXHAUSTED = 2;
  var ERR_MASK_PADDING = 3;
  var ERR_NONZERO_COUNT = 4;
  var ERR_ESCAPES_EXHAUSTED = 5;
  var ERR_ESCAPE_VALUE = 6;
  var ERR_UNUSED_ESCAPES = 7;
  var ERR_UNUSED_WORDS = 8;
  var ERR_FINAL_STATE = 9;
  var ERR_PADDING = 10;
  var ERR_MODE = 11;
  var STATUS_MESSAGES = {
    [ERR_STATE_RANGE]: "initial lane state out of [2^16, 2^32)",
    [ERR_WORDS_EXHAUSTED]: "word stream exhausted",
    [ERR_MASK_PADDING]: "mask padding bit set",
    [ERR_NONZERO_COUNT]: "nonzero count differs from the block index",
    [ERR_ESCAPES_EXHAUSTED]: "escape array exhausted",
    [ERR_ESCAPE_VALUE]: "escaped value below 256",
    [ERR_UNUSED_ESCAPES]: "unused escapes",
    [ERR_UNUSED_WORDS]: "unused words",
    [ERR_FINAL_STATE]: "final lane state is not 2^16",
    [ERR_PADDING]: "padding between words and escapes is not zero",
    [ERR_MODE]: "unknown block mode"
  };
  function readUint(buffer, position, nbytes) {
    let value = 0;
    for (let k = nbytes - 1; k >= 0; k--) value = value * 256 + buffer[position + k];
    return value;
  }
  function decodeRansBlock1(buffer, start, nFrames, nWords, nNonzero, nEscapes, itemsize, framePixels2, model, out, row0) {
    const groups = model.groupClass.length;
    const { freq, cum, slotSymbol } = model;
    const x = new Float64Array(LANES);
    for (let lane = 0; lane < LANES; lane++) {
      x[lane] = readUint(buffer, start + 4 * lane, 4);
      if (x[lane] < RANS_L) return ERR_STATE_RANGE;
    }
    let position = start + LANE_STATES_SIZE;
    const wordsEnd = position + 2 * nWords;
    const decode = (lane, context) => {
      let state2 = x[lane];
      const slot = state2 % PROB_SCALE;
      const s = slotSymbol[context * PROB_SCALE + slot];
      state2 = freq[context * 256 + s] * Math.floor(state2 / PROB_SCALE) + slot - cum[context * 257 + s];
      if (state2 < RANS_L) {
        const at = position < wordsEnd ? position : start;
        state2 = state2 * 65536 + (buffer[at] | buffer[at + 1] << 8);
        position += 2;
      }
      x[lane] = state2;
      return s;
    };
    const tailBits = framePixels2 % 8;
    const masks = new Uint8Array(nFrames * groups);
    let a = 0;
    for (let t = 0; t < nFrames; t++) {
      for (let j = 0; j < groups; j++) {
        masks[a] = decode(a & 31, 2 * model.groupClass[j]);
        a++;
      }
      if (tailBits && masks[a - 1] >> tailBits !== 0) return ERR_MASK_PADDING;
    }
    if (position > wordsEnd) return ERR_WORDS_EXHAUSTED;
    let escapePosition = start + Math.ceil((LANE_STATES_SIZE + 2 * nWords) / 4) * 4;
    for (let k = wordsEnd; k < escapePosition; k++) if (buffer[k] !== 0) return ERR_PADDING;
    const escapeEnd = escapePosition + nEscapes * itemsize;
    let v = 0;
    a = 0;
    for (let t = 0; t < nFrames; t++) {
      const base0 = (row0 + t) * framePixels2;
      out.fill(0, base0, base0 + framePixels2);
      for (let j = 0; j < groups; j++) {
        const m = masks[a++];
        if (m === 0) continue;
        const context = 2 * model.groupClass[j] + 1;
        for (let i = 0; i < 8; i++) {
          if (!(m >> i & 1)) continue;
          const s = decode(v & 31, context);
          v++;
          if (s !== ESCAPE_SYMBOL) out[base0 + 8 * j + i] = s + 1;
          else {
            if (escapePosition >= escapeEnd) return ERR_ESCAPES_EXHAUSTED;
            const value = readUint(buffer, escapePosition, itemsize);
            escapePosition += itemsize;
            if (value < ESCAPE_MIN_VALUE) return ERR_ESCAPE_VALUE;
            out[base0 + 8 * j + i] = value;
          }
        }
      }
    }
    if (v !== nNonzero) return ERR_NONZERO_COUNT;
    if (position > wordsEnd) return ERR_WORDS_EXHAUSTED;
    if (escapePosition !== escapeEnd) return ERR_UNUSED_ESCAPES;
    if (position !== wordsEnd) return ERR_UNUSED_WORDS;
    for (let lane = 0; lane < LANES; lane++) if (x[lane] !== RANS_L) return ERR_FINAL_STATE;
    return OK;
  }
  function decodeRansBlock2(buffer, start, nFrames, nWords, nEscapes, itemsize, bandPixels, quad0, model, out, row0, pixel0, framePixels2) {
    const { freq, cum, slotSymbol, groupClass } = model;
    const x = new Float64Array(STATES_2);
    for (let i = 0; i < STATES_2; i++) {
      x[i] = readUint(buffer, start + 4 * i, 4);
      if (x[i] < RANS_L) return ERR_STATE_RANGE;
    }
    let position = start + STATES_2_SIZE;
    const wordsEnd = position + 2 * nWords;
    let escapePosition = start + Math.ceil((STATES_2_SIZE + 2 * nWords) / 4) * 4;
    for (let k = wordsEnd; k < escapePosition; k++) if (buffer[k] !== 0) return ERR_PADDING;
    const escapeEnd = escapePosition + nEscapes * itemsize;
    const symbols = new Int32Array(STATES_2);
    const contexts = new Int32Array(STATES_2);
    for (let t = 0; t < nFrames; t++) {
      const frame = (row0 + t) * framePixels2 + pixel0;
      for (let j0 = 0; j0 < bandPixels; j0 += STATES_2) {
        const count = Math.min(STATES_2, bandPixels - j0);
        let escapes = 0;
        for (let i = 0; i < count; i++) {
          const c = groupClass[quad0 + (j0 + i >> 2)];
          let state2 = x[i];
          const slot = state2 % PROB_SCALE;
          const s = slotSymbol[c * PROB_SCALE + slot];
          state2 = freq[c * 256 + s] * Math.floor(state2 / PROB_SCALE) + slot - cum[c * 257 + s];
          if (state2 < RANS_L) {
            if (position >= wordsEnd) return ERR_WORDS_EXHAUSTED;
            state2 = state2 * 65536 + (buffer[position] | buffer[position + 1] << 8);
            position += 2;
          }
          x[i] = state2;
          symbols[i] = s;
          contexts[i] = c;
          if (s === ESCAPE_SYMBOL) escapes++;
        }
        if (escapePosition + escapes * itemsize > escapeEnd) return ERR_ESCAPES_EXHAUSTED;
        for (let i = 0; i < count; i++) {
          let s = symbols[i];
          if (s === ESCAPE_SYMBOL) {
            const value = readUint(buffer, escapePosition, itemsize);
            escapePosition += itemsize;
            if (value < ESCAPE_SYMBOL && freq[contexts[i] * 256 + value] > 0) return ERR_ESCAPE_VALUE;
            s = value;
          }
          out[frame + j0 + i] = s;
        }
      }
    }
    if (escapePosition !== escapeEnd) return ERR_UNUSED_ESCAPES;
    if (position !== wordsEnd) return ERR_UNUSED_WORDS;
    for (let i = 0; i < STATES_2; i++) if (x[i] !== RANS_L) return ERR_FINAL_STATE;
    return OK;
  }
  function readRaw(buffer, start, nFrames, unitPixels, itemsize, out, row0, pixel0, framePixels2) {
    let position = start;
    for (let t = 0; t < nFrames; t++) {
      const frame = (row0 + t) * framePixels2 + pixel0;
      for (let j = 0; j < unitPixels; j++) {
        out[frame + j] = readUint(buffer, position, itemsize);
        position += itemsize;
      }
    }
  }

  // src/qem/reader.ts
  var QemFile = class {
    /** Validate `bytes` (the whole file) named `path` in messages. `initXxh3()` must have run. */
    constructor(bytes, path, verify = true) {
      this.verify = verify;
      this.path = path;
      this.bytes = bytes;
      const size = bytes.length;
      if (size < HEADER_SIZE + FOOTER_SIZE) {
        throw new QemFormatError(path, `file too short to be .qem (${size} bytes)`, { section: "header" });
      }
      const header = parseHeader(bytes.subarray(0, HEADER_SIZE + FOOTER_SIZE), path);
      if (header.fileSize !== BigInt(size)) {
        throw new QemFormatError(path, `file is ${size} bytes but the header says ${header.fileSize} (truncated?)`, {
          section: "header"
        });
      }
      parseFooter(bytes.subarray(size - FOOTER_SIZE), header, path);
      this.header = header;
      this.checkSections();
      this.metadata = parseMetadata(this.sectionBytes(SECTION_METADATA), header, path);
      const [detR, detC] = header.detectorShape;
      const pixels = detR * detC;
      if (header.sections[SECTION_PIXEL_MASK].length > 0n) {
        const raw = this.sectionBytes(SECTION_PIXEL_MASK);
        const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
        this.pixelMask = new Uint32Array(pixels);
        for (let p = 0; p < pixels; p++) this.pixelMask[p] = view.getUint32(4 * p, true);
        if (!this.pixelMask.some((v) => v !== 0)) {
          throw new QemFormatError(path, "present pixel mask is all zero", { section: "PIXEL_MASK" });
        }
      } else this.pixelMask = new Uint32Array(pixels);
      const declared = this.metadata["pixel_mask"];
      const nMasked = this.pixelMask.reduce((n, v) => n + (v !== 0 ? 1 : 0), 0);
      if (declared["n_masked"] !== nMasked) {
        throw new QemFormatError(
          path,
          `metadata pixel_mask ${pyRepr(declared)} disagrees with the mask (${nMasked} masked)`,
          { section: "METADATA" }
        );
      }
      this.model = parseModel(this.sectionBytes(SECTION_MODEL), header, path);
      this.blockIndex = parseBlockIndex(this.sectionBytes(SECTION_BLOCK_INDEX), header, path);
      const checks = this.sectionBytes(SECTION_BLOCK_CHECKSUMS);
      const checkView = new DataView(checks.buffer, checks.byteOffset, checks.byteLength);
      this.blockChecksums = new BigUint64Array(header.nBlocks);
      for (let b = 0; b < header.nBlocks; b++) this.blockChecksums[b] = checkView.getBigUint64(8 * b, true);
      this.version2 = header.versionMajor === VERSION_2;
      this.nBands = nBands(detR, header.bandRows);
      const geometry = bandGeometry(detR, header.bandRows);
      this.bandFirstRow = geometry.first;
      this.bandRows = geometry.rows;
      this.bandQuad0 = bandQuads(detR, detC, header.bandRows);
      this.verified = new Uint8Array(header.nBlocks);
    }
    verify;
    path;
    bytes;
    header;
    metadata;
    pixelMask;
    model;
    blockIndex;
    blockChecksums;
    version2;
    nBands;
    bandFirstRow;
    bandRows;
    bandQuad0;
    verified;
    sectionError(id, detail) {
      const name = SECTION_NAMES[id];
      return new QemFormatError(this.path, `section ${name}: ${detail}`, { section: name });
    }
    sectionBytes(id) {
      const s = this.header.sections[id];
      return this.bytes.subarray(Number(s.offset), Number(s.offset + s.length));
    }
    checkSections() {
      const header = this.header;
      const lengths = header.sections.map((s) => s.length);
      const nBlocks = BigInt(header.nBlocks);
      const rules = [
        [SECTION_METADATA, 1n, MAX_METADATA_BYTES],
        [SECTION_BLOCK_INDEX, 48n * nBlocks, 48n * nBlocks],
        [SECTION_BLOCK_CHECKSUMS, 8n * nBlocks, 8n * nBlocks]
      ];
      for (const [id, low, high] of rules) {
        if (!(low <= lengths[id] && lengths[id] <= high)) throw this.sectionError(id, `length ${lengths[id]} invalid`);
      }
      const maskLength = lengths[SECTION_PIXEL_MASK];
      if (maskLength !== 0n && maskLength !== 4n * BigInt(framePixels(header))) {
        throw this.sectionError(SECTION_PIXEL_MASK, `length ${maskLength} invalid`);
      }
      if (lengths[SECTION_MODEL] < BigInt(MODEL_HEADER_SIZE)) throw this.sectionError(SECTION_MODEL, "too short");
      if (lengths[SECTION_SPATIAL_INDEX] && header.versionMinor <= VERSION_MINOR) {
        throw this.sectionError(SECTION_SPATIAL_INDEX, "must be absent in 1.0");
      }
      if (header.sections[SECTION_PAYLOAD].xxh3 !== 0n) {
        throw this.sectionError(SECTION_PAYLOAD, "checksum field must be 0");
      }
      if (lengths.some((length) => length > header.fileSize)) {
        throw new QemFormatError(this.path, "section longer than the file", { section: "header" });
      }
      const { offsets, footer } = expectedSectionLayout(lengths);
      header.sections.forEach((s, id) => {
        if (s.offset !== offsets[id] || s.length === 0n && id !== SECTION_PAYLOAD && s.xxh3) {
          throw this.sectionError(id, "offset is not the canonical layout");
        }
      });
      if (footer + BigInt(FOOTER_SIZE) !== header.fileSize) {
        throw new QemFormatError(this.path, "file size disagrees with the section layout", { section: "footer" });
      }
      let position = HEADER_SIZE;
      const spans = [];
      header.sections.forEach((s, id) => {
        if (s.length > 0n || id === SECTION_PAYLOAD) spans.push([Number(s.offset), Number(s.offset + s.length), id]);
      });
      spans.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
      spans.push([Number(footer), Number(footer), -1]);
      for (const [start, end, id] of spans) {
        if (start > position && this.bytes.subarray(position, start).some((b) => b !== 0)) {
          const where = id >= 0 ? SECTION_NAMES[id] : "footer";
          throw new QemFormatError(this.path, `nonzero padding before ${where}`, { section: where });
        }
        position = Math.max(position, end);
      }
      header.sections.forEach((s, id) => {
        if (s.length > 0n && id !== SECTION_PAYLOAD && xxh3(this.sectionBytes(id)) !== s.xxh3) {
          throw this.sectionError(id, "checksum mismatch");
        }
      });
    }
    get scanShape() {
      return this.header.scanShape;
    }
    get detectorShape() {
      return this.header.detectorShape;
    }
    get nFrames() {
      return this.header.nFrames;
    }
    get framePixels() {
      return framePixels(this.header);
    }
    get dtype() {
      return ITEMSIZE_TO_DTYPE[this.header.storedItemsize];
    }
    get nFrameBlocks() {
      return Math.ceil(this.header.nFrames / this.header.blockFrames);
    }
    /** Block-index entries of frame blocks, every band of each in order. */
    entries(frameBlocks) {
      return frameBlocks.flatMap((b) => Array.from({ length: this.nBands }, (_, k) => b * this.nBands + k));
    }
    /** Check the XXH3-64 and trailing padding of blocks (all by default). */
    verifyChecksums(blocks) {
      for (const b of blocks ?? Array.from({ length: this.header.nBlocks }, (_, k) => k)) {
        const { offset, length } = this.blockIndex[b];
        const end = blockExtentEnd(offset, length);
        if (xxh3(this.bytes.subarray(offset, end)) !== this.blockChecksums[b]) {
          throw new QemFormatError(this.path, "block checksum mismatch", { section: "PAYLOAD", block: b });
        }
        if (this.bytes.subarray(offset + length, end).some((v) => v !== 0)) {
          throw new QemFormatError(this.path, "nonzero block padding", { section: "PAYLOAD", block: b });
        }
        this.verified[b] = 1;
      }
    }
    newCounts(frames) {
      const n = frames * this.framePixels;
      const w = this.header.storedItemsize;
      return w === 1 ? new Uint8Array(n) : w === 2 ? new Uint16Array(n) : new Uint32Array(n);
    }
    /** Decode frame blocks (every band of each) into (frames, det_r * det_c) counts. */
    decodeFrameBlocks(frameBlocks) {
      const ids = this.entries(frameBlocks);
      if (this.verify) this.verifyChecksums(ids.filter((b) => !this.verified[b]));
      let total = 0;
      const rows = frameBlocks.map((b) => {
        const row = total;
        total += this.blockIndex[b * this.nBands].nFrames;
        return row;
      });
      const out = this.newCounts(total);
      const w = this.header.storedItemsize;
      const P = this.framePixels;
      const detC = this.detectorShape[1];
      ids.forEach((id, k) => {
        const entry = this.blockIndex[id];
        const row0 = rows[Math.floor(k / this.nBands)];
        const band = this.version2 ? entry.band : 0;
        const pixel0 = this.version2 ? this.bandFirstRow[band] * detC : 0;
        const unit = this.version2 ? this.bandRows[band] * detC : P;
        let status = OK;
        if (entry.mode === MODE_RANS) {
          status = this.version2 ? decodeRansBlock2(
            this.bytes,
            entry.offset,
            entry.nFrames,
            entry.nWords,
            entry.nEscapes,
            w,
            unit,
            this.bandQuad0[band],
            this.model,
            out,
            row0,
            pixel0,
            P
          ) : decodeRansBlock1(
            this.bytes,
            entry.offset,
            entry.nFrames,
            entry.nWords,
            entry.nNonzero,
            entry.nEscapes,
            w,
            P,
            this.model,
            out,
            row0
          );
        } else if (entry.mode === MODE_RAW) {
          readRaw(this.bytes, entry.offset, entry.nFrames, unit, w, out, row0, pixel0, P);
        } else {
          for (let t = 0; t < entry.nFrames; t++) out.fill(0, (row0 + t) * P + pixel0, (row0 + t) * P + pixel0 + unit);
        }
        if (status !== OK) {
          throw new QemFormatError(this.path, `block decode failed: ${STATUS_MESSAGES[status]}`, {
            section: "PAYLOAD",
            block: id
          });
        }
      });
      return out;
    }
    /** Every frame, (n_frames, det_r * det_c). */
    readAll() {
      return this.decodeFrameBlocks(Array.from({ length: this.nFrameBlocks }, (_, k) => k));
    }
    /** Scan region [r0, r1) x [c0, c1): decodes only the frame blocks it touches. */
    readRegion(r0, r1, c0, c1) {
      const [scanR, scanC] = this.scanShape;
      if (!(0 <= r0 && r0 < r1 && r1 <= scanR && 0 <= c0 && c0 < c1 && c1 <= scanC)) {
        throw new RangeError(`scan region [${r0}, ${r1})x[${c0}, ${c1}) outside ${scanR}x${scanC}`);
      }
      const frames = [];
      for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) frames.push(r * scanC + c);
      const bf = this.header.blockFrames;
      const blocks = [...new Set(frames.map((f) => Math.floor(f / bf)))].sort((a, b) => a - b);
      const decoded = this.decodeFrameBlocks(blocks);
      const rowOf = new Map(blocks.map((b, k) => [b, k * bf]));
      const P = this.framePixels;
      const out = this.newCounts(frames.length);
      frames.forEach((f, k) => {
        const local = rowOf.get(Math.floor(f / bf)) + f % bf;
        out.set(decoded.subarray(local * P, (local + 1) * P), k * P);
      });
      return out;
    }
  };

  // src/products.ts
  function distanceSquared(detR, detC, row, col) {
    const out = new Float64Array(detR * detC);
    for (let r = 0; r < detR; r++) {
      const dr = (r - row) ** 2;
      for (let c = 0; c < detC; c++) out[r * detC + c] = dr + (c - col) ** 2;
    }
    return out;
  }
  function diskMask(detR, detC, row, col, radius) {
    if (!(radius > 0) || !Number.isFinite(radius)) throw new DetectorError(`radius must be positive, got ${radius}`);
    const d2 = distanceSquared(detR, detC, row, col);
    const out = new Uint8Array(d2.length);
    for (let p = 0; p < d2.length; p++) out[p] = d2[p] <= radius * radius ? 1 : 0;
    return out;
  }
  function detectorMask(spec, detR, detC) {
    const [row, col] = spec.center;
    return spec.kind === "disk" ? diskMask(detR, detC, row, col, spec.radius) : annulusMask(detR, detC, row, col, spec.inner, spec.outer);
  }
  function annulusMask(detR, detC, row, col, inner, outer) {
    if (!(inner >= 0) || !(outer > 0)) throw new DetectorError(`invalid radii ${inner}, ${outer}`);
    if (outer <= inner) throw new DetectorError(`outer radius ${outer} must exceed inner radius ${inner}`);
    const d2 = distanceSquared(detR, detC, row, col);
    const out = new Uint8Array(d2.length);
    for (let p = 0; p < d2.length; p++) out[p] = d2[p] > inner * inner && d2[p] <= outer * outer ? 1 : 0;
    return out;
  }
  function maskedPixels(mask) {
    const list = [];
    mask.forEach((m, p) => {
      if (m) list.push(p);
    });
    return Int32Array.from(list);
  }
  function maskedSum(frames, framePixels2, mask) {
    const pixels = maskedPixels(mask);
    const n = frames.length / framePixels2;
    const out = [];
    for (let t = 0; t < n; t++) {
      let sum = 0;
      let big = 0n;
      const base = t * framePixels2;
      for (let k = 0; k < pixels.length; k++) {
        sum += frames[base + pixels[k]];
        if (sum > Number.MAX_SAFE_INTEGER - 4294967295) {
          big += BigInt(sum);
          sum = 0;
        }
      }
      out.push(big + BigInt(sum));
    }
    return out;
  }
  function patternSum(frames, framePixels2) {
    const n = frames.length / framePixels2;
    const partial = new Float64Array(framePixels2);
    const big = new Array(framePixels2).fill(0n);
    for (let t = 0; t < n; t++) {
      const base = t * framePixels2;
      for (let p = 0; p < framePixels2; p++) partial[p] = partial[p] + frames[base + p];
      if ((t + 1) % 1e6 === 0) {
        for (let p = 0; p < framePixels2; p++) {
          big[p] = big[p] + BigInt(partial[p]);
          partial[p] = 0;
        }
      }
    }
    return big.map((b, p) => b + BigInt(partial[p]));
  }
  function meanPattern(sum, nFrames) {
    return Float64Array.from(sum, (s) => Number(s) / nFrames);
  }
  var EXACT_FLOAT_LIMIT = 1n << 53n;
  function withValidity(mask, pixelMask) {
    return mask.map((m, p) => m && pixelMask[p] === 0 ? 1 : 0);
  }

  // src/gpu/decode.wgsl
  var decode_default = "// rANS decode of resident .qem blocks (docs/qem-format.md \xA712 for 1.0, \xA719.4 for 2.0).\n// One invocation decodes one block-index entry in the reference order, with the checks and\n// status codes of the CPU decoders (src/qem/rans.ts, quantem/stem4d/io/qem/rans*.py), so a\n// damaged block gives the same error on every path. Counts are written as u32 per pixel.\n\nstruct Params {\n  n_entries: u32,\n  frame_pixels: u32,\n  itemsize: u32,\n  version: u32,\n};\n\nstruct Entry {\n  offset: u32,\n  mode: u32,\n  n_frames: u32,\n  n_words: u32,\n  n_nonzero: u32,\n  n_escapes: u32,\n  row0: u32,\n  band: u32,\n};\n\nstruct Band {\n  pixel0: u32,\n  pixels: u32,\n  quad0: u32,\n  pad: u32,\n};\n\n@group(0) @binding(0) var<uniform> params: Params;\n@group(0) @binding(1) var<storage, read> file_words: array<u32>;\n@group(0) @binding(2) var<storage, read> entries: array<Entry>;\n@group(0) @binding(3) var<storage, read> bands: array<Band>;\n@group(0) @binding(4) var<storage, read> decode_table: array<u32>;\n@group(0) @binding(5) var<storage, read> class_map: array<u32>;\n@group(0) @binding(6) var<storage, read> freq: array<u32>;\n@group(0) @binding(7) var<storage, read_write> counts: array<u32>;\n@group(0) @binding(8) var<storage, read_write> status: array<u32>;\n\nconst RANS_L: u32 = 65536u;\nconst ESCAPE: u32 = 255u;\nconst ERR_STATE_RANGE: u32 = 1u;\nconst ERR_WORDS_EXHAUSTED: u32 = 2u;\nconst ERR_MASK_PADDING: u32 = 3u;\nconst ERR_NONZERO_COUNT: u32 = 4u;\nconst ERR_ESCAPES_EXHAUSTED: u32 = 5u;\nconst ERR_ESCAPE_VALUE: u32 = 6u;\nconst ERR_UNUSED_ESCAPES: u32 = 7u;\nconst ERR_UNUSED_WORDS: u32 = 8u;\nconst ERR_FINAL_STATE: u32 = 9u;\nconst ERR_PADDING: u32 = 10u;\n\nfn byte_at(k: u32) -> u32 {\n  return (file_words[k >> 2u] >> ((k & 3u) * 8u)) & 0xffu;\n}\n\nfn uint_at(k: u32, nbytes: u32) -> u32 {\n  var value = 0u;\n  for (var b = 0u; b < nbytes; b++) {\n    value = value | (byte_at(k + b) << (8u * b));\n  }\n  return value;\n}\n\nfn word_at(k: u32) -> u32 {\n  return byte_at(k) | (byte_at(k + 1u) << 8u);\n}\n\n// One symbol of `context` on `state`: returns (symbol, new state before renormalisation).\nfn step(state: u32, context: u32) -> vec2<u32> {\n  let slot = state & 4095u;\n  let entry = decode_table[context * 4096u + slot];\n  let f = ((entry >> 8u) & 0xfffu) + 1u;\n  return vec2<u32>(entry & 0xffu, f * (state >> 12u) + (entry >> 20u));\n}\n\nvar<private> x: array<u32, 128>;\n\nfn decode_v1(e: Entry) -> u32 {\n  let P = params.frame_pixels;\n  let w = params.itemsize;\n  let groups = (P + 7u) / 8u;\n  let start = e.offset;\n  for (var lane = 0u; lane < 32u; lane++) {\n    x[lane] = uint_at(start + 4u * lane, 4u);\n    if (x[lane] < RANS_L) { return ERR_STATE_RANGE; }\n  }\n  var position = start + 128u;\n  let words_end = position + 2u * e.n_words;\n  let tail_bits = P % 8u;\n  // phase A: group masks, written as 0/1 flags into the block's pixels\n  var a = 0u;\n  for (var t = 0u; t < e.n_frames; t++) {\n    let base = (e.row0 + t) * P;\n    var m = 0u;\n    for (var j = 0u; j < groups; j++) {\n      let lane = a & 31u;\n      let r = step(x[lane], 2u * class_map[j]);\n      var state = r.y;\n      if (state < RANS_L) {\n        // a read past the words takes a word from the block's start, reported after the phase\n        let at = select(start, position, position < words_end);\n        state = (state << 16u) | word_at(at);\n        position += 2u;\n      }\n      x[lane] = state;\n      m = r.x;\n      for (var i = 0u; i < 8u; i++) {\n        let p = 8u * j + i;\n        if (p < P) { counts[base + p] = (m >> i) & 1u; }\n      }\n      a++;\n    }\n    if (tail_bits != 0u && (m >> tail_bits) != 0u) { return ERR_MASK_PADDING; }\n  }\n  if (position > words_end) { return ERR_WORDS_EXHAUSTED; }\n  var escape_position = start + ((128u + 2u * e.n_words + 3u) / 4u) * 4u;\n  for (var k = words_end; k < escape_position; k++) {\n    if (byte_at(k) != 0u) { return ERR_PADDING; }\n  }\n  let escape_end = escape_position + e.n_escapes * w;\n  // phase B: values of the flagged pixels, in pixel order\n  var v = 0u;\n  for (var t = 0u; t < e.n_frames; t++) {\n    let base = (e.row0 + t) * P;\n    for (var p = 0u; p < P; p++) {\n      if (counts[base + p] == 0u) { continue; }\n      let lane = v & 31u;\n      let r = step(x[lane], 2u * class_map[p / 8u] + 1u);\n      var state = r.y;\n      if (state < RANS_L) {\n        let at = select(start, position, position < words_end);\n        state = (state << 16u) | word_at(at);\n        position += 2u;\n      }\n      x[lane] = state;\n      v++;\n      if (r.x != ESCAPE) {\n        counts[base + p] = r.x + 1u;\n      } else {\n        if (escape_position >= escape_end) { return ERR_ESCAPES_EXHAUSTED; }\n        let value = uint_at(escape_position, w);\n        escape_position += w;\n        if (value < 256u) { return ERR_ESCAPE_VALUE; }\n        counts[base + p] = value;\n      }\n    }\n  }\n  if (v != e.n_nonzero) { return ERR_NONZERO_COUNT; }\n  if (position > words_end) { return ERR_WORDS_EXHAUSTED; }\n  if (escape_position != escape_end) { return ERR_UNUSED_ESCAPES; }\n  if (position != words_end) { return ERR_UNUSED_WORDS; }\n  for (var lane = 0u; lane < 32u; lane++) {\n    if (x[lane] != RANS_L) { return ERR_FINAL_STATE; }\n  }\n  return 0u;\n}\n\nfn decode_v2(e: Entry) -> u32 {\n  let P = params.frame_pixels;\n  let w = params.itemsize;\n  let band = bands[e.band];\n  let start = e.offset;\n  for (var i = 0u; i < 128u; i++) {\n    x[i] = uint_at(start + 4u * i, 4u);\n    if (x[i] < RANS_L) { return ERR_STATE_RANGE; }\n  }\n  var position = start + 512u;\n  let words_end = position + 2u * e.n_words;\n  var escape_position = start + ((512u + 2u * e.n_words + 3u) / 4u) * 4u;\n  for (var k = words_end; k < escape_position; k++) {\n    if (byte_at(k) != 0u) { return ERR_PADDING; }\n  }\n  let escape_end = escape_position + e.n_escapes * w;\n  for (var t = 0u; t < e.n_frames; t++) {\n    let base = (e.row0 + t) * P + band.pixel0;\n    for (var j0 = 0u; j0 < band.pixels; j0 += 128u) {\n      let count = min(128u, band.pixels - j0);\n      var escapes = 0u;\n      // the round's symbols and word reads (symbol order); symbols parked in counts\n      for (var i = 0u; i < count; i++) {\n        let c = class_map[band.quad0 + ((j0 + i) >> 2u)];\n        let r = step(x[i], c);\n        var state = r.y;\n        if (state < RANS_L) {\n          if (position >= words_end) { return ERR_WORDS_EXHAUSTED; }\n          state = (state << 16u) | word_at(position);\n          position += 2u;\n        }\n        x[i] = state;\n        counts[base + j0 + i] = r.x;\n        escapes += select(0u, 1u, r.x == ESCAPE);\n      }\n      if (escape_position + escapes * w > escape_end) { return ERR_ESCAPES_EXHAUSTED; }\n      for (var i = 0u; i < count; i++) {\n        if (counts[base + j0 + i] == ESCAPE) {\n          let c = class_map[band.quad0 + ((j0 + i) >> 2u)];\n          let value = uint_at(escape_position, w);\n          escape_position += w;\n          if (value < ESCAPE && freq[c * 256u + value] > 0u) { return ERR_ESCAPE_VALUE; }\n          counts[base + j0 + i] = value;\n        }\n      }\n    }\n  }\n  if (escape_position != escape_end) { return ERR_UNUSED_ESCAPES; }\n  if (position != words_end) { return ERR_UNUSED_WORDS; }\n  for (var i = 0u; i < 128u; i++) {\n    if (x[i] != RANS_L) { return ERR_FINAL_STATE; }\n  }\n  return 0u;\n}\n\nfn decode_raw(e: Entry, pixel0: u32, pixels: u32) {\n  let P = params.frame_pixels;\n  let w = params.itemsize;\n  var position = e.offset;\n  for (var t = 0u; t < e.n_frames; t++) {\n    for (var j = 0u; j < pixels; j++) {\n      counts[(e.row0 + t) * P + pixel0 + j] = uint_at(position, w);\n      position += w;\n    }\n  }\n}\n\n@compute @workgroup_size(64)\nfn decode_entries(@builtin(global_invocation_id) id: vec3<u32>) {\n  let k = id.x;\n  if (k >= params.n_entries) { return; }\n  let e = entries[k];\n  var pixel0 = 0u;\n  var pixels = params.frame_pixels;\n  if (params.version == 2u) {\n    pixel0 = bands[e.band].pixel0;\n    pixels = bands[e.band].pixels;\n  }\n  var result = 0u;\n  if (e.mode == 2u) {\n    if (params.version == 2u) { result = decode_v2(e); } else { result = decode_v1(e); }\n  } else if (e.mode == 1u) {\n    decode_raw(e, pixel0, pixels);\n  } else {\n    for (var t = 0u; t < e.n_frames; t++) {\n      for (var j = 0u; j < pixels; j++) { counts[(e.row0 + t) * params.frame_pixels + pixel0 + j] = 0u; }\n    }\n  }\n  status[k] = result;\n}\n";

  // src/gpu/products.wgsl
  var products_default = "// Exact detector products over decoded counts (u32 per pixel, frame after frame).\n// WGSL has no 64-bit integers: every sum is a pair of u32 (low, high) and every addition\n// propagates the carry of the low word, so the pair is the exact 64-bit sum (a frame's\n// masked sum is below 2^60: at most 2^28 pixels of counts below 2^32). Products of a pixel\n// index and a count (moments) are formed exactly from 16-bit halves.\n\nstruct Params {\n  n_frames: u32,\n  frame_pixels: u32,\n  det_c: u32,\n  n_masked: u32,\n};\n\n@group(0) @binding(0) var<uniform> params: Params;\n@group(0) @binding(1) var<storage, read> counts: array<u32>;\n@group(0) @binding(2) var<storage, read> masked: array<u32>;\n// masked sum: 2 u32 per frame; moments: 6 u32 per frame (total, sum_r, sum_c)\n@group(0) @binding(3) var<storage, read_write> result: array<u32>;\n\nconst WG: u32 = 64u;\nvar<workgroup> partial: array<vec2<u32>, 192>;\n\nfn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {\n  let low = a.x + b.x;\n  return vec2<u32>(low, a.y + b.y + select(0u, 1u, low < a.x));\n}\n\n// a * b exactly, as (low, high)\nfn mul64(a: u32, b: u32) -> vec2<u32> {\n  let a0 = a & 0xffffu;\n  let a1 = a >> 16u;\n  let b0 = b & 0xffffu;\n  let b1 = b >> 16u;\n  let p00 = a0 * b0;\n  let p01 = a0 * b1;\n  let p10 = a1 * b0;\n  let p11 = a1 * b1;\n  let middle = add64(vec2<u32>(p01 << 16u, p01 >> 16u), vec2<u32>(p10 << 16u, p10 >> 16u));\n  return add64(add64(vec2<u32>(p00, 0u), middle), vec2<u32>(0u, p11));\n}\n\n// One workgroup per frame; the masked pixel list is shared by all frames.\n@compute @workgroup_size(64)\nfn masked_sum(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n  let frame = group.x + group.y * 65535u;\n  if (frame >= params.n_frames) { return; }\n  let base = frame * params.frame_pixels;\n  var sum = vec2<u32>(0u, 0u);\n  for (var k = lid; k < params.n_masked; k += WG) {\n    sum = add64(sum, vec2<u32>(counts[base + masked[k]], 0u));\n  }\n  partial[lid] = sum;\n  workgroupBarrier();\n  for (var width = WG / 2u; width > 0u; width >>= 1u) {\n    if (lid < width) { partial[lid] = add64(partial[lid], partial[lid + width]); }\n    workgroupBarrier();\n  }\n  if (lid == 0u) {\n    result[2u * frame] = partial[0].x;\n    result[2u * frame + 1u] = partial[0].y;\n  }\n}\n\n@compute @workgroup_size(64)\nfn moments(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n  let frame = group.x + group.y * 65535u;\n  if (frame >= params.n_frames) { return; }\n  let base = frame * params.frame_pixels;\n  var total = vec2<u32>(0u, 0u);\n  var sum_r = vec2<u32>(0u, 0u);\n  var sum_c = vec2<u32>(0u, 0u);\n  for (var k = lid; k < params.n_masked; k += WG) {\n    let p = masked[k];\n    let v = counts[base + p];\n    total = add64(total, vec2<u32>(v, 0u));\n    sum_r = add64(sum_r, mul64(p / params.det_c, v));\n    sum_c = add64(sum_c, mul64(p % params.det_c, v));\n  }\n  partial[lid] = total;\n  partial[WG + lid] = sum_r;\n  partial[2u * WG + lid] = sum_c;\n  workgroupBarrier();\n  for (var width = WG / 2u; width > 0u; width >>= 1u) {\n    if (lid < width) {\n      partial[lid] = add64(partial[lid], partial[lid + width]);\n      partial[WG + lid] = add64(partial[WG + lid], partial[WG + lid + width]);\n      partial[2u * WG + lid] = add64(partial[2u * WG + lid], partial[2u * WG + lid + width]);\n    }\n    workgroupBarrier();\n  }\n  if (lid == 0u) {\n    for (var m = 0u; m < 3u; m++) {\n      result[6u * frame + 2u * m] = partial[m * WG].x;\n      result[6u * frame + 2u * m + 1u] = partial[m * WG].y;\n    }\n  }\n}\n\n// One invocation per detector pixel: the sum over frames (the mean pattern's numerator).\n@compute @workgroup_size(64)\nfn pattern_sum(@builtin(global_invocation_id) id: vec3<u32>) {\n  let p = id.x + id.y * (65535u * 64u);\n  if (p >= params.frame_pixels) { return; }\n  var sum = vec2<u32>(0u, 0u);\n  for (var t = 0u; t < params.n_frames; t++) {\n    sum = add64(sum, vec2<u32>(counts[t * params.frame_pixels + p], 0u));\n  }\n  result[2u * p] = sum.x;\n  result[2u * p + 1u] = sum.y;\n}\n";

  // src/gpu/engine.ts
  async function requestDevice() {
    const gpu = globalThis.navigator?.gpu;
    if (!gpu) return { device: null, reason: "navigator.gpu is absent (WebGPU not enabled)", adapter: "" };
    const adapter = await gpu.requestAdapter();
    if (!adapter) return { device: null, reason: "navigator.gpu.requestAdapter() returned null", adapter: "" };
    const info = adapter.info;
    const device = await adapter.requestDevice({
      requiredLimits: {
        maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
        maxBufferSize: adapter.limits.maxBufferSize
      }
    });
    return { device, reason: "", adapter: `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.trim() };
  }
  function packDecodeTable(model) {
    const table = new Uint32Array(model.nContexts * PROB_SCALE);
    for (let c = 0; c < model.nContexts; c++) {
      for (let slot = 0; slot < PROB_SCALE; slot++) {
        const s = model.slotSymbol[c * PROB_SCALE + slot];
        const f = model.freq[c * 256 + s];
        const bias = slot - model.cum[c * 257 + s];
        table[c * PROB_SCALE + slot] = (s | f - 1 << 8 | bias << 20) >>> 0;
      }
    }
    return table;
  }
  var U642 = (low, high) => BigInt(high) << 32n | BigInt(low);
  var Kernels = class {
    constructor(device) {
      this.device = device;
      const decodeModule = device.createShaderModule({ code: decode_default });
      this.decodePipeline = device.createComputePipeline({
        layout: "auto",
        compute: { module: decodeModule, entryPoint: "decode_entries" }
      });
      const productsModule = device.createShaderModule({ code: products_default });
      const storage = (type) => ({ type });
      this.productsLayout = device.createBindGroupLayout({
        entries: [storage("uniform"), storage("read-only-storage"), storage("read-only-storage"), storage("storage")].map(
          (buffer, binding) => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer })
        )
      });
      const layout = device.createPipelineLayout({ bindGroupLayouts: [this.productsLayout] });
      this.products = Object.fromEntries(
        ["masked_sum", "moments", "pattern_sum"].map((name) => [
          name,
          device.createComputePipeline({ layout, compute: { module: productsModule, entryPoint: name } })
        ])
      );
    }
    device;
    decodePipeline;
    products;
    productsLayout;
  };
  var kernelCache = /* @__PURE__ */ new WeakMap();
  function kernelsOf(device) {
    let kernels = kernelCache.get(device);
    if (!kernels) {
      kernels = new Kernels(device);
      kernelCache.set(device, kernels);
    }
    return kernels;
  }
  var GpuQem = class {
    constructor(device, qem) {
      this.device = device;
      this.qem = qem;
      this.kernels = kernelsOf(device);
    }
    device;
    qem;
    countsBuffer = null;
    kernels;
    buffer(data, usage) {
      const size = Math.max(16, Math.ceil(data.byteLength / 4) * 4);
      const buffer = this.device.createBuffer({ size, usage, mappedAtCreation: true });
      new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      buffer.unmap();
      return buffer;
    }
    storage(data) {
      return this.buffer(data, GPUBufferUsage.STORAGE);
    }
    async read(buffer, bytes) {
      const staging = this.device.createBuffer({ size: bytes, usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
      const encoder = this.device.createCommandEncoder();
      encoder.copyBufferToBuffer(buffer, 0, staging, 0, bytes);
      this.device.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      const out = new Uint32Array(staging.getMappedRange().slice(0));
      staging.unmap();
      staging.destroy();
      return out;
    }
    /** Upload the file and decode every block on the device (counts stay resident). */
    async decode() {
      const qem = this.qem;
      if (qem.verify) qem.verifyChecksums();
      const P = qem.framePixels;
      const device = this.device;
      const entries = new Uint32Array(qem.header.nBlocks * 8);
      qem.blockIndex.forEach((e, k) => {
        entries.set([e.offset, e.mode, e.nFrames, e.nWords, e.nNonzero, e.nEscapes, e.frameStart, qem.version2 ? e.band : 0], 8 * k);
      });
      const bands = new Uint32Array(qem.nBands * 4);
      const detC = qem.detectorShape[1];
      for (let b = 0; b < qem.nBands; b++) {
        bands.set([qem.bandFirstRow[b] * detC, qem.bandRows[b] * detC, qem.bandQuad0[b], 0], 4 * b);
      }
      const params = new Uint32Array([qem.header.nBlocks, P, qem.header.storedItemsize, qem.header.versionMajor]);
      const countsBytes = qem.nFrames * P * 4;
      this.countsBuffer?.destroy();
      this.countsBuffer = device.createBuffer({ size: countsBytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
      const status = device.createBuffer({
        size: Math.max(16, 4 * qem.header.nBlocks),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC
      });
      const inputs = [
        this.buffer(params, GPUBufferUsage.UNIFORM),
        this.storage(qem.bytes),
        this.storage(entries),
        this.storage(bands),
        this.storage(packDecodeTable(qem.model)),
        this.storage(Uint32Array.from(qem.model.groupClass)),
        this.storage(Uint32Array.from(qem.model.freq))
      ];
      const bindGroup = device.createBindGroup({
        layout: this.kernels.decodePipeline.getBindGroupLayout(0),
        entries: [...inputs, this.countsBuffer, status].map((buffer, binding) => ({ binding, resource: { buffer } }))
      });
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setPipeline(this.kernels.decodePipeline);
      pass.setBindGroup(0, bindGroup);
      pass.dispatchWorkgroups(Math.ceil(qem.header.nBlocks / 64));
      pass.end();
      device.queue.submit([encoder.finish()]);
      const codes = await this.read(status, 4 * qem.header.nBlocks);
      inputs.forEach((b) => b.destroy());
      status.destroy();
      const failed = codes.findIndex((c) => c !== 0);
      if (failed >= 0) {
        throw new QemFormatError(qem.path, `block decode failed: ${STATUS_MESSAGES[codes[failed]]}`, {
          section: "PAYLOAD",
          block: failed
        });
      }
    }
    /** The decoded counts, read back (u32 per pixel), for checks. */
    async counts() {
      if (!this.countsBuffer) throw new Error("decode() first");
      return this.read(this.countsBuffer, this.qem.nFrames * this.qem.framePixels * 4);
    }
    async runProduct(name, mask, wordsPerItem, items, groups) {
      if (!this.countsBuffer) throw new Error("decode() first");
      const masked = [];
      mask?.forEach((m, p) => {
        if (m) masked.push(p);
      });
      const qem = this.qem;
      const params = new Uint32Array([qem.nFrames, qem.framePixels, qem.detectorShape[1], masked.length]);
      const result = this.device.createBuffer({
        size: Math.max(16, 4 * wordsPerItem * items),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC
      });
      const uniform = this.buffer(params, GPUBufferUsage.UNIFORM);
      const list = this.storage(Uint32Array.from(masked.length ? masked : [0]));
      const pipeline = this.kernels.products[name];
      const bindGroup = this.device.createBindGroup({
        layout: this.kernels.productsLayout,
        entries: [uniform, this.countsBuffer, list, result].map((buffer, binding) => ({ binding, resource: { buffer } }))
      });
      const encoder = this.device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bindGroup);
      pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535));
      pass.end();
      this.device.queue.submit([encoder.finish()]);
      const out = await this.read(result, 4 * wordsPerItem * items);
      [result, uniform, list].forEach((b) => b.destroy());
      return out;
    }
    /** Exact masked sum of every frame (mask: 0/1 per pixel, already intersected with validity). */
    async maskedSum(mask) {
      const n = this.qem.nFrames;
      const out = await this.runProduct("masked_sum", mask, 2, n, n);
      return Array.from({ length: n }, (_, t) => U642(out[2 * t], out[2 * t + 1]));
    }
    /** Exact moments (total, sum_r, sum_c) of every frame. */
    async moments(mask) {
      const n = this.qem.nFrames;
      const out = await this.runProduct("moments", mask, 6, n, n);
      const pick = (m) => Array.from({ length: n }, (_, t) => U642(out[6 * t + 2 * m], out[6 * t + 2 * m + 1]));
      return { total: pick(0), sumR: pick(1), sumC: pick(2) };
    }
    /** Exact sum over frames per pixel. */
    async patternSum() {
      const P = this.qem.framePixels;
      const out = await this.runProduct("pattern_sum", null, 2, P, Math.ceil(P / 64));
      return Array.from({ length: P }, (_, p) => U642(out[2 * p], out[2 * p + 1]));
    }
    destroy() {
      this.countsBuffer?.destroy();
      this.countsBuffer = null;
    }
  };

  // src/explorer.ts
  var state = {
    qem: null,
    gpu: null,
    frames: null,
    path: "",
    gpuReason: "",
    maskedSum: [],
    detector: null,
    busy: false,
    error: ""
  };
  globalThis.explorer = state;
  var $ = (id) => document.getElementById(id);
  var SCALE = 8;
  function setStatus(text) {
    $("status").textContent = text;
  }
  function detectorFromInputs() {
    const kind = document.querySelector('input[name="kind"]:checked').value;
    const center = [Number($("row").value), Number($("col").value)];
    const outer = Number($("outer").value);
    return kind === "disk" ? { kind, center, radius: outer } : { kind, center, inner: Number($("inner").value), outer };
  }
  function drawGray(canvas, width, height, values, scale) {
    canvas.width = width * scale;
    canvas.height = height * scale;
    const context = canvas.getContext("2d");
    let low = Infinity;
    let high = -Infinity;
    for (let k = 0; k < values.length; k++) {
      low = Math.min(low, values[k]);
      high = Math.max(high, values[k]);
    }
    const image = context.createImageData(width, height);
    for (let k = 0; k < values.length; k++) {
      const gray = high > low ? Math.round(255 * (values[k] - low) / (high - low)) : 0;
      image.data.set([gray, gray, gray, 255], 4 * k);
    }
    const small = document.createElement("canvas");
    small.width = width;
    small.height = height;
    small.getContext("2d").putImageData(image, 0, 0);
    context.imageSmoothingEnabled = false;
    context.drawImage(small, 0, 0, width * scale, height * scale);
  }
  var patternValues = new Float64Array(0);
  function drawPattern() {
    const qem = state.qem;
    const [detR, detC] = qem.detectorShape;
    const canvas = $("pattern");
    drawGray(canvas, detC, detR, patternValues.map((v) => Math.log1p(v)), SCALE);
    const d = state.detector;
    if (!d) return;
    const context = canvas.getContext("2d");
    context.strokeStyle = "#e33";
    context.lineWidth = 2;
    const x = (d.center[1] + 0.5) * SCALE;
    const y = (d.center[0] + 0.5) * SCALE;
    for (const radius of d.kind === "disk" ? [d.radius] : [d.inner, d.outer]) {
      context.beginPath();
      context.arc(x, y, radius * SCALE, 0, 2 * Math.PI);
      context.stroke();
    }
  }
  var generation = 0;
  async function update() {
    const qem = state.qem;
    if (!qem) return;
    const ticket = ++generation;
    let spec;
    try {
      spec = detectorFromInputs();
      const [detR, detC] = qem.detectorShape;
      const mask = withValidity(detectorMask(spec, detR, detC), qem.pixelMask);
      state.busy = true;
      const sums = state.gpu ? await state.gpu.maskedSum(mask) : maskedSum(state.frames, qem.framePixels, mask);
      if (ticket !== generation) return;
      state.detector = spec;
      state.maskedSum = sums.map(String);
      state.error = "";
      const [scanR, scanC] = qem.scanShape;
      const scale = Math.max(1, Math.floor(384 / Math.max(scanR, scanC)));
      drawGray($("image"), scanC, scanR, sums.map(Number), scale);
      drawPattern();
      setStatus(`${qem.path}: ${scanR}x${scanC} frames of ${detR}x${detC} ${qem.dtype} \xB7 ${state.path}` + (state.gpuReason ? ` (${state.gpuReason})` : "") + ` \xB7 ${mask.reduce((n, m) => n + m, 0)} pixels in the detector`);
    } catch (error) {
      if (ticket !== generation) return;
      state.error = error.message;
      setStatus(state.error);
    } finally {
      if (ticket === generation) state.busy = false;
    }
  }
  async function open(file) {
    state.busy = true;
    setStatus(`reading ${file.name}\u2026`);
    try {
      await initXxh3();
      const qem = new QemFile(new Uint8Array(await file.arrayBuffer()), file.name);
      state.gpu?.destroy();
      state.gpu = null;
      state.frames = null;
      const { device, reason } = await requestDevice();
      let sum;
      if (device) {
        state.gpu = new GpuQem(device, qem);
        await state.gpu.decode();
        sum = await state.gpu.patternSum();
        state.path = "webgpu";
        state.gpuReason = "";
      } else {
        state.frames = qem.readAll();
        sum = patternSum(state.frames, qem.framePixels);
        state.path = "cpu";
        state.gpuReason = reason;
      }
      state.qem = qem;
      patternValues = meanPattern(sum.map((s, p) => qem.pixelMask[p] ? 0n : s), qem.nFrames);
      const [detR, detC] = qem.detectorShape;
      if (!$("outer").value) {
        $("row").value = String((detR - 1) / 2);
        $("col").value = String((detC - 1) / 2);
        $("outer").value = String(Math.min(detR, detC) / 4);
      }
      await update();
    } catch (error) {
      state.error = error.message;
      state.busy = false;
      setStatus(state.error);
    }
  }
  function wire() {
    $("file").addEventListener("change", (event) => {
      const file = event.target.files?.[0];
      if (file) void open(file);
    });
    const drop = $("drop");
    drop.addEventListener("dragover", (event) => {
      event.preventDefault();
      drop.classList.add("over");
    });
    drop.addEventListener("dragleave", () => drop.classList.remove("over"));
    drop.addEventListener("drop", (event) => {
      event.preventDefault();
      drop.classList.remove("over");
      const file = event.dataTransfer?.files[0];
      if (file) void open(file);
    });
    for (const id of ["row", "col", "outer", "inner"]) $(id).addEventListener("change", () => void update());
    document.querySelectorAll('input[name="kind"]').forEach((input) => input.addEventListener("change", () => void update()));
    const canvas = $("pattern");
    let anchor = null;
    const position = (event) => {
      const box = canvas.getBoundingClientRect();
      return [(event.clientY - box.top) / SCALE - 0.5, (event.clientX - box.left) / SCALE - 0.5];
    };
    canvas.addEventListener("mousedown", (event) => {
      anchor = position(event);
      $("row").value = anchor[0].toFixed(2);
      $("col").value = anchor[1].toFixed(2);
    });
    canvas.addEventListener("mouseup", (event) => {
      if (!anchor) return;
      const [r, c] = position(event);
      const radius = Math.hypot(r - anchor[0], c - anchor[1]);
      if (radius > 0.25) $("outer").value = radius.toFixed(2);
      anchor = null;
      void update();
    });
  }
  if (typeof document !== "undefined") wire();
})();
/*! Bundled license information:

hash-wasm/dist/index.esm.js:
  (*!
   * hash-wasm (https://www.npmjs.com/package/hash-wasm)
   * (c) Dani Biro
   * @license MIT
   *)
*/
