"""Write web/fixtures: small .qem and ARINA files from the repository's synthetic generator
and the products the Python package computes from them (the truth the TypeScript and
WebGPU paths are tested against), plus the corruption cases with Python's error for each.

Run from the repository root: ``PYTHONPATH=$PWD python3 web/tools/make_fixtures.py``.
The counts and products are deterministic (fixed seeds); the .qem bytes are not quite, since
their metadata records the identity (path, mtime) of the temporary ARINA source.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.detector.masks import annulus_mask, disk_mask
from quantem.stem4d.errors import QemFormatError
from quantem.stem4d.io.qem import format as fmt
from quantem.stem4d.io.qem.checksum import xxh3
from quantem.stem4d.io.qem.reader import QemFile, load_qem
from quantem.stem4d.io.qem.writer import save_qem

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "web" / "fixtures"


def harness(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "harness", *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return done.stdout.strip().splitlines()[-1]


def u64_strings(array: np.ndarray) -> list[str]:
    return [str(int(v)) for v in np.asarray(array, dtype=np.uint64).reshape(-1)]


def floats(array: np.ndarray) -> list[float | None]:
    return [
        None if np.isnan(v) else float(v) for v in np.asarray(array, dtype=np.float64).reshape(-1)
    ]


DETECTORS = {
    "disk": {"kind": "disk", "center": [9.5, 8.25], "radius": 5.5},
    "annulus": {"kind": "annulus", "center": [9.5, 8.25], "inner": 4.0, "outer": 8.5},
}


def detector_mask(shape: tuple[int, int], spec: dict) -> np.ndarray:
    if spec["kind"] == "disk":
        return disk_mask(shape, spec["center"], spec["radius"])
    return annulus_mask(shape, spec["center"], spec["inner"], spec["outer"])


def products(path: Path) -> dict:
    """What the Python package computes from one .qem file."""
    acq = load_qem(path)
    raw = load_qem(path, apply_mask=False).data
    session = prepare(acq)
    shape = acq.data.shape[2:]
    with QemFile(path) as qem:
        region = (1, min(4, qem.scan_shape[0]), 2, min(5, qem.scan_shape[1]))
        region_counts = qem.read_region(region[:2], region[2:])
        pixel_mask = qem.pixel_mask.reshape(-1).tolist()
    com_all = session.center_of_mass()
    result = {
        "file": path.name,
        "scan_shape": list(acq.data.shape[:2]),
        "detector_shape": list(shape),
        "dtype": str(raw.dtype),
        "counts_xxh3": f"{xxh3(np.ascontiguousarray(raw).astype(raw.dtype.newbyteorder('<')).tobytes()):016x}",
        "region": list(region),
        "region_xxh3": f"{xxh3(np.ascontiguousarray(region_counts).astype(raw.dtype.newbyteorder('<')).tobytes()):016x}",
        "pixel_mask": pixel_mask,
        "pattern_sum": u64_strings(session.mean_dp_exact()),
        "mean_dp": floats(session.mean_dp()),
        "com_all": {"row": floats(com_all[0]), "col": floats(com_all[1])},
        "detectors": {},
    }
    for name, spec in DETECTORS.items():
        mask = detector_mask(shape, spec)
        com = session.center_of_mass(mask)
        result["detectors"][name] = {
            **spec,
            "mask_pixels": int(np.count_nonzero(mask)),
            "masked_sum": u64_strings(session.masked_sum_exact(mask)),
            "com": {"row": floats(com[0]), "col": floats(com[1])},
        }
    return result


def corrupt_good_file(folder: Path) -> bytes:
    """tests/test_qem_corruption.py's small file: RANS, ZERO and RAW blocks, escapes, a mask."""
    rng = np.random.default_rng(21)
    data = rng.poisson(0.6, size=(3, 4, 6, 10)).astype(np.uint16)
    data[..., 2, 3] = 65535
    data[1, :2] = 0
    data[2, 3] = rng.integers(256, 65535, size=(6, 10))
    mask = np.zeros((6, 10), dtype=np.uint32)
    mask[2, 3] = 2
    acq = Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu")
    return save_qem(acq, folder / "good.qem", block_frames=2).read_bytes()


