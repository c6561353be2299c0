"""Benchmark: a history on a PostgreSQL server at scale (issue 15, "Performance").

Starts a throwaway local server (``initdb``/``pg_ctl`` in ``--work``, Unix socket only,
``fsync=off``: the figures are of the harness and the queries, not of the disk) unless
``--url`` names one, fills it with N records (example reports of 2 acquisitions x 2
formats x 2 cache states x 5 reps, spread over 4 comparison keys like
``history_scale.py``'s, made unique by their ``created_utc``): records and chained
journal lines in batches of 1,000, each checked by the server's SHA-256 trigger, and
their index rows (records, 40 trials, 8 summaries each; trials by COPY). Then measures:

- registering one more report in-process (``PostgresStore.register``: validation,
  record, journal line and index rows in one transaction), median over ``--repeat``;
  then validation alone and the registration of a validated report (``prepared=``);
- ``harness history register --history-url`` in a fresh process (median of 5);
- ``history list`` (``--limit 50``, ``--group KEY --limit 50``, and all records) and
  ``compare --baseline`` in-process (``harness.cli.main``, output to /dev/null),
  median of 5, and once each in a fresh process;
- ``harness history head`` and ``harness history verify`` on the URL (fresh processes;
  verify's peak RSS too);
- ``harness render index --out DIR --history-url`` into a new folder (fresh process;
  ``--render-timeout`` seconds at most, reported as not finished past it), then, for each
  N of ``--rerender``, N more reports registered and the same folder rendered again
  (incremental: only what was registered since is fetched and drawn).

``--only`` picks phases (register, list, verify, render); ``--url URL --reuse``
measures a database an earlier run filled (no init-db, no fill), so repeated
measurements need not refill it.

Usage::

    python benchmarks/history_postgres_scale.py --records 100000 --work /tmp/pg-bench
    python benchmarks/history_postgres_scale.py --records 100000 --work /tmp/pg-bench2 \
        --url 'postgresql+psycopg://harness@/bench?host=/tmp/pg-bench' --reuse --only render
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


GROUPS = ("nvme-a", "nvme-b", "raid-c", "nfs-d")
MARKER = "2026-01-01T00:00:00Z"


def _templates() -> list[dict]:
    from harness.report import validate_report
    from harness.testing import make_example_report

    templates = [make_example_report(g, storage_id=group, created_utc=MARKER)
                 for g, group in enumerate(GROUPS)]  # fmt: skip
    for template in templates:
        validate_report({**template, "created_utc": _created(0)})
    return templates


def _created(index: int) -> str:
    return f"2026-01-01T00:00:00.{index:09d}Z"


def _unique(templates: list[dict], index: int) -> tuple[dict, bytes]:
    from harness.report import dump_report

    doc = {**templates[index % len(templates)], "created_utc": _created(index)}
    return doc, dump_report(doc, validate=False)  # the templates were validated once


def fill(url: str, records: int, batch: int = 1000) -> float:
    """Records, journal and index rows, as registration would leave them, in bulk."""
    from sqlalchemy import create_engine, func, insert, select, text

    from harness.history.entries import TRIAL_FIELDS, derive_entry
    from harness.history.evidence_store import journal_line
    from harness.history.index_db import RecordRow, SummaryRow
    from harness.history.journal import GENESIS_HEAD
    from harness.history.layout import record_relpath
    from harness.history.postgres import journal_table, records_table
    from harness.history.records import sha256_bytes
    from harness.report import SCHEMA_VERSION

    templates = _templates()
    engine = create_engine(url)
    start = time.perf_counter()
    with engine.connect() as connection:
        head = (
            connection.execute(
                select(journal_table.c.link).order_by(journal_table.c.seq.desc()).limit(1)
            ).scalar()
            or GENESIS_HEAD
        )
        seq = connection.execute(select(func.coalesce(func.max(RecordRow.seq), 0))).scalar()
    for first in range(0, records, batch):
        rows, lines, index_rows, trials, summaries = [], [], [], [], []
        for index in range(first, min(records, first + batch)):
            doc, data = _unique(templates, index)
            sha = sha256_bytes(data)
            rows.append({"sha256": sha, "data": data})
            line = journal_line(
                {"registered_utc": "2026-12-01T00:00:00.000000Z", "sha256": sha,
                 "source": f"bench/{index}.json"},
                head,
            )  # fmt: skip
            head = sha256_bytes(line)
            lines.append({"line": line, "link": head, "sha256": sha})
            entry = derive_entry(doc, sha256=sha, path=record_relpath(sha),
                                 size_bytes=len(data), schema_version=SCHEMA_VERSION)  # fmt: skip
            seq += 1
            index_rows.append({**entry.record, "seq": seq})
            trials += [tuple([seq] + [t[f] for f in TRIAL_FIELDS]) for t in entry.trials]
            summaries += [dict(s, record_seq=seq) for s in entry.summaries]
        with engine.begin() as connection:
            connection.execute(records_table.insert(), rows)
            connection.execute(journal_table.insert(), lines)
            connection.execute(insert(RecordRow), index_rows)
            connection.execute(insert(SummaryRow), summaries)
            cursor = connection.connection.dbapi_connection.cursor()
            columns = ", ".join(("record_seq", *TRIAL_FIELDS))
            with cursor.copy(f"COPY trials ({columns}) FROM STDIN") as copy:
                for row in trials:
                    copy.write_row(row)
    with engine.begin() as connection:
        connection.execute(text("SELECT setval('records_seq_seq', (SELECT max(seq) FROM records))"))
        connection.execute(text("ANALYZE"))
    engine.dispose()
    return time.perf_counter() - start


#: Peak resident memory (MB) of the last command run by :func:`_cli`.
PEAK_RSS_MB = {"last": None}


def _cli(
    *args: str, timeout: float | None = None
) -> tuple[float, subprocess.CompletedProcess | None]:
    """Run ``python -m harness ARGS`` in a fresh process: (seconds, the completed process,
    or None past ``timeout``); its peak RSS in ``PEAK_RSS_MB["last"]`` (from wait4)."""
    import tempfile

    argv = [sys.executable, "-m", "harness", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err)
        deadline = None if timeout is None else start + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                process.kill()
                os.wait4(process.pid, 0)
                process.returncode = -9
                return time.perf_counter() - start, None
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        PEAK_RSS_MB["last"] = usage.ru_maxrss // 1024
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(
            argv, process.returncode, out.read().decode(), err.read().decode()
        )
    return seconds, done


def _in_process(args: list[str], repeat: int = 5) -> tuple[float, int]:
    """Median seconds of ``harness.cli.main(args)`` with stdout to /dev/null; its exit code."""
    import contextlib

    from harness.cli import main

    times, code = [], None
    for _ in range(repeat):
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            start = time.perf_counter()
            code = main(args)
            times.append(time.perf_counter() - start)
    return statistics.median(times), code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/harness-pg-bench"))
    parser.add_argument("--url", help="an existing, empty database (skips the server start)")
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--render-timeout", type=float, default=1200.0)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --url: the database was filled by an earlier run (no init-db, no fill)",
    )
    parser.add_argument(
        "--only",
        default="register,list,verify,render",
        help="phases to measure, comma-separated (default: all of register,list,verify,render)",
    )
    parser.add_argument(
        "--rerender",
        default="0,1,100",
        help="after the first render: register this many more reports, then render the "
        "same folder again, for each number in turn (default 0,1,100)",
    )
    args = parser.parse_args()
    phases = set(args.only.split(","))
    if args.reuse and args.url is None:
        parser.error("--reuse needs --url")
    args.work.mkdir(parents=True, exist_ok=True)

    from harness.history.remote import init_database

    stop = None
    url = args.url
    if url is None:
        url, stop = start_server(args.work)
    results = {"records": args.records}

    def note(key: str, value) -> None:
        results[key] = value
        print(f"{key}: {value}", flush=True)
        (args.work / "results.json").write_text(json.dumps(results, indent=2))

    try:
        if not args.reuse:
            init_database(url)
            note("fill_s", round(fill(url, args.records), 1))
        templates = _templates()
        if "register" in phases:
            _measure_registration(url, templates, args, note)
        if "list" in phases:
            _measure_lookups(url, templates, args, note)
        if "verify" in phases:
            verify_s, done = _cli("history", "verify", "--history-url", url)
            assert done.returncode == 0, done.stdout + done.stderr
            note("verify_cli_s", round(verify_s, 1))
            note("verify_peak_rss_mb", PEAK_RSS_MB["last"])
            note("verify_summary", done.stdout.strip().splitlines()[-1])
        if "render" in phases:
            _measure_render(url, templates, args, note)
    finally:
        if stop is not None:
            stop()
    print(json.dumps(results, indent=2))
    return 0


def _measure_registration(url: str, templates: list[dict], args, note) -> None:
    from sqlalchemy import create_engine

    from harness.history.postgres import PostgresStore
    from harness.history.store import prepare_report

    store = PostgresStore(create_engine(url, pool_pre_ping=True))
    times = []
    for number in range(args.repeat):
        _doc, data = _unique(templates, 10**6 + number)
        start = time.perf_counter()
        store.register(data, source="one-more.json", registered_utc="2026-12-01T00:00:00Z")
        times.append(time.perf_counter() - start)
    validation, transaction = [], []
    for number in range(args.repeat):
        data = _unique(templates, 3 * 10**6 + number)[1]
        start = time.perf_counter()
        prepared = prepare_report(data, name="prepared.json")
        validation.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.register(data, source="prepared.json",
                       registered_utc="2026-12-01T00:00:00Z", prepared=prepared)  # fmt: skip
        transaction.append(time.perf_counter() - start)
    note("validation_median_ms", round(statistics.median(validation) * 1000, 1))
    note("register_prepared_median_ms", round(statistics.median(transaction) * 1000, 1))
    store.engine.dispose()
    note("register_in_process_median_ms", round(statistics.median(times) * 1000, 1))
    note("register_in_process_min_max_ms",
         [round(min(times) * 1000, 1), round(max(times) * 1000, 1)])  # fmt: skip
    report = args.work / "one-more.json"
    cli_register = []
    for number in range(5):
        report.write_bytes(_unique(templates, 2 * 10**6 + number)[1])
        seconds, done = _cli("history", "register", str(report), "--history-url", url)
        assert done.returncode == 0, done.stderr
        cli_register.append(seconds)
    note("register_cli_median_s", round(statistics.median(cli_register), 2))


def _measure_lookups(url: str, templates: list[dict], args, note) -> None:
    from harness.history.records import sha256_bytes

    base = sha256_bytes(_unique(templates, 0)[1])[:12]
    candidate = sha256_bytes(_unique(templates, 4 * (args.records // 4 - 1))[1])[:12]
    key = f"--group={_group_key(url)}"
    for name, command in (
        ("list_limit50", ["history", "list", "--limit", "50"]),
        ("list_group_limit50", ["history", "list", key, "--limit", "50"]),
        ("list_all", ["history", "list"]),
        ("compare_baseline", ["compare", candidate, "--baseline", base, "--format", "json"]),
        ("compare_baseline_newest", ["compare", "--baseline", base, "--format", "json"]),
    ):
        seconds, code = _in_process([*command, "--history-url", url])
        note(f"{name}_in_process_median_ms", [round(seconds * 1000, 1), f"exit {code}"])
        cli_s, done = _cli(*command, "--history-url", url)
        note(f"{name}_cli_s", [round(cli_s, 2), f"exit {done.returncode}"])
    head_s, done = _cli("history", "head", "--history-url", url)
    assert done.returncode == 0, done.stderr
    note("head_cli_s", round(head_s, 2))


def _measure_render(url: str, templates: list[dict], args, note) -> None:
    """A first render into a new folder, then re-renders of the same folder after
    registering more reports (``--rerender``), each in a fresh process."""
    from sqlalchemy import create_engine

    from harness.history.postgres import PostgresStore

    out = args.work / "dashboard"
    if out.exists():
        shutil.rmtree(out)
    command = ("render", "index", "--out", str(out), "--history-url", url,
               "--git-repo", str(args.work))  # fmt: skip
    render_s, done = _cli(*command, timeout=args.render_timeout)
    if done is None:
        pages = len(list((out / "dashboard" / "records").glob("*.html")))
        records = sum(1 for _ in (out / "records").rglob("*.json"))
        note("render_index_cli_s",
             f"not finished after {render_s:.0f} s ({records} records exported, "
             f"{pages} record pages in the final folder)")  # fmt: skip
        return
    assert done.returncode == 0, done.stdout + done.stderr
    note("render_index_cli_s", round(render_s, 1))
    note("render_index_peak_rss_mb", PEAK_RSS_MB["last"])
    store = PostgresStore(create_engine(url, pool_pre_ping=True))
    number = 5 * 10**6 + 1000 * (int(time.time()) % 10**5)  # new reports in every run
    try:
        for count in (int(n) for n in args.rerender.split(",") if n):
            for _ in range(count):
                number += 1
                data = _unique(templates, number)[1]
                store.register(data, source="more.json", registered_utc="2026-12-01T00:00:00Z")
            again_s, done = _cli(*command, timeout=args.render_timeout)
            if done is None:
                note(f"rerender_after_{count}_cli_s", f"not finished after {again_s:.0f} s")
                continue
            assert done.returncode == 0 and "note:" not in done.stderr, done.stdout + done.stderr
            note(f"rerender_after_{count}_cli_s", round(again_s, 1))
            note(f"rerender_after_{count}_says", done.stdout.strip().splitlines()[-1][:120])
    finally:
        store.engine.dispose()


def _group_key(url: str) -> str:
    from sqlalchemy import create_engine, select

    from harness.history.index_db import RecordRow

    engine = create_engine(url)
    with engine.connect() as connection:
        key = connection.execute(select(RecordRow.comparison_key).limit(1)).scalar()
    engine.dispose()
    return key


if __name__ == "__main__":
    sys.exit(main())
