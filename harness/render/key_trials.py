"""The trials each key page draws, gathered from index rows as they are copied.

A key page (:func:`harness.render.keys.collect_key_data`) reads every trial of its key
out of the index: at 100,000 records, four keys of 1,000,000 trial rows, read back out
of the snapshot's SQLite and turned into frames, seconds of CPU a key of a first server
render. :class:`KeyTrialsFromRows` keeps
what the pages need of each trial row as the snapshot copies it (the ``rows_copied``
hook of :func:`harness.history.snapshot.take_snapshot`, beside timings.csv), in
columns of numbers, the text as small codes; :meth:`KeyTrialsFromRows.frame` gives a
key's trials as the frame the index query gives (the same rows, columns and values,
in the copy's order: nothing the page draws depends on the rows' order).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from harness.history.index_db import RecordRow, TrialRow

#: The columns of a key's trials frame, as ``collect_key_data`` names them.
TRIAL_FRAME_COLUMNS = (
    "seq", "acquisition", "format", "cache_state", "seconds", "kept", "label", "trial"
)  # fmt: skip


def _names(model) -> list[str]:
    return [column.name for column in model.__table__.columns]


class KeyTrialsFromRows:
    """Every copied trial row, by key, for the key pages; fed ``rows(table, batch)``
    with the records rows before the trial rows (the snapshot's order)."""

    def __init__(self) -> None:
        record = _names(RecordRow)
        self._record_fields = operator.itemgetter(
            record.index("seq"), record.index("comparison_key")
        )
        trial = _names(TrialRow)
        self._columns = [
            operator.itemgetter(trial.index(name))
            for name in ("record_seq", "seconds", "kept", "trial_index")
        ]
        self._text = operator.itemgetter(
            *(trial.index(name) for name in ("acquisition", "format", "cache_state", "label"))
        )
        self._key_of_seq: dict[int, int] = {}
        self._keys: dict[str, int] = {}
        self._texts: dict[tuple[str, str, str, str], int] = {}
        self._batches: list[tuple[Any, ...]] = []
        self._joined: tuple[Any, ...] | None = None

    def rows(self, table: str, batch: Sequence[Sequence]) -> None:
        import numpy as np

        if table == RecordRow.__tablename__:
            keys = self._keys
            for row in batch:
                seq, key = self._record_fields(row)
                self._key_of_seq[seq] = keys.setdefault(key, len(keys))
        elif table == TrialRow.__tablename__:
            n = len(batch)
            seq_of, seconds_of, kept_of, trial_of = self._columns
            seqs = np.fromiter(map(seq_of, batch), np.int64, n)
            key_of_seq = self._key_of_seq
            keys = np.fromiter((key_of_seq[seq] for seq in map(seq_of, batch)), np.int32, n)
            texts = self._texts
            codes = np.fromiter(
                (texts.setdefault(text, len(texts)) for text in map(self._text, batch)),
                np.int32,
                n,
            )
            self._batches.append(
                (
                    keys,
                    seqs,
                    codes,
                    np.fromiter(map(seconds_of, batch), np.float64, n),
                    np.fromiter(map(kept_of, batch), np.bool_, n),
                    np.fromiter(map(trial_of, batch), np.int64, n),
                )
            )

    def frame(self, key: str) -> Any:
        """The trials of ``key`` as a DataFrame of :data:`TRIAL_FRAME_COLUMNS`."""
        import numpy as np
        import pandas as pd

        if self._joined is None:
            if self._batches:
                self._joined = tuple(np.concatenate(column) for column in zip(*self._batches))
            else:
                self._joined = tuple(
                    np.empty(0, dtype) for dtype in (np.int32, np.int64, np.int32, np.float64,
                                                      np.bool_, np.int64)
                )  # fmt: skip
            self._batches = []
        keys, seqs, codes, seconds, kept, trials = self._joined
        chosen = keys == self._keys.get(key, -1)
        texts = np.empty((len(self._texts), 4), dtype=object)
        for text, code in self._texts.items():
            texts[code] = text
        picked = texts[codes[chosen]] if len(texts) else np.empty((0, 4), dtype=object)
        columns = {
            "seq": seqs[chosen],
            "acquisition": picked[:, 0],
            "format": picked[:, 1],
            "cache_state": picked[:, 2],
            "seconds": seconds[chosen],
            "kept": kept[chosen],
            "label": picked[:, 3],
            "trial": trials[chosen],
        }
        return pd.DataFrame({name: columns[name] for name in TRIAL_FRAME_COLUMNS})
