"""A record page decodes its record through orjson where that gives what ``json.loads``
gives, and through ``json`` itself elsewhere: the same values (types, float bits, key
order) or the same refusal, on crafted bytes."""

from __future__ import annotations

import json
import math
import random
import struct

import pytest

from harness.render.record_pages import _decode_json, _may_hold_a_long_integer
from harness.report import dump_report
from harness.testing import make_example_report

CRAFTED = [
    b'{"a": 18446744073709551615, "b": 18446744073709551616}',  # beyond 64 bits: json's
    b'{"n": -9223372036854775809, "m": -9223372036854775808}',
    b'{"n": 123456789012345678901234567890}',
    b'{"s": "1234567890123456789", "t": 1}',  # 19 digits in a string: json's too
    b'{"x": -0, "y": -0.0, "z": 1E+2, "w": 123.456e2, "v": 4.9e-324, "u": 1e-400}',
    b'{"big": 1e400}',  # orjson refuses: json gives inf
    b'{"nan": NaN, "inf": -Infinity}',
    b'{"lone": "\\ud800", "pair": "\\ud83d\\ude00", "e": "\\u00e9 \xc3\xa9"}',
    b'{"dup": 1, "dup": 2, "b": [true, false, null, {}, []]}',
    b'  [1, 2.5, "three"]  ',
]


def _same(a, b) -> bool:
    """Equal values of equal types, floats bit for bit (-0.0, NaN included)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("data", CRAFTED)
def test_crafted_bytes_decode_as_json_decodes_them(data: bytes) -> None:
    assert _same(_decode_json(data), json.loads(data))


@pytest.mark.parametrize(
    ("data", "long"),
    [
        (b"[1234567890123456789]", True),
        (b"[0.1234567890123456789, 0.12345678901234567890]", False),
        (b'["a1234567890123456789", 0.5]', True),
        (b"[1e1234567890123456789]", True),
        (b"[12345678901234567.5]", False),
        (b"[0.5, 12345678901234567890]", True),
    ],
)
def test_long_integers_are_told_from_fractions(data: bytes, long: bool) -> None:
    assert _may_hold_a_long_integer(data) is long


@pytest.mark.parametrize("data", [b'{"a": 1', b"\xff{}", b'{"a": 01}', b""])
def test_bytes_json_refuses_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(data)
    with pytest.raises(ValueError):
        _decode_json(data)


def test_reports_and_random_floats_decode_as_json_decodes_them() -> None:
    data = dump_report(make_example_report(3, reps=4, base_seconds=3e-6))
    assert _same(_decode_json(data), json.loads(data))
    generator = random.Random(15)
    values = []
    while len(values) < 3000:
        value = struct.unpack("<d", generator.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            values.append(value)
    # short forms (orjson's path: fractions of up to 17 significant digits) and long
    # ones (json's: integral parts of hundreds of digits)
    short = ("[" + ", ".join(f"{v!r}, {v:.17e}, {v:.3g}" for v in values) + "]").encode()
    assert not _may_hold_a_long_integer(short)
    assert _same(_decode_json(short), json.loads(short))
    data = ("[" + ", ".join(f"{v:.25e}, {v:.6f}" for v in values) + "]").encode()
    assert _may_hold_a_long_integer(data)
    assert _same(_decode_json(data), json.loads(data))
