"""A history on a PostgreSQL server as a :class:`~harness.history.backend.HistoryBackend`.

The evidence (records, journal, calibrations) and the index live in one database
(:mod:`harness.history.postgres` defines the tables and the server-side rules,
:mod:`harness.history.remote` connects and sets up, :mod:`harness.history.server_index`
checks and rebuilds the index).
This module answers the contract's questions with SQL; the rules shared with a folder
(prefix lookup, hash checks, which calibrations are sound) come from
:mod:`harness.history.backend` and :mod:`harness.history.lookup`, written once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from harness.errors import HistoryError
from harness.history.backend import (
    CalibrationParser,
    HistoryCheck,
    IndexedHistory,
    IndexRebuild,
    RegisteredReport,
    calibration_problems,
    checked_bytes,
)
from harness.history.evidence_store import StoreCheck, StoredRecord
from harness.history.layout import record_relpath
from harness.history.lookup import one_match, parse_sha_prefix
from harness.history.postgres import (
    PostgresStore,
    calibrations_table,
    records_table,
    server_name,
    server_step,
)
from harness.history.records import sha256_bytes
from harness.history.remote import open_url_store
from harness.history.server_index import (
    check_server_index,
    rebuild_server_index,
    unindexed_records,
)


class ServerHistory(IndexedHistory):
    """The history in the PostgreSQL database at a URL (``--history-url``)."""

    holds_rendered_files = False

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.where = server_name(store.engine.url)

    @classmethod
    def open(cls, url: str) -> ServerHistory:
        """Connect; HistoryError when unreachable, not set up or at another schema."""
        return cls(open_url_store(url))

    def close(self) -> None:
        self.store.engine.dispose()

    def exists(self) -> bool:
        return True  # open_url_store refused a database that is not set up

    def location_arguments(self) -> list[str]:
        return ["--history-url", self.where]

    # the evidence store
    def register(self, data: bytes, *, source: str, registered_utc: str) -> StoredRecord:
        return self.store.register(data, source=source, registered_utc=registered_utc)

    def read(self, sha256: str) -> bytes:
        return self.store.read(sha256)

    def head(self) -> str:
        return self.store.head()

    def journal_lines(self) -> list[bytes]:
        return self.store.journal_lines()

    def check(self, *, expect_head: str | None = None) -> StoreCheck:
        return self.store.check(expect_head=expect_head)

    # records
    def register_reports(
        self, prepared: Sequence, *, render: Callable | None = None
    ) -> list[RegisteredReport]:
        """Each report in its own transaction, indexed there; ``render`` is not called
        (a server holds no rendered files)."""
        from harness.history.journal import utc_now

        done = []
        for report in prepared:
            stored = self.store.register(
                report.data, source=report.source, registered_utc=utc_now(), prepared=report
            )
            if stored.created:
                message = f"stored {stored.sha256} from {report.source}"
            else:
                message = (
                    f"already stored {stored.sha256} (identical bytes from {report.source}; "
                    "nothing written)"
                )
            done.append((stored, message))
        head = self.store.head()
        return [RegisteredReport(s.sha256, s.created, m, head) for s, m in done]

    def record_label(self, sha256: str) -> str:
        return f"{self.where}/{record_relpath(sha256)}"

    def match_prefix(self, prefix: str, *, what: str = "") -> str:
        from sqlalchemy import select

        prefix = parse_sha_prefix(prefix, what=what)
        with _reading(self.store, "looking a record up") as connection:
            matches = list(
                connection.execute(
                    select(records_table.c.sha256)
                    .where(records_table.c.sha256.startswith(prefix, autoescape=True))
                    .order_by(records_table.c.sha256)
                    .limit(6)
                ).scalars()
            )
        return one_match(matches, prefix, self.where, what)

    def read_checked(self, sha256: str) -> bytes:
        return checked_bytes(sha256, self.store.read(sha256), self.record_label(sha256))

    def count_records(self) -> int:
        from sqlalchemy import func, select

        with _reading(self.store, "counting the records") as connection:
            return connection.execute(select(func.count()).select_from(records_table)).scalar_one()

    def _record_rows(self) -> Iterator[tuple[str, bytes]]:
        from sqlalchemy import select

        with _reading(self.store, "reading the records") as connection:
            rows = connection.execution_options(yield_per=500).execute(
                select(records_table.c.sha256, records_table.c.data).order_by(
                    records_table.c.sha256
                )
            )
            for sha256, data in rows:
                yield sha256, bytes(data)

    # index
    def _index_connection(self, step: str):
        return _reading(self.store, step)

    def unindexed(self) -> list[str]:
        return unindexed_records(self.store)

    # calibrations: a table of their own (none on a database set up before calibrations
    # were kept on servers: init-db adds it)
    def _has_calibrations(self, connection) -> bool:
        from sqlalchemy import inspect

        return inspect(connection).has_table(calibrations_table.name)

    def _calibrations_missing(self) -> HistoryError:
        return HistoryError(
            f"{self.where}: no table {calibrations_table.name} (set up before calibrations "
            "were kept on servers); run `harness history init-db URL` as its owner"
        )

    def calibration_rows(self) -> list[tuple[str, bytes]]:
        from sqlalchemy import select

        with _reading(self.store, "reading the calibrations") as connection:
            if not self._has_calibrations(connection):
                return []
            rows = connection.execute(
                select(calibrations_table.c.sha256, calibrations_table.c.data).order_by(
                    calibrations_table.c.sha256
                )
            ).all()
        return [(sha, bytes(data)) for sha, data in rows]

    def calibration_label(self, sha256: str) -> str:
        return f"{self.where}/calibrations/{record_relpath(sha256)}"

    def require_calibrations(self) -> None:
        with _reading(self.store, "looking for the calibrations") as connection:
            if not self._has_calibrations(connection):
                raise self._calibrations_missing()

    def store_calibration(self, data: bytes) -> tuple[str, bool]:
        """Identical bytes are a no-op (the caller has validated them)."""
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        sha256 = sha256_bytes(data)
        with (
            server_step(self.store.engine, f"storing calibration {sha256}"),
            self.store.engine.begin() as connection,
        ):
            if not self._has_calibrations(connection):
                raise self._calibrations_missing()
            inserted = connection.execute(
                pg_insert(calibrations_table)
                .values(sha256=sha256, data=data)
                .on_conflict_do_nothing(index_elements=["sha256"])
                .returning(calibrations_table.c.sha256)
            ).first()
        return sha256, inserted is not None

    # rendering: from a copy of the server that the output folder keeps
    def rendering(self, out, *, options, on_copy=None):
        """:func:`harness.history.snapshot.render_copy` of this server into ``out``."""
        from harness.history.snapshot import render_copy

        return render_copy(self.store, out, options=options, on_copy=on_copy)

    # checks
    def verify(
        self,
        *,
        expect_head: str | None = None,
        records_only: bool = False,
        check_rendered: Callable | None = None,
        parse_calibration: CalibrationParser | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> HistoryCheck:
        """The store's check and the index check; ``records_only``, ``check_rendered``
        and ``progress`` have nothing to act on here (the index is always kept, no
        rendered files are)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            # the re-hash and chain walk (hashing and the server's reads, mostly outside
            # the GIL) beside the index check (deriving rows, in Python): two cores
            stored = pool.submit(self.store.check, expect_head=expect_head)
            index_problems = check_server_index(self.store)
            check = stored.result()
        problems = check.problems + index_problems
        if parse_calibration is not None:
            problems += calibration_problems(self, parse_calibration)
        return HistoryCheck(check.records, [f"error: {p}" for p in problems], [], check.head)

    def rebuild(
        self, *, render: Callable | None = None, progress: Callable[[int], None] | None = None
    ) -> IndexRebuild:
        """The index, in one transaction, as the database's owner; ``render`` is not
        called (no rendered files here)."""
        result = rebuild_server_index(self.store)
        return IndexRebuild(
            result.indexed,
            [f"error: {p}" for p in result.errors],
            [f"warning: {p}" for p in [*result.unregistered, *result.invalid]],
            f"indexed {result.indexed} records; {len(result.unregistered)} unregistered "
            f"records and {len(result.invalid)} invalid records listed, not indexed",
        )


@contextmanager
def _reading(store: PostgresStore, step: str):
    """A connection for one read, its failures named as ``step``."""
    with server_step(store.engine, step), store.engine.connect() as connection:
        yield connection
