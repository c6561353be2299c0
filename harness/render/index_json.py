"""``index.json``: every record's entry, one per line, in index order (``docs/history-format.md``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlalchemy import Connection, select

from harness.fsio import FileWriteError
from harness.history.index_db import RecordRow, read_meta_json, write_meta
from harness.history.journal import GENESIS_HEAD
from harness.render.targets import appendable, max_seq, write_atomic

INDEX_JSON_FORMAT = "quantem-harness/history-index"
#: 2: the journal's head follows the records (``"journal_head"``).
INDEX_JSON_VERSION = 2
META_INDEX_JSON = "render.index_json"


def _index_json_tail(head: str) -> bytes:
    """The closing of index.json, naming the journal head (always the same length)."""
    return f'\n],"journal_head":"{head}"}}\n'.encode("ascii")


_INDEX_JSON_TAIL_LENGTH = len(_index_json_tail(GENESIS_HEAD))
_INDEX_JSON_TAIL_PATTERN = re.compile(rb'\n\],"journal_head":"[0-9a-f]{64}"\}\n')


def _index_json_head() -> bytes:
    header = json.dumps(
        {"format": INDEX_JSON_FORMAT, "version": INDEX_JSON_VERSION},
        sort_keys=True,
        separators=(",", ":"),
    )[:-1]
    return f'{header},"records":['.encode("ascii")


def build_index_json(connection: Connection, head: str = GENESIS_HEAD) -> bytes:
    """index.json: a header, one record entry per line in index order, the journal head."""
    entries = (
        connection.execute(select(RecordRow.index_entry).order_by(RecordRow.seq)).scalars().all()
    )
    tail = _index_json_tail(head)
    if not entries:
        return _index_json_head() + tail
    return _index_json_head() + b"\n" + ",\n".join(entries).encode("ascii") + tail


def update_index_json(
    connection: Connection, path: Path, new_seqs: list[int], head: str = GENESIS_HEAD
) -> None:
    """Append new entries before the closing bracket when the file is as last rendered."""
    state = read_meta_json(connection, META_INDEX_JSON)
    size = path.stat().st_size if path.exists() else -1
    newest = max_seq(connection)
    tail = _index_json_tail(head)
    if (
        appendable(connection, state, size, new_seqs, newest)
        and size > len(_index_json_head()) + _INDEX_JSON_TAIL_LENGTH
    ):
        entries = connection.execute(
            select(RecordRow.index_entry)
            .where(RecordRow.seq >= min(new_seqs))
            .order_by(RecordRow.seq)
        ).scalars()
        addition = b",\n" + ",\n".join(entries).encode("ascii") + tail
        try:
            with open(path, "r+b") as handle:
                handle.seek(size - _INDEX_JSON_TAIL_LENGTH)
                if not _INDEX_JSON_TAIL_PATTERN.fullmatch(handle.read()):
                    addition = b""
                else:
                    handle.seek(size - _INDEX_JSON_TAIL_LENGTH)
                    handle.write(addition)
                    handle.truncate()
        except OSError as exc:
            raise FileWriteError(path, "appending the new records to index.json", exc) from exc
        if addition:
            written = size - _INDEX_JSON_TAIL_LENGTH + len(addition)
            write_meta(
                connection,
                META_INDEX_JSON,
                json.dumps({"bytes": written, "head": head, "seq": newest}),
            )
            return
    if (
        state is not None
        and state.get("bytes") == size
        and state.get("seq") == newest
        and state.get("head") == head
    ):
        return
    write_index_json(connection, path, record_state=True, head=head)


def write_index_json(
    connection: Connection, path: Path, *, record_state: bool, head: str = GENESIS_HEAD
) -> None:
    data = build_index_json(connection, head)
    write_atomic(path, data)
    if record_state:
        write_meta(
            connection,
            META_INDEX_JSON,
            json.dumps({"bytes": len(data), "head": head, "seq": max_seq(connection)}),
        )
