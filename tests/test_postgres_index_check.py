"""The server index check of ``history verify --history-url``
(:func:`harness.history.server_index.check_server_index`), which streams the records,
trials and summaries tables merged by record seq: every kind of problem it reports,
found at once on one tampered database, with batches small enough that the merge
crosses batch boundaries inside a record's rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_FAILURE, EXIT_OK
from harness.history import remote, server_index
from harness.history.records import sha256_bytes
from harness.report import dump_report
from harness.testing import make_example_report

#: Every column of the records table but its key (seq) and sha256, to copy a row.
_RECORD_COLUMNS = (
    "path, size_bytes, schema_version, created_utc, git_revision, git_dirty, device_kind, "
    "device_name, device_uuid, storage_id, backend, representation, timing_boundary, "
    "allocator_policy, protocol_version, execution, correctness, source_stability, "
    "performance, exit_code, baseline_sha256, baseline_path, comparison_key, "
    "comparison_fields, index_entry"
)


def _registered(url: str, tmp_path: Path, count: int) -> list[str]:
    shas = []
    for seed in range(count):
        path = tmp_path / f"r{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, reps=2)))
        assert main(["history", "register", str(path), "--history-url", url]) == EXIT_OK
        shas.append(sha256_bytes(path.read_bytes()))
    return shas


@pytest.mark.slow  # a server start
@pytest.mark.parametrize("batch", [2, 5_000], ids=["tiny-batches", "default-batches"])
def test_the_streamed_check_reports_every_kind_of_problem(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch,
    capsys,
    batch: int,
) -> None:
    from sqlalchemy import create_engine, text

    monkeypatch.setattr(server_index, "_CHECK_BATCH", batch)
    monkeypatch.setattr(server_index, "_CHECK_RECORD_BATCH", max(1, batch // 2))
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    shas = _registered(postgres_url, tmp_path, 6)
    capsys.readouterr()
    store = remote.open_url_store(postgres_url)
    try:
        assert server_index.check_server_index(store) == []  # untouched: clean
        not_json = b"not a report"
        fake = "f" * 64
        engine = create_engine(postgres_url)
        with engine.begin() as connection:  # the owner, a superuser, edits by hand
            seq = {sha: s for s, sha in connection.execute(text("SELECT seq, sha256 FROM records"))}
            for table in ("records", "trials", "summaries", "evidence_records"):
                connection.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER ALL"))
            unique = connection.execute(
                text(
                    "SELECT conname FROM pg_constraint WHERE conrelid = 'records'::regclass "
                    "AND contype = 'u'"
                )
            ).scalar_one()
            connection.execute(text(f"ALTER TABLE records DROP CONSTRAINT {unique}"))
            # 1: a trial's seconds and 2: a summary's median changed
            connection.execute(
                text(
                    "UPDATE trials SET seconds = seconds * 2 WHERE id = "
                    "(SELECT max(id) FROM trials WHERE record_seq = :q)"
                ),
                {"q": seq[shas[1]]},
            )
            connection.execute(
                text(
                    "UPDATE summaries SET median = median * 2 WHERE id = "
                    "(SELECT min(id) FROM summaries WHERE record_seq = :q)"
                ),
                {"q": seq[shas[2]]},
            )
            # 3: a records row deleted: its trials and summaries are orphans, its record
            # unindexed
            connection.execute(text("DELETE FROM records WHERE seq = :q"), {"q": seq[shas[3]]})
            # 4: an index row for a record the server does not hold
            # 5: a duplicated index row
            # 6: a stored record whose bytes (matching its key) do not parse, indexed
            for new_seq, sha in ((1001, fake), (1002, shas[4]), (1003, sha256_bytes(not_json))):
                connection.execute(
                    text(
                        f"INSERT INTO records (seq, sha256, {_RECORD_COLUMNS}) "
                        f"SELECT :n, :s, {_RECORD_COLUMNS} FROM records WHERE seq = :q"
                    ),
                    {"n": new_seq, "s": sha, "q": seq[shas[0]]},
                )
            connection.execute(
                text("INSERT INTO evidence_records (sha256, data) VALUES (:s, :d)"),
                {"s": sha256_bytes(not_json), "d": not_json},
            )
            # 7: trial rows of a seq no records row has, between two that exist
            connection.execute(
                text(
                    "INSERT INTO trials (record_seq, acquisition, format, cache_state, "
                    "trial_index, label, kept, seconds, read_bytes, file_bytes, "
                    "residency_before) SELECT 1000, acquisition, format, cache_state, "
                    "trial_index, label, kept, seconds, read_bytes, file_bytes, "
                    "residency_before FROM trials WHERE record_seq = :q"
                ),
                {"q": seq[shas[0]]},
            )
        engine.dispose()
        problems = server_index.check_server_index(store)
    finally:
        store.engine.dispose()
    rebuild = "(run `harness history rebuild --history-url URL` as its owner)"
    differing = {shas[1]: "trials", shas[2]: "summaries"}
    # each problem once (the check before streaming also named the duplicate's first
    # seq an orphan: it kept one row per SHA-256)
    expected = [
        f"index row {shas[4]}: 2 rows for one record",
        f"index trial rows of seq {seq[shas[3]]}: no records row (added by hand?)",
        "index trial rows of seq 1000: no records row (added by hand?)",
        f"index summary rows of seq {seq[shas[3]]}: no records row (added by hand?)",
    ]
    parse = [p for p in problems if "does not parse" in p]
    assert len(parse) == 1 and parse[0].startswith(f"record {sha256_bytes(not_json)}: hash")
    expected += parse
    # the duplicate (a copy of another record's row): its trials, summaries and columns
    copied = [p for p in problems if p.startswith(f"index row {shas[4]}: differs")]
    assert len(copied) == 1, problems
    expected += sorted(
        [f"index row {sha}: differs from its record in {what} {rebuild}" for sha, what in
         differing.items()] + copied
    )  # fmt: skip
    expected += [
        f"index row {fake}: no such record on the server (added to the index by hand?)",
        f"record {shas[3]}: not in the index (run `harness history init-db URL` as its owner)",
    ]
    assert problems == expected

    assert main(["history", "verify", "--history-url", postgres_url]) == EXIT_FAILURE
    err = capsys.readouterr().err
    for problem in expected:
        assert problem in err


def test_the_prefetching_thread_keeps_order_raises_its_error_and_stops_early() -> None:
    import itertools
    import threading

    assert list(server_index._prefetched(iter(range(1000)), batch=7, depth=2)) == list(range(1000))
    assert list(server_index._prefetched(iter([]))) == []

    def failing():
        yield 1
        raise ValueError("the server went away")

    with pytest.raises(ValueError, match="the server went away"):
        list(server_index._prefetched(failing(), batch=1))

    endless = server_index._prefetched(itertools.count(), batch=3, depth=1)
    assert [next(endless) for _ in range(5)] == [0, 1, 2, 3, 4]
    endless.close()  # the caller stops: the producer thread ends too
    assert not any(t.name == "harness-prefetch" for t in threading.enumerate())
