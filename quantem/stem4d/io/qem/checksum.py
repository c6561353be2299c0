"""Checksums of ``.qem`` files: XXH3-64 with seed 0 (``docs/qem-format.md`` §1, §9)."""

from __future__ import annotations

from typing import Final

import xxhash

#: XXH3-64 of zero bytes (the checksum of a ZERO block's empty extent).
EMPTY_XXH3: Final = 0x2D06800538D394C2


def xxh3(data: bytes | memoryview) -> int:
    """XXH3-64 (seed 0) of ``data`` as an unsigned integer."""
    return xxhash.xxh3_64_intdigest(data)


assert xxh3(b"") == EMPTY_XXH3
