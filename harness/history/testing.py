"""The conformance suite every history backend passes (zarr's ``testing/store.py`` pattern).

:class:`HistoryBackendTests` holds the tests; a backend's test module subclasses it and
provides a fresh, empty history (the ``history`` fixture) and three ways to put what no
sound writer would into it (an edit, a record and a calibration that bypass
validation), so that both backends are shown to treat damage and poison alike::

    class TestFolderHistory(HistoryBackendTests):
        @pytest.fixture
        def history(self, tmp_path):
            return FolderHistory(tmp_path / "h")

        def tamper_record(self, history, sha256, data): ...
        def inject_record(self, history, data): ...
        def inject_calibration(self, history, data): ...

``tests/test_history_backends.py`` runs it for the folder and for PostgreSQL. It needs
pytest (a test dependency), and imports it only here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HistoryError, ReportValidationError, UsageError
from harness.history.backend import (
    HistoryBackend,
    intact_calibrations,
    load_reference,
)
from harness.history.journal import GENESIS_HEAD
from harness.history.records import sha256_bytes
from harness.history.store import prepare_report
from harness.report import dump_report
from harness.testing import make_example_report

STAMP = "2026-12-01T12:00:00.000000Z"
#: The schema name a server requires of a calibration's bytes before it stores them.
CALIBRATION_SCHEMA = "quantem-harness/calibration-report"
#: Poison: a JSON object that is neither a report nor a calibration.
EMPTY_DOCUMENT = b"{}"


def example_report(seed: int) -> bytes:
    """A valid report's bytes, one per seed, created in seed order."""
    doc = make_example_report(seed, reps=2, created_utc=f"2026-11-30T08:{seed:02d}:00Z")
    return dump_report(doc)


def example_calibration(seed: int) -> bytes:
    """Bytes a backend stores as a calibration (it validates no more than the schema
    name; the caller validates the document, as :func:`parse_example_calibration` does)."""
    doc = {"schema": CALIBRATION_SCHEMA, "seed": seed}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("ascii")


def parse_example_calibration(data: bytes, name: str) -> dict:
    """The calibration parser :meth:`HistoryBackend.verify` is given in these tests."""
    doc = json.loads(data)
    if doc.get("schema") != CALIBRATION_SCHEMA or "seed" not in doc:
        raise ReportValidationError(f"{name}: not a calibration report")
    return doc


