"""The evidence-store contract, passed unchanged by the history folder and by PostgreSQL
(issue 15), and what only the server enforces: insert-only tables, a key checked
against the bytes on insert."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.errors import HistoryError
from harness.history.evidence_store import FolderStore
from harness.history.journal import GENESIS_HEAD
from harness.history.records import sha256_bytes
from harness.report import dump_report
from harness.testing import make_example_report

STAMP = "2026-12-01T12:00:00.000000Z"


def _report(seed: int) -> bytes:
    return dump_report(make_example_report(seed, reps=2))


class StoreContract:
    """Every evidence store passes these; a subclass provides the ``store`` fixture."""

    def test_register_read_and_identical_bytes_are_a_no_op(self, store) -> None:
        data = _report(1)
        first = store.register(data, source="a.json", registered_utc=STAMP)
        assert first.created and first.sha256 == sha256_bytes(data)
        again = store.register(data, source="b.json", registered_utc=STAMP)
        assert not again.created and again.sha256 == first.sha256
        assert store.read(first.sha256) == data
        assert len(store.journal_lines()) == 1
        with pytest.raises(HistoryError):
            store.read("0" * 64)

    def test_the_journal_is_a_hash_chain_with_a_head(self, store) -> None:
        assert store.head() == GENESIS_HEAD
        heads = []
        for seed in range(3):
            store.register(_report(seed), source=f"{seed}.json", registered_utc=STAMP)
            heads.append(store.head())
        lines = store.journal_lines()
        assert len(lines) == 3 and heads[-1] == sha256_bytes(lines[-1])
        check = store.check(expect_head=heads[0])
        assert check.ok and check.head == heads[-1] and check.records == 3, check.problems
        assert not store.check(expect_head="f" * 64).ok

    def test_journal_lines_are_the_folder_format(self, store, tmp_path: Path) -> None:
        folder = FolderStore(tmp_path / "reference")
        for seed in range(2):
            for target in (store, folder):
                target.register(_report(seed), source=f"{seed}.json", registered_utc=STAMP)
        assert store.journal_lines() == folder.journal_lines()
        assert store.head() == folder.head()


class TestFolderStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> FolderStore:
        return FolderStore(tmp_path / "h")


@pytest.mark.slow  # a server start and a database per test: seconds, not milliseconds
class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, postgres_url):  # noqa: F811
        from sqlalchemy import create_engine

        from harness.history.postgres import PostgresStore, install_schema

        engine = create_engine(postgres_url)
        install_schema(engine)
        install_schema(engine)  # idempotent
        yield PostgresStore(engine)
        engine.dispose()

    @pytest.mark.parametrize(
        "statement",
        [
            "UPDATE evidence_records SET data = 'x'::bytea",
            "DELETE FROM evidence_records",
            "UPDATE evidence_journal SET line = 'x'::bytea",
            "DELETE FROM evidence_journal",
            "TRUNCATE evidence_journal",
        ],
    )
    def test_records_and_journal_are_insert_only_on_the_server(self, store, statement) -> None:
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        store.register(_report(1), source="a.json", registered_utc=STAMP)
        with pytest.raises(DBAPIError, match="insert-only"), store.engine.begin() as connection:
            connection.execute(text(statement))
        assert store.check().ok

    def test_the_server_recomputes_the_key(self, store) -> None:
        from sqlalchemy.exc import DBAPIError

        from harness.history.postgres import records_table

        refused = pytest.raises(DBAPIError, match="does not match the SHA-256")
        with refused, store.engine.begin() as connection:
            connection.execute(records_table.insert().values(sha256="a" * 64, data=b"{}"))

    def test_a_superusers_edit_is_reported_by_check(self, store) -> None:
        from sqlalchemy import text

        result = store.register(_report(1), source="a.json", registered_utc=STAMP)
        store.register(_report(2), source="b.json", registered_utc=STAMP)
        kept = store.head()
        with store.engine.begin() as connection:
            connection.execute(text("ALTER TABLE evidence_records DISABLE TRIGGER USER"))
            connection.execute(
                text("UPDATE evidence_records SET data = data || 'x'::bytea WHERE sha256 = :s"),
                {"s": result.sha256},
            )
        problems = store.check().problems
        assert any("no longer match" in p for p in problems), problems
        with store.engine.begin() as connection:
            connection.execute(text("ALTER TABLE evidence_journal DISABLE TRIGGER USER"))
            connection.execute(text("DELETE FROM evidence_journal WHERE seq = 2"))
        assert any("not a link" in p for p in store.check(expect_head=kept).problems)

    def test_concurrent_registrations_keep_one_chain(self, store, postgres_url) -> None:  # noqa: F811
        context = multiprocessing.get_context("spawn")
        with context.Pool(4) as pool:
            pool.starmap(_register_some, [(postgres_url, first) for first in (0, 0, 5, 5)])
        check = store.check()
        assert check.ok, check.problems
        assert check.records == 10 and len(store.journal_lines()) == 10


def _register_some(url: str, first: int) -> None:
    from sqlalchemy import create_engine

    from harness.history.postgres import PostgresStore

    engine = create_engine(url)
    store = PostgresStore(engine)
    for seed in range(first, first + 5):
        store.register(_report(seed), source=f"{seed}.json", registered_utc=STAMP)
    engine.dispose()
