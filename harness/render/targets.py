"""Where rendered files go, and how they are written (replaceable, atomic, no fsync)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, func, select

from harness.fsio import replace_file
from harness.history.index_db import RecordRow

#: Rendered files are ordinary, replaceable files (records are the read-only ones).
RENDERED_MODE = 0o644


@dataclass(frozen=True)
class RenderTargets:
    """Where rendered files go (the history itself, or ``render index --out DIR``)."""

    root: Path

    @property
    def index_json(self) -> Path:
        return self.root / "index.json"

    @property
    def timings_csv(self) -> Path:
        return self.root / "timings.csv"

    @property
    def readme(self) -> Path:
        return self.root / "README.md"

    @property
    def html(self) -> Path:
        """The dashboard's overview page (``docs/dashboard.md``)."""
        return self.root / "index.html"

    def plot(self, key: str) -> Path:
        return self.root / "plots" / f"{key}.png"

    def key_page(self, key: str) -> Path:
        return self.root / "dashboard" / "keys" / f"{key}.html"

    def record_page(self, sha256: str) -> Path:
        return self.root / "dashboard" / "records" / record_page_name(sha256)

    @property
    def assets(self) -> Path:
        return self.root / "dashboard" / "assets"


def record_page_name(sha256: str) -> str:
    """A record page's file name (in the folder of :meth:`RenderTargets.record_page`)."""
    return f"{sha256}.html"


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` via a temporary file and rename (derived files: no fsync)."""
    replace_file(path, data, step=f"rendering {path.name}", mode=RENDERED_MODE)


def max_seq(connection: Connection) -> int:
    return connection.execute(select(func.max(RecordRow.seq))).scalar() or 0


def appendable(
    connection: Connection, state: Any, size: int, new_seqs: list[int], newest: int
) -> bool:
    """True when a file holds exactly what was rendered up to the seq before ``new_seqs``
    (the largest one below them: a server's seqs may have gaps, a registration that
    failed there used one up)."""
    if not (new_seqs and state is not None and state.get("bytes") == size):
        return False
    before = connection.execute(
        select(func.max(RecordRow.seq)).where(RecordRow.seq < min(new_seqs))
    ).scalar()
    return state.get("seq") == (before or 0) and max(new_seqs) == newest


def all_keys(connection: Connection) -> list[str]:
    return list(
        connection.execute(
            select(RecordRow.comparison_key).distinct().order_by(RecordRow.comparison_key)
        ).scalars()
    )


def latest_seq_of(connection: Connection, key: str) -> int:
    return (
        connection.execute(
            select(func.max(RecordRow.seq)).where(RecordRow.comparison_key == key)
        ).scalar()
        or 0
    )


def records_in_key(connection: Connection, key: str) -> int:
    return connection.execute(
        select(func.count()).select_from(RecordRow).where(RecordRow.comparison_key == key)
    ).scalar_one()


def keys_of(connection: Connection, seqs: list[int]) -> set[str]:
    if not seqs:
        return set()
    return set(
        connection.execute(
            select(RecordRow.comparison_key).where(RecordRow.seq.in_(seqs))
        ).scalars()
    )
