"""The history-backend conformance suite (:mod:`harness.history.testing`), run for the
history folder and for PostgreSQL: one contract, two implementations, the same answers,
damage and poison included (issue 33)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.history.evidence_store import journal_line
from harness.history.folder_history import FolderHistory
from harness.history.journal import append_journal
from harness.history.layout import CALIBRATIONS_DIR, HistoryLayout
from harness.history.lock import locked_history
from harness.history.records import sha256_bytes, write_record
from harness.history.testing import STAMP, HistoryBackendTests


class TestFolderHistory(HistoryBackendTests):
    @pytest.fixture
    def history(self, tmp_path: Path) -> FolderHistory:
        return FolderHistory(tmp_path / "h")

    def tamper_record(self, history, sha256: str, data: bytes) -> None:
        path = HistoryLayout.at(history.root).record_path(sha256)
        os.chmod(path, 0o644)
        path.write_bytes(data)

    def inject_record(self, history, data: bytes) -> str:
        with locked_history(history.root) as layout:
            sha256 = write_record(layout, data).sha256
            append_journal(
                layout, [{"registered_utc": STAMP, "sha256": sha256, "source": "by hand"}]
            )
        return sha256

    def inject_calibration(self, history, data: bytes) -> str:
        with locked_history(history.root):
            return write_record(HistoryLayout.at(history.root / CALIBRATIONS_DIR), data).sha256


def _owner_edit(history, *statements: tuple[str, dict]) -> None:
    """Run ``statements`` as the database's owner with the evidence triggers off."""
    from sqlalchemy import text

    tables = ("evidence_records", "evidence_journal", "evidence_calibrations")
    with history.store.engine.begin() as connection:
        for table in tables:
            connection.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
        for statement, values in statements:
            connection.execute(text(statement), values)
        for table in tables:
            connection.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER USER"))


@pytest.mark.slow  # a server start and a database per test: seconds, not milliseconds
class TestPostgresHistory(HistoryBackendTests):
    @pytest.fixture
    def history(self, postgres_url):  # noqa: F811
        from harness.history.opening import open_history
        from harness.history.remote import init_database

        init_database(postgres_url)
        history = open_history(postgres_url)
        yield history
        history.close()

    def tamper_record(self, history, sha256: str, data: bytes) -> None:
        _owner_edit(
            history,
            ("UPDATE evidence_records SET data = :d WHERE sha256 = :s", {"d": data, "s": sha256}),
        )

    def inject_record(self, history, data: bytes) -> str:
        sha256 = sha256_bytes(data)
        entry = {"registered_utc": STAMP, "sha256": sha256, "source": "by hand"}
        line = journal_line(entry, history.head())
        _owner_edit(
            history,
            ("INSERT INTO evidence_records VALUES (:s, :d)", {"s": sha256, "d": data}),
            (
                "INSERT INTO evidence_journal (line, link, sha256) VALUES (:l, :k, :s)",
                {"l": line, "k": sha256_bytes(line), "s": sha256},
            ),
        )
        return sha256

    def inject_calibration(self, history, data: bytes) -> str:
        sha256 = sha256_bytes(data)
        _owner_edit(
            history, ("INSERT INTO evidence_calibrations VALUES (:s, :d)", {"s": sha256, "d": data})
        )
        return sha256


def test_commands_never_ask_which_backend_they_have() -> None:
    """Issue 33: the commands and the runs work on the contract; none branches on a URL,
    none reads a history folder by its path, and only ``init-db`` (setting a server up)
    calls the server module."""
    harness = Path(__file__).resolve().parents[1] / "harness"
    asking = [
        f"{path.relative_to(harness)}:{number}"
        for folder in ("commands", "run", "selfbench")
        for path in sorted((harness / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "url is not None" in line
        or (folder != "commands" and "history_url" in line)
        or ("history.remote import" in line and "init_database" not in line)
        or (folder == "run" and "history_dir" in line)
    ]
    assert asking == []


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "list"],
        ["history", "head"],
        ["history", "verify"],
        ["history", "changes"],
        ["compare", "--baseline", "PREFIX"],
        ["render", "index"],
    ],
)
def test_the_cli_opens_a_commands_history_once(argv, tmp_path: Path, monkeypatch) -> None:
    from harness.cli import main
    from harness.history import opening
    from harness.history.store import prepare_report
    from harness.history.testing import example_report

    history = FolderHistory(tmp_path / "h")
    (stored,) = history.register_reports([prepare_report(example_report(1), name="1.json")])
    argv = [stored.sha256[:12] if a == "PREFIX" else a for a in argv]
    opened = []
    real = opening.open_history

    def counting(location, **options):
        opened.append(str(location))
        return real(location, **options)

    monkeypatch.setattr(opening, "open_history", counting)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--history-dir", str(tmp_path / "h")]) in (0, 1)
    assert opened == [str(tmp_path / "h")]
