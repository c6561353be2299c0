"""``index.json``: every record's entry, one per line, in index order (``docs/history-format.md``)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Connection, select

from harness.history.index_db import RecordRow, read_meta_json, write_meta
from harness.render.targets import appendable, max_seq, write_atomic

INDEX_JSON_FORMAT = "quantem-harness/history-index"
INDEX_JSON_VERSION = 1
META_INDEX_JSON = "render.index_json"

_INDEX_JSON_TAIL = b"\n]}\n"


def _index_json_head() -> bytes:
    header = json.dumps(
        {"format": INDEX_JSON_FORMAT, "version": INDEX_JSON_VERSION},
        sort_keys=True,
        separators=(",", ":"),
    )[:-1]
    return f'{header},"records":['.encode("ascii")


def build_index_json(connection: Connection) -> bytes:
    """index.json: a header, then one record entry per line in index order (valid JSON)."""
    entries = (
        connection.execute(select(RecordRow.index_entry).order_by(RecordRow.seq)).scalars().all()
    )
    if not entries:
        return _index_json_head() + b"\n]}\n"
    return _index_json_head() + b"\n" + ",\n".join(entries).encode("ascii") + _INDEX_JSON_TAIL


def update_index_json(connection: Connection, path: Path, new_seqs: list[int]) -> None:
    """Append new entries before the closing bracket when the file is as last rendered."""
    state = read_meta_json(connection, META_INDEX_JSON)
    size = path.stat().st_size if path.exists() else -1
    newest = max_seq(connection)
    if appendable(state, size, new_seqs, newest) and size > len(_index_json_head()) + len(
        _INDEX_JSON_TAIL
    ):
        entries = connection.execute(
            select(RecordRow.index_entry)
            .where(RecordRow.seq >= min(new_seqs))
            .order_by(RecordRow.seq)
        ).scalars()
        addition = b",\n" + ",\n".join(entries).encode("ascii") + _INDEX_JSON_TAIL
        with open(path, "r+b") as handle:
            handle.seek(size - len(_INDEX_JSON_TAIL))
            if handle.read() != _INDEX_JSON_TAIL:
                addition = b""
            else:
                handle.seek(size - len(_INDEX_JSON_TAIL))
                handle.write(addition)
                handle.truncate()
        if addition:
            write_meta(
                connection,
                META_INDEX_JSON,
                json.dumps({"bytes": size - len(_INDEX_JSON_TAIL) + len(addition), "seq": newest}),
            )
            return
    if state is not None and state.get("bytes") == size and state.get("seq") == newest:
        return
    write_index_json(connection, path, record_state=True)


def write_index_json(connection: Connection, path: Path, *, record_state: bool) -> None:
    data = build_index_json(connection)
    write_atomic(path, data)
    if record_state:
        write_meta(
            connection,
            META_INDEX_JSON,
            json.dumps({"bytes": len(data), "seq": max_seq(connection)}),
        )