class HistoryBackendTests:
    """Every :class:`~harness.history.backend.HistoryBackend` passes these."""

    # what a subclass provides
    def tamper_record(self, history: HistoryBackend, sha256: str, data: bytes) -> None:
        """Replace a stored record's bytes by hand (an edit no writer can make)."""
        raise NotImplementedError

    def inject_record(self, history: HistoryBackend, data: bytes) -> str:
        """Store and journal ``data`` under its SHA-256 without validating it (an older
        writer, or an owner's edit); its SHA-256."""
        raise NotImplementedError

    def inject_calibration(self, history: HistoryBackend, data: bytes) -> str:
        """Store ``data`` as a calibration without validating it; its SHA-256."""
        raise NotImplementedError

    # helpers
    def register(self, history: HistoryBackend, *seeds: int) -> list[str]:
        prepared = [prepare_report(example_report(s), name=f"{s}.json") for s in seeds]
        return [r.sha256 for r in history.register_reports(prepared)]

    # the contract
    def test_is_a_history_backend(self, history) -> None:
        assert isinstance(history, HistoryBackend)
        assert isinstance(history.where, str) and history.where

    def test_register_read_list_and_the_journal(self, history) -> None:
        assert history.head() == GENESIS_HEAD and history.journal_lines() == []
        shas = self.register(history, 1, 2, 3)
        assert shas == [sha256_bytes(example_report(s)) for s in (1, 2, 3)]
        assert history.exists() and history.count_records() == 3
        assert [history.read_checked(sha) for sha in shas] == [example_report(s) for s in (1, 2, 3)]
        lines = history.journal_lines()
        assert len(lines) == 3 and history.head() == sha256_bytes(lines[-1])
        assert [row.sha256 for row in history.list_records()] == shas
        assert [row.sha256 for row in history.list_records(limit=2)] == shas[1:]
        key = history.list_records()[0].comparison_key
        assert all(row.comparison_key == key for row in history.list_records(key=key))
        assert history.list_records(key="0" * 16) == []
        assert history.newest_candidate() == shas[-1]
        assert sorted(sha for sha, _ in history.iter_reports()) == sorted(shas)
        assert history.unindexed() == []

    def test_identical_bytes_are_a_no_op(self, history) -> None:
        (first,) = self.register(history, 1)
        (again,) = history.register_reports([prepare_report(example_report(1), name="b.json")])
        assert again.sha256 == first and not again.created
        assert again.message.startswith(f"already stored {first}")
        assert again.journal_head == history.head() and len(history.journal_lines()) == 1

    def test_journal_lines_are_the_folder_format(self, history, tmp_path: Path) -> None:
        from harness.history.evidence_store import FolderStore

        reference = FolderStore(tmp_path / "reference")
        for seed in range(2):
            for target in (history, reference):
                target.register(example_report(seed), source=f"{seed}.json", registered_utc=STAMP)
        assert history.journal_lines() == reference.journal_lines()
        assert history.head() == reference.head()

    def test_a_prefix_names_one_record(self, history) -> None:
        shas = self.register(history, 1, 2)
        assert history.match_prefix(shas[0][:12]) == shas[0]
        assert history.match_prefix(shas[1].upper()) == shas[1]
        loaded = load_reference(history, shas[1][:8], what="--baseline")
        assert loaded.sha256 == shas[1] and loaded.doc["created_utc"] == "2026-11-30T08:02:00Z"
        assert loaded.path == Path(history.record_label(shas[1]))
        unknown = next(c for c in "0123456789abcdef" if not any(s.startswith(c) for s in shas))
        with pytest.raises(UsageError, match="no record"):
            history.match_prefix(unknown * 8)
        with pytest.raises(UsageError, match="not a SHA-256 prefix"):
            history.match_prefix("xyz")

    def test_a_file_is_read_as_a_report(self, history, tmp_path: Path) -> None:
        path = tmp_path / "loading.json"
        path.write_bytes(example_report(4))
        loaded = load_reference(history, str(path))
        assert loaded.sha256 == sha256_bytes(example_report(4))
        with pytest.raises(UsageError, match="no such report file"):
            load_reference(history, str(tmp_path / "missing.json"))

    def test_a_sound_history_verifies(self, history) -> None:
        self.register(history, 1, 2)
        history.store_calibration(example_calibration(1))
        check = history.verify(parse_calibration=parse_example_calibration)
        assert check.ok, check.errors
        assert check.records == 2 and check.head == history.head()
        assert not history.verify(expect_head="f" * 64).ok

    def test_a_tampered_record_is_refused_and_reported(self, history) -> None:
        shas = self.register(history, 1, 2)
        self.tamper_record(history, shas[0], example_report(1).replace(b"2026", b"2025", 1))
        with pytest.raises(HistoryError, match="tampered"):
            history.read_checked(shas[0])
        with pytest.raises(HistoryError, match="tampered"):
            load_reference(history, shas[0][:12])
        assert [sha for sha, _ in history.iter_reports()] == [shas[1]]
        check = history.verify()
        assert not check.ok and any(shas[0] in line for line in check.errors)

    def test_calibrations_are_write_once(self, history) -> None:
        self.register(history, 1)  # a folder holds calibrations once it is a history
        history.require_calibrations()
        assert history.calibration_rows() == []
        data = example_calibration(1)
        assert history.store_calibration(data) == (sha256_bytes(data), True)
        assert history.store_calibration(data) == (sha256_bytes(data), False)
        other = example_calibration(2)
        history.store_calibration(other)
        expected = sorted([(sha256_bytes(data), data), (sha256_bytes(other), other)])
        assert history.calibration_rows() == expected
        assert intact_calibrations(history) == expected
        assert sha256_bytes(data) in history.calibration_label(sha256_bytes(data))

    def test_poison_is_named_skipped_and_never_wedges(self, history) -> None:
        """A record and a calibration that are no valid documents (an older server let
        them in, or an owner's edit): verify names both, the readers skip them, and a
        rebuild indexes the sound records and names the other."""
        shas = self.register(history, 1, 2)
        poison = self.inject_record(history, EMPTY_DOCUMENT)
        bad_calibration = self.inject_calibration(history, EMPTY_DOCUMENT)
        assert poison == bad_calibration == sha256_bytes(EMPTY_DOCUMENT)
        history.store_calibration(example_calibration(1))

        check = history.verify(parse_calibration=parse_example_calibration)
        assert not check.ok
        assert any(f"record {poison}" in line or f"{poison}.json" in line for line in check.errors)
        assert any(f"calibration {bad_calibration}" in line for line in check.errors)
        assert sorted(sha for sha, _ in history.iter_reports()) == sorted(shas)
        assert [row.sha256 for row in history.list_records()] == shas
        assert history.unindexed() == [poison]
        assert [sha for sha, _ in intact_calibrations(history)] == sorted(
            [bad_calibration, sha256_bytes(example_calibration(1))]
        )

        rebuilt = history.rebuild()
        assert rebuilt.indexed == 2
        assert any(poison in line for line in rebuilt.errors + rebuilt.warnings)
        assert [row.sha256 for row in history.list_records()] == shas
        assert history.newest_candidate() == shas[-1]

    def test_it_names_itself_for_a_command(self, history) -> None:
        flag, where = history.location_arguments()
        assert flag in ("--history-dir", "--history-url") and where

    def test_a_render_reads_every_indexed_record(self, history, tmp_path: Path) -> None:
        """:meth:`HistoryBackend.rendering` gives a history folder whose index holds the
        records, whatever holds the history; the render draws into ``out``."""
        from sqlalchemy import select

        from harness.history.index_db import RecordRow

        shas = self.register(history, 1, 2)
        out = tmp_path / "rendered"
        options = lambda: {"plots": False, "git_order": ""}  # noqa: E731
        with history.rendering(out, options=options) as source:
            with source.engine.connect() as connection:
                rows = connection.execute(select(RecordRow.sha256).order_by(RecordRow.seq))
                indexed = list(rows.scalars())
            assert indexed == shas
            for sha in shas:
                assert source.layout.record_path(sha).read_bytes() == history.read_checked(sha)
            assert (source.out or source.layout.root) == out

    def test_a_copy_keeps_the_journal_and_is_idempotent(self, history, tmp_path: Path) -> None:
        """``history push``: records copied with their journal entries (same head), the
        calibrations too; a second copy copies nothing."""
        from harness.history.copying import copy_evidence
        from harness.history.folder_history import FolderHistory

        source = FolderHistory(tmp_path / "source")
        self.register(source, 1, 2)
        source.store_calibration(example_calibration(1))
        first = copy_evidence(source, history)
        assert (first.copied, first.present, first.calibrations_copied) == (2, 0, 1)
        assert history.journal_lines() == source.journal_lines()
        assert first.head_to == history.head() == source.head()
        again = copy_evidence(source, history)
        assert (again.copied, again.present, again.calibrations_present) == (0, 2, 1)
        assert history.calibration_rows() == source.calibration_rows()