def reseal(data: bytearray) -> bytes:
    """Recompute every section checksum, the header checksum and the footer."""
    for i in range(fmt.N_SECTIONS):
        offset, length, _ = struct.unpack_from("<QQQ", data, 64 + 24 * i)
        if length and i != fmt.SECTION_PAYLOAD and offset + length <= len(data):
            struct.pack_into(
                "<Q", data, 64 + 24 * i + 16, xxh3(bytes(data[offset : offset + length]))
            )
    struct.pack_into("<Q", data, 248, xxh3(bytes(data[:248])))
    size = struct.unpack_from("<Q", data, 16)[0]
    if size == len(data):
        data[-32:] = fmt.pack_footer(size, struct.unpack_from("<Q", data, 248)[0])
    return bytes(data)


def section(data: bytes, section_id: int) -> tuple[int, int]:
    offset, length, _ = struct.unpack_from("<QQQ", data, 64 + 24 * section_id)
    return offset, length


def python_error(folder: Path, data: bytes) -> dict | None:
    """Open, verify and decode as the corruption tests do; Python's error, or None."""
    (folder / "x.qem").write_bytes(data)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with QemFile("x.qem") as qem:
            qem.verify_checksums()
            qem.decode_blocks(np.arange(qem.n_blocks))
    except QemFormatError as error:
        return {"class": type(error).__name__, "message": str(error)}
    finally:
        os.chdir(cwd)
    return None


def patch(good: bytes, damaged: bytes) -> dict:
    """The damaged file as edits of the good one (kept small in the fixture)."""
    common = min(len(good), len(damaged))
    diff = np.flatnonzero(
        np.frombuffer(good[:common], np.uint8) != np.frombuffer(damaged[:common], np.uint8)
    )
    edits = [[int(p), f"{damaged[p]:02x}"] for p in diff]
    return {"edits": edits, "size": len(damaged), "tail": damaged[len(good) :].hex()}


def edit_index(good: bytes, block: int, field: str, value: int) -> bytes:
    data = bytearray(good)
    offset, _ = section(good, fmt.SECTION_BLOCK_INDEX)
    entry = offset + fmt.BLOCK_ENTRY_SIZE * block + fmt.BLOCK_INDEX_DTYPE.fields[field][1]
    size = fmt.BLOCK_INDEX_DTYPE.fields[field][0].itemsize
    data[entry : entry + size] = value.to_bytes(size, "little")
    return reseal(data)


