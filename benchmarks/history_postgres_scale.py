"""Benchmark: a history on a PostgreSQL server at scale (issue 15, "Performance").

Starts a throwaway local server (``initdb``/``pg_ctl`` in ``--work``, Unix socket only,
``fsync=off``: the figures are of the harness and the queries, not of the disk) unless
``--url`` names one, fills it with N records (example reports made unique by their
``created_utc``; records and chained journal lines inserted in batches of 1,000, each
checked by the server's SHA-256 trigger), then measures:

- registering one more report in-process (``PostgresStore.register``), median over
  ``--repeat`` registrations;
- ``harness history register --history-url`` in a fresh process (median of 5);
- ``harness history head`` and ``harness history verify`` on the URL (fresh processes).

``list``, ``compare --baseline`` and ``render index`` do not take a URL yet (the index is
not on the server); they are reported as not measured.

Usage::

    python benchmarks/history_postgres_scale.py --records 100000 --work /tmp/pg-bench
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def start_server(work: Path) -> tuple[str, callable]:
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not binaries:
        raise SystemExit("no PostgreSQL binaries under /usr/lib/postgresql; pass --url")
    bindir = binaries[-1].parent
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(work, user.pw_uid, user.pw_gid)
    data = work / "data"
    subprocess.run(
        _as_server_user([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                         "harness", "-E", "UTF8", "--no-sync"]),
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-k {work} -c listen_addresses='' -c fsync=off"
    subprocess.run(
        _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                         str(work / "server.log"), "-w", "start"]),
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        _as_server_user([str(bindir / "createdb"), "-h", str(work), "-U", "harness", "bench"]),
        check=True, capture_output=True,
    )  # fmt: skip

    def stop() -> None:
        subprocess.run(
            _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
            check=False, capture_output=True,
        )  # fmt: skip

    return f"postgresql+psycopg://harness@/bench?host={work}", stop


def _template() -> tuple[bytes, bytes]:
    from harness.report import dump_report
    from harness.testing import make_example_report

    marker = "2026-01-01T00:00:00Z"
    data = dump_report(make_example_report(0, created_utc=marker))
    return data, marker.encode()


def _unique(template: bytes, marker: bytes, index: int) -> bytes:
    return template.replace(marker, f"2026-01-01T00:00:00.{index:09d}Z".encode(), 1)


def fill(url: str, records: int, batch: int = 1000) -> float:
    from sqlalchemy import create_engine, select

    from harness.history.evidence_store import journal_line
    from harness.history.journal import GENESIS_HEAD
    from harness.history.postgres import journal_table, records_table
    from harness.history.records import sha256_bytes

    template, marker = _template()
    engine = create_engine(url)
    start = time.perf_counter()
    with engine.connect() as connection:
        head = (
            connection.execute(
                select(journal_table.c.link).order_by(journal_table.c.seq.desc()).limit(1)
            ).scalar()
            or GENESIS_HEAD
        )
    for first in range(0, records, batch):
        rows, lines = [], []
        for index in range(first, min(records, first + batch)):
            data = _unique(template, marker, index)
            sha = sha256_bytes(data)
            rows.append({"sha256": sha, "data": data})
            line = journal_line(
                {"registered_utc": "2026-12-01T00:00:00.000000Z", "sha256": sha,
                 "source": f"bench/{index}.json"},
                head,
            )  # fmt: skip
            head = sha256_bytes(line)
            lines.append({"line": line, "link": head, "sha256": sha})
        with engine.begin() as connection:
            connection.execute(records_table.insert(), rows)
            connection.execute(journal_table.insert(), lines)
    engine.dispose()
    return time.perf_counter() - start


def _cli(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/harness-pg-bench"))
    parser.add_argument("--url", help="an existing, empty database (skips the server start)")
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()

    from sqlalchemy import create_engine

    from harness.history.postgres import PostgresStore
    from harness.history.remote import init_database

    stop = None
    url = args.url
    if url is None:
        url, stop = start_server(args.work)
    try:
        init_database(url)
        fill_s = fill(url, args.records)
        template, marker = _template()
        store = PostgresStore(create_engine(url, pool_pre_ping=True))
        times = []
        for number in range(args.repeat):
            data = _unique(template, marker, 10**6 + number)
            start = time.perf_counter()
            store.register(data, source="one-more.json", registered_utc="2026-12-01T00:00:00Z")
            times.append(time.perf_counter() - start)
        store.engine.dispose()
        report = args.work / "one-more.json"
        args.work.mkdir(parents=True, exist_ok=True)
        cli_register = []
        for number in range(5):
            report.write_bytes(_unique(template, marker, 2 * 10**6 + number))
            seconds, done = _cli("history", "register", str(report), "--history-url", url)
            assert done.returncode == 0, done.stderr
            cli_register.append(seconds)
        head_s, done = _cli("history", "head", "--history-url", url)
        assert done.returncode == 0, done.stderr
        verify_s, done = _cli("history", "verify", "--history-url", url)
        assert done.returncode == 0, done.stdout + done.stderr
        results = {
            "records": args.records,
            "fill_s": round(fill_s, 1),
            "register_in_process_median_ms": round(statistics.median(times) * 1000, 1),
            "register_in_process_min_ms": round(min(times) * 1000, 1),
            "register_cli_median_s": round(statistics.median(cli_register), 2),
            "head_cli_s": round(head_s, 2),
            "verify_cli_s": round(verify_s, 1),
            "verify_summary": done.stdout.strip().splitlines()[-1],
            "list": "not measured: history list does not take --history-url yet",
            "compare_baseline": "not measured: compare does not take --history-url yet",
            "render_index": "not measured: the renderer does not take a URL yet",
        }
    finally:
        if stop is not None:
            stop()
    print(json.dumps(results, indent=2))
    (args.work / "results.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
