"""A slow, independent pure-Python .qem reader written from docs/qem-format.md alone.

It shares no code with ``quantem.stem4d.io.qem`` (only ``xxhash``, ``json``, ``struct``): the
tests decode the same files with both and compare, so a misreading of the spec in one
implementation shows up as a difference. Use it on small files only.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import xxhash


class ReferenceError(Exception):
    """The file violates the spec; the message names the rule."""


def _h(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


def _up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def read_reference(data: bytes) -> dict:
    """Validate and fully decode a .qem file given as bytes.

    Returns ``{"frames": ndarray (n_frames, det_r, det_c), "pixel_mask": ndarray,
    "metadata": dict, "scan_shape": (r, c)}``; raises ReferenceError otherwise.
    """
    if len(data) < 288:
        raise ReferenceError("short file")
    if data[:8] != b"\x89QEM\r\n\x1a\n":
        raise ReferenceError("magic")
    major, _minor, header_size, file_size = struct.unpack_from("<HHIQ", data, 8)
    if major != 1:
        raise ReferenceError("major version")
    if _h(data[:248]) != struct.unpack_from("<Q", data, 248)[0]:
        raise ReferenceError("header checksum")
    n_frames, scan_r, scan_c, det_r, det_c = struct.unpack_from("<QIIII", data, 24)
    w, source_w, res0, block_frames, n_blocks, res1 = struct.unpack_from("<BBHIII", data, 48)
    if header_size != 256 or file_size != len(data):
        raise ReferenceError("header size / file size")
    if res0 or res1 or any(data[232:248]):
        raise ReferenceError("reserved")
    if w not in (1, 2, 4) or source_w not in (1, 2, 4):
        raise ReferenceError("itemsize")
    if not (1 <= det_r <= 65535 and 1 <= det_c <= 65535) or det_r * det_c > 2**28:
        raise ReferenceError("detector")
    P = det_r * det_c
    if scan_r < 1 or scan_c < 1 or n_frames != scan_r * scan_c or n_frames > 2**40:
        raise ReferenceError("frames")
    if block_frames < 1 or block_frames * P > 2**31:
        raise ReferenceError("block_frames")
    if n_blocks != -(-n_frames // block_frames):
        raise ReferenceError("n_blocks")
    table = [struct.unpack_from("<QQQ", data, 64 + 24 * i) for i in range(7)]
    # footer
    f_magic, f_size, f_hh, f_x = struct.unpack_from("<8sQQQ", data, len(data) - 32)
    if f_magic != b"QEM-END\x1a" or f_size != file_size:
        raise ReferenceError("footer")
    if f_hh != struct.unpack_from("<Q", data, 248)[0] or _h(data[-32:-8]) != f_x:
        raise ReferenceError("footer checksum")
    # canonical layout
    end = 256
    for i, (off, length, chk) in enumerate(table):
        if i == 5:
            expect = _up(end, 4096)
            if off != expect or chk != 0:
                raise ReferenceError("payload placement")
            end = off + length
        elif length:
            expect = _up(end, 64)
            if off != expect:
                raise ReferenceError(f"section {i} placement")
            if _h(data[off : off + length]) != chk:
                raise ReferenceError(f"section {i} checksum")
            end = off + length
        elif off or chk:
            raise ReferenceError(f"absent section {i}")
    footer_at = _up(end, 64)
    if footer_at + 32 != file_size:
        raise ReferenceError("footer placement")
    covered = bytearray(file_size)
    covered[:256] = b"\x01" * 256
    covered[footer_at:] = b"\x01" * 32
    for off, length, _ in table:
        covered[off : off + length] = b"\x01" * length
    for position in range(file_size):
        if not covered[position] and data[position]:
            raise ReferenceError("padding")
    if table[6][1]:
        raise ReferenceError("spatial index in 1.0")
    # metadata
    off, length, _ = table[0]
    if not 1 <= length <= 16 << 20:
        raise ReferenceError("metadata length")
    meta = json.loads(data[off : off + length].decode("utf-8"))
    names = {1: "uint8", 2: "uint16", 4: "uint32"}
    if (
        meta["scan_shape"] != [scan_r, scan_c]
        or meta["detector_shape"] != [det_r, det_c]
        or meta["n_frames"] != n_frames
        or meta["dtype"] != names[w]
        or meta["source_dtype"] != names[source_w]
    ):
        raise ReferenceError("metadata disagrees")
    # mask
    off, length, _ = table[1]
    if length:
        if length != 4 * P:
            raise ReferenceError("mask length")
        mask = np.array(struct.unpack_from(f"<{P}I", data, off), dtype=np.uint32)
        if not mask.any():
            raise ReferenceError("mask all zero")
    else:
        mask = np.zeros(P, dtype=np.uint32)
    declared = meta["pixel_mask"]
    encoding = "section" if length else "all-zero"
    if declared != {
        "dtype": "uint32",
        "encoding": encoding,
        "n_masked": int(np.count_nonzero(mask)),
    }:
        raise ReferenceError("metadata pixel_mask disagrees")
    # model
    off, length, _ = table[2]
    K, C, G, res = struct.unpack_from("<IIII", data, off)
    if not 1 <= K <= 4 or C != 2 * K or G != -(-P // 8) or res:
        raise ReferenceError("model counts")
    if length != 16 + _up(G, 4) + 512 * C:
        raise ReferenceError("model length")
    gclass = list(data[off + 16 : off + 16 + G])
    if any(c >= K for c in gclass) or any(data[off + 16 + G : off + 16 + _up(G, 4)]):
        raise ReferenceError("class map")
    freqs, cums, syms = [], [], []
    for c in range(C):
        f = list(struct.unpack_from("<256H", data, off + 16 + _up(G, 4) + 512 * c))
        if sum(f) != 4096:
            raise ReferenceError("freq sum")
        cum = [0]
        for v in f:
            cum.append(cum[-1] + v)
        sym = []
        for s, v in enumerate(f):
            sym.extend([s] * v)
        freqs.append(f)
        cums.append(cum)
        syms.append(sym)
    # block index + checksums
    off, length, _ = table[3]
    if length != 48 * n_blocks or table[4][1] != 8 * n_blocks:
        raise ReferenceError("index lengths")
    checks = struct.unpack_from(f"<{n_blocks}Q", data, table[4][0])
    frames = np.zeros((n_frames, P), dtype={1: np.uint8, 2: np.uint16, 4: np.uint32}[w])
    expect_offset = table[5][0]
    for b in range(n_blocks):
        fs, nf, mode, boff, blen, nw, nnz, nesc, res = struct.unpack_from(
            "<QIIQQIIII", data, off + 48 * b
        )
        if fs != b * block_frames or nf != min(block_frames, n_frames - fs) or res:
            raise ReferenceError(f"block {b} frames")
        if boff != expect_offset:
            raise ReferenceError(f"block {b} offset")
        if mode == 0:
            ok = blen == 0 and nw == nnz == nesc == 0
        elif mode == 1:
            ok = blen == nf * P * w and nw == nnz == nesc == 0
        elif mode == 2:
            ok = (
                blen == _up(128 + 2 * nw, 4) + nesc * w
                and nnz <= nf * P
                and nesc <= nnz
                and not (w == 1 and nesc)
                and nw <= nf * G + nnz
            )
        else:
            ok = False
        if not ok:
            raise ReferenceError(f"block {b} entry")
        extent_end = _up(boff + blen, 16)
        if extent_end > table[5][0] + table[5][1]:
            raise ReferenceError(f"block {b} outside payload")
        if _h(data[boff:extent_end]) != checks[b]:
            raise ReferenceError(f"block {b} checksum")
        expect_offset = extent_end
        out = frames[fs : fs + nf].reshape(-1)
        if mode == 1:
            for k in range(nf * P):
                out[k] = int.from_bytes(data[boff + k * w : boff + (k + 1) * w], "little")
        elif mode == 2:
            _decode_rans(data, b, boff, nf, nw, nnz, nesc, w, P, G, gclass, freqs, cums, syms, out)
    if expect_offset != table[5][0] + table[5][1]:
        raise ReferenceError("payload length")
    return {
        "frames": frames.reshape(n_frames, det_r, det_c),
        "pixel_mask": mask.reshape(det_r, det_c),
        "metadata": meta,
        "scan_shape": (scan_r, scan_c),
    }


def _decode_rans(data, b, boff, nf, nw, nnz, nesc, w, P, G, gclass, freqs, cums, syms, out):
    x = list(struct.unpack_from("<32I", data, boff))
    if any(v < 1 << 16 for v in x):
        raise ReferenceError(f"block {b} state range")
    words = struct.unpack_from(f"<{nw}H", data, boff + 128)
    pos = 0

    def decode(lane: int, c: int) -> int:
        nonlocal pos
        state = x[lane]
        slot = state & 4095
        s = syms[c][slot]
        state = freqs[c][s] * (state >> 12) + slot - cums[c][s]
        if state < 1 << 16:
            if pos == nw:
                raise ReferenceError(f"block {b} words exhausted")
            state = (state << 16) | words[pos]
            pos += 1
        x[lane] = state
        return s

    masks = []
    for t in range(nf):
        for j in range(G):
            m = decode((t * G + j) % 32, 2 * gclass[j])
            for i in range(8):
                if 8 * j + i >= P and (m >> i) & 1:
                    raise ReferenceError(f"block {b} mask padding")
            masks.append(m)
    if sum(bin(m).count("1") for m in masks) != nnz:
        raise ReferenceError(f"block {b} nonzero count")
    esc_at = _up(128 + 2 * nw, 4)
    if any(data[boff + 128 + 2 * nw : boff + esc_at]):
        raise ReferenceError(f"block {b} inner padding")
    v = e = 0
    for t in range(nf):
        for j in range(G):
            m = masks[t * G + j]
            for i in range(8):
                p = 8 * j + i
                if p >= P:
                    break
                if not (m >> i) & 1:
                    out[t * P + p] = 0
                    continue
                s = decode(v % 32, 2 * gclass[j] + 1)
                v += 1
                if s < 255:
                    out[t * P + p] = s + 1
                else:
                    if e == nesc:
                        raise ReferenceError(f"block {b} escapes exhausted")
                    at = boff + esc_at + e * w
                    value = int.from_bytes(data[at : at + w], "little")
                    e += 1
                    if value < 256:
                        raise ReferenceError(f"block {b} escape value")
                    out[t * P + p] = value
    if e != nesc or pos != nw or any(s != 1 << 16 for s in x):
        raise ReferenceError(f"block {b} final checks")