def corruption_cases(good: bytes) -> list[tuple[str, bytes, str]]:
    """(name, damaged bytes, how messages compare): the cases of tests/test_qem_corruption.py."""
    cases: list[tuple[str, bytes, str]] = []
    for position in sorted(
        {*range(0, len(good), 7), *range(300), *range(len(good) - 100, len(good))}
    ):
        damaged = bytearray(good)
        damaged[position] ^= 1 << (position % 8)
        cases.append((f"flip {position}", bytes(damaged), "exact"))
    for size in sorted(
        {0, 1, 100, 255, 287, 288, 1000, 4096, len(good) // 2, len(good) - 33, len(good) - 1}
    ):
        cases.append((f"truncate {size}", good[:size], "exact"))
    cases.append(("appended", good + b"\0" * 64, "exact"))
    cases.append(("foreign", b"\x89HDF\r\n\x1a\n" + bytes(400), "exact"))

    def edited(name: str, change) -> None:
        data = bytearray(good)
        change(data)
        cases.append((name, reseal(data), "exact"))

    edited("major version 3", lambda d: struct.pack_into("<H", d, 8, 3))
    edited("1.0 relabelled 2.0", lambda d: struct.pack_into("<H", d, 8, 2))
    edited(
        "newer minor",
        lambda d: (struct.pack_into("<H", d, 10, 7), struct.pack_into("<Q", d, 232, 12345)),
    )
    edited("reserved field", lambda d: struct.pack_into("<I", d, 60, 1))
    for offset, char, value in [
        (24, "Q", 2**63),
        (32, "I", 0),
        (40, "I", 0),
        (48, "B", 3),
        (52, "I", 2**31 - 1),
        (56, "I", 2**32 - 1),
        (16, "Q", 2**60),
    ]:
        edited(
            f"header field {offset}",
            lambda d, o=offset, c=char, v=value: struct.pack_into("<" + c, d, o, v),
        )
    edited("frame pixels", lambda d: struct.pack_into("<II", d, 40, 65535, 65535))
    model_offset, model_length = section(good, fmt.SECTION_MODEL)
    edited(
        "model offset",
        lambda d: struct.pack_into("<Q", d, 64 + 24 * fmt.SECTION_MODEL, model_offset + 64),
    )
    edited(
        "metadata length",
        lambda d: struct.pack_into("<Q", d, 64 + 24 * fmt.SECTION_METADATA + 8, 2**62),
    )
    meta_offset, meta_length = section(good, fmt.SECTION_METADATA)
    edited("padding", lambda d: d.__setitem__(meta_offset + meta_length, 1))
    for field, value in [
        ("offset", 0),
        ("offset", 2**63),
        ("length", 2**40),
        ("length", 3),
        ("mode", 3),
        ("n_frames", 2**31),
        ("frame_start", 1),
        ("n_words", 2**32 - 1),
        ("n_escapes", 2**32 - 1),
        ("n_nonzero", 2**32 - 1),
        ("band", 1),
    ]:
        cases.append((f"index {field}={value}", edit_index(good, 1, field, value), "exact"))
    index_offset, _ = section(good, fmt.SECTION_BLOCK_INDEX)
    index = np.frombuffer(good, dtype=fmt.BLOCK_INDEX_DTYPE, count=6, offset=index_offset)
    checks, _ = section(good, fmt.SECTION_BLOCK_CHECKSUMS)
    rans_block = int(np.flatnonzero(index["mode"] == fmt.MODE_RANS)[0])
    edited(
        "block checksum",
        lambda d: d.__setitem__(checks + 8 * rans_block, d[checks + 8 * rans_block] ^ 1),
    )
    # damaged RANS words with the block checksum recomputed: the decode checks must catch them
    for block in np.flatnonzero(index["mode"] == fmt.MODE_RANS):
        entry = index[block]
        for word in range(0, int(entry["n_words"]), 3):
            data = bytearray(good)
            position = int(entry["offset"]) + 128 + 2 * word
            data[position] ^= 0x5A
            end = fmt.block_extent_end(int(entry["offset"]), int(entry["length"]))
            struct.pack_into(
                "<Q", data, checks + 8 * int(block), xxh3(bytes(data[int(entry["offset"]) : end]))
            )
            cases.append((f"word {block}.{word}", reseal(data), "exact"))
    edited(
        "frequency table",
        lambda d: d.__setitem__(
            model_offset + model_length - 2, d[model_offset + model_length - 2] ^ 1
        ),
    )
    edited("class map", lambda d: d.__setitem__(model_offset + 16, 9))
    text = good[meta_offset : meta_offset + meta_length]
    edited(
        "metadata scan_shape",
        lambda d: d.__setitem__(
            slice(meta_offset, meta_offset + meta_length),
            text.replace(b'"scan_shape":[3,4]', b'"scan_shape":[4,3]'),
        ),
    )
    # Python's json error wording is not mirrored: the class and the message up to the colon are
    edited_json = bytearray(good)
    edited_json[meta_offset] = ord("[")
    cases.append(("metadata not JSON", reseal(edited_json), "prefix"))
    edited(
        "metadata n_masked",
        lambda d: d.__setitem__(
            slice(meta_offset, meta_offset + meta_length),
            text.replace(b'"n_masked":1', b'"n_masked":2'),
        ),
    )
    return cases


def decode_cases(folder: Path, base: Path) -> list[dict]:
    """Damaged bytes inside RANS blocks of ``base`` with the block checksum recomputed, so the
    decode checks themselves (states, words, escapes, padding) must catch the damage."""
    good = base.read_bytes()
    with QemFile(base) as qem:
        index = qem.block_index.copy()
    checks, _ = section(good, fmt.SECTION_BLOCK_CHECKSUMS)
    cases = []
    for block in np.flatnonzero(index["mode"] == fmt.MODE_RANS)[:3]:
        start = int(index[block]["offset"])
        end = fmt.block_extent_end(start, int(index[block]["length"]))
        for position in range(start, end, max(1, (end - start) // 40)):
            data = bytearray(good)
            data[position] ^= 0x5A
            struct.pack_into("<Q", data, checks + 8 * int(block), xxh3(bytes(data[start:end])))
            damaged = reseal(data)
            cases.append(
                {
                    "name": f"{base.name} block {block} byte {position - start}",
                    "base": base.name,
                    **patch(good, damaged),
                    "compare": "exact",
                    "error": python_error(folder, damaged),
                }
            )
    return cases


def write_ratios() -> None:
    """quantem's exact_ratio on operands past 2**53 (one rounding of the exact quotient)."""
    from quantem.stem4d.detector.session import exact_ratio

    rng = np.random.default_rng(5)
    numerators = [2**53 + 1, 2**60 + 1, 2**64 - 1, 3 * 2**62 + 7, 12345, 2**63]
    totals = [3, 2**53 + 1, 7, 2**40 + 3, 2**54 + 9, 1]
    numerators += [int(v) for v in rng.integers(2**52, 2**64 - 1, size=40, dtype=np.uint64)]
    totals += [int(v) for v in rng.integers(1, 2**62, size=40, dtype=np.uint64)]
    values = exact_ratio(np.array(numerators, np.uint64), np.array(totals, np.uint64))
    cases = [[str(n), str(t), float(v)] for n, t, v in zip(numerators, totals, values)]
    (OUT / "ratios.json").write_text(json.dumps(cases) + "\n")


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        master = Path(
            harness(
                "data",
                "synth",
                str(tmp / "arina"),
                "--name",
                "small",
                "--scan-shape",
                "5",
                "6",
                "--detector-shape",
                "20",
                "18",
                "--dose",
                "400",
                "--seed",
                "3",
                "--frames-per-shard",
                "16",
                "--processes",
                "1",
            )
        )
        arina_out = OUT / "arina"
        arina_out.mkdir()
        for file in sorted(master.parent.iterdir()):
            shutil.copy(file, arina_out / file.name)
        harness("qem", "convert", str(master), str(OUT / "small-v1.qem"), "--block-frames", "4")
        harness(
            "qem",
            "convert",
            str(master),
            str(OUT / "small-v2.qem"),
            "--block-frames",
            "4",
            "--format-version",
            "2",
            "--band-rows",
            "6",
        )
        good = corrupt_good_file(tmp)
        (OUT / "mixed-v1.qem").write_bytes(good)
        rng_data = load_qem(OUT / "mixed-v1.qem", apply_mask=False)
        save_qem(rng_data, OUT / "mixed-v2.qem", block_frames=2, version=2, band_rows=4)
        shutil.copy(ROOT / "tests" / "data" / "qem-v1.0-vector.qem", OUT / "vector-v1.qem")
        write_ratios()
        held = {f.name: products(f) for f in sorted(OUT.glob("*.qem"))}
        arina = load_qem(OUT / "small-v1.qem", apply_mask=False)
        held["arina"] = {
            "master": f"arina/{master.name}",
            "from_qem": "small-v1.qem",
            "scan_shape": list(arina.data.shape[:2]),
        }
        (OUT / "products.json").write_text(json.dumps(held, sort_keys=True, indent=0) + "\n")
        cases = []
        for name, data, compare in corruption_cases(good):
            cases.append(
                {
                    "name": name,
                    **patch(good, data),
                    "compare": compare,
                    "error": python_error(tmp, data),
                }
            )
        decoding = [
            case
            for name in ("mixed-v1.qem", "mixed-v2.qem", "small-v1.qem", "small-v2.qem")
            for case in decode_cases(tmp, OUT / name)
        ]
        (OUT / "corruption.json").write_text(
            json.dumps(
                {"good": "mixed-v1.qem", "cases": cases, "decode_cases": decoding}, sort_keys=True
            )
            + "\n"
        )
    print(OUT)


if __name__ == "__main__":
    main()
