"""The untimed ``.qem`` copy of an ARINA source, written as a user saves it.

io-scale's ``--load-only`` and the compute kind's ``--format qem`` both load a ``.qem``
they do not time the making of: one way to write it (``quantem.stem4d.io.save``, no
verification, no source hashes), so both time loads of the same file.
"""

from __future__ import annotations

from pathlib import Path

import quantem.stem4d.io
from quantem.stem4d.io.arina import open_arina
from quantem.stem4d.io.qem import format as qem_format


def write_qem_untimed(
    master: Path, qem_path: Path, index_dir: Path, version: int = qem_format.VERSION_MAJOR
) -> None:
    """Write ``master``'s acquisition to ``qem_path`` (format ``version``), unverified."""
    source = open_arina(master, index_dir=str(index_dir))
    quantem.stem4d.io.save(source, qem_path, verify=False, source_hashes=False, version=version)
