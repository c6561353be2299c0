"""One dashboard page per record: the full report, readable, and its comparison.

A record page depends only on its (immutable) record and its baseline, so a page that
exists is kept unless a rewrite is asked for, and a rewrite leaves a page whose bytes
come out the same untouched. A history of thousands of records has its pages written
by worker processes while the caller draws the key pages, the plots and timings.csv
(``docs/performance/results.md``, "Dashboard at scale"): each page is the same bytes
whichever process writes it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from harness.errors import HarnessError
from harness.fsio import FileWriteError
from harness.history.index_db import RecordRow
from harness.history.layout import HistoryLayout, record_relpath
from harness.render.pages import FLAGGED_VERDICTS, format_seconds
from harness.render.record_html import summary_rows_html, trial_rows_html, value_html
from harness.render.targets import RENDERED_MODE, RenderTargets, record_page_name, write_atomic

#: Below this many pages to write, they are written in the calling process (a worker
#: process costs more to start than a few hundred pages take).
PARALLEL_PAGES = 1_000
#: Pages per task handed to a worker.
PAGES_PER_TASK = 250
#: Worker processes at most (one per usable core up to this).
MAX_PROCESSES = 8
#: Added to the page workers' nice value: the pages are written beside the render's
#: serial work (the copy of the index, the keys), which is the longer path and should
#: not wait for them; the workers take whatever CPU it leaves (measured at 100,000
#: records: ``docs/performance/results.md``, "render7").
WORKER_NICENESS = 10
#: The fields a record page shows in their own sections (the rest follow generically).
HANDLED_SECTIONS = frozenset(
    {
        "trials",
        "summaries",
        "acquisitions",
        "status",
        "provenance",
        "environment",
        "conditions",
        "memory",
        "conversion",
        "baseline",
    }
)


class RecordPageError(HarnessError):
    """Writing record pages failed in a worker process; the message is the worker's error."""


def read_record_doc(path: Path) -> dict[str, Any]:
    """A registered record's document, migrated in memory.

    The record passed the strict parser (no duplicate keys, no NaN) and the schema when it
    was registered, and ``history verify`` checks its bytes against its name, so it is
    read here with the C JSON decoder: the strict one's Python hook per object took a
    third of a record page. Bytes that do not decode go through the strict parser for
    its message naming the file.
    """
    from harness.report import migrate_report, parse_report_json, schema_version_of

    data = path.read_bytes()
    try:
        doc = json.loads(data)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        doc = None
    if not isinstance(doc, dict):
        doc = parse_report_json(data, name=str(path))  # raises with the reason
    return migrate_report(doc, schema_version_of(doc, str(path)), name=str(path))


def _comparison_of(
    layout: HistoryLayout, doc: dict[str, Any], sha256: str, path: Path
) -> dict[str, Any] | None:
    """The record against its declared baseline, when that baseline is in the history."""
    from harness.compare import compare_reports

    baseline = doc.get("baseline") or {}
    baseline_sha = baseline.get("sha256")
    if not baseline_sha:
        return None
    baseline_path = layout.record_path(baseline_sha)
    if not baseline_path.is_file():
        return {"missing_baseline": baseline_sha}
    comparison = compare_reports(
        read_record_doc(baseline_path),
        doc,
        float(baseline.get("regression_percent") or 20.0),
        baseline_sha256=baseline_sha,
        baseline_path=str(baseline_path),
        candidate_sha256=sha256,
        candidate_path=str(path),
    )
    result = comparison.to_dict()
    for cell in result["cells"]:
        cell["flagged"] = cell["verdict"] in FLAGGED_VERDICTS
    # flagged cells first, then by change (largest slowdown first)
    result["cells"] = sorted(
        result["cells"],
        key=lambda c: (not c["flagged"], -(c["change_percent"] or 0.0)),
    )
    return result


class RecordPageBuilder:
    """Builds the record pages of one history into one target folder.

    What is the same for every page is worked out once here, not once a page: the
    compiled template, the record folder's path relative to the pages (each page links
    its record's JSON), the template's constant arguments. 100,000 pages are most of a
    first render's CPU (``docs/performance/results.md``, "render7").
    """

    def __init__(self, layout: HistoryLayout, targets: RenderTargets) -> None:
        from markupsafe import Markup

        from harness.templating import template_environment

        self._layout = layout
        self._targets = targets
        self._root = str(layout.root)
        page_folder = targets.record_page("x").parent
        # a record's href is this prefix and its path under the root (record_relpath)
        self._href_prefix = Path(os.path.relpath(layout.root, page_folder)).as_posix()
        self._template = template_environment().get_template("dashboard_record.html.j2")
        self._markup = Markup
        self._constants = {
            "seconds": format_seconds,
            "value": lambda item: Markup(value_html(item)),
            "handled": HANDLED_SECTIONS,
        }

    def build(self, sha256: str, comparison_key: str) -> bytes:
        relative = record_relpath(sha256)
        path = Path(self._root, relative)
        doc = read_record_doc(path)
        trials = sorted(
            doc["trials"],
            key=lambda t: (
                t["acquisition"], t["format"], t["cache_state"] != "cold", t["trial_index"]
            ),
        )  # fmt: skip
        markup = self._markup
        return self._template.render(
            sha256=sha256,
            key=comparison_key,
            doc=doc,
            comparison=_comparison_of(self._layout, doc, sha256, path),
            json_href=f"{self._href_prefix}/{relative}",
            trial_rows=markup(trial_rows_html(trials, format_seconds)),
            summary_rows=markup(summary_rows_html(doc["summaries"], format_seconds)),
            **self._constants,
        ).encode("utf-8")


def build_record_page(
    layout: HistoryLayout, targets: RenderTargets, sha256: str, comparison_key: str
) -> bytes:
    """One record's page (a :class:`RecordPageBuilder` for many)."""
    return RecordPageBuilder(layout, targets).build(sha256, comparison_key)


def _write_new(page: Path, data: bytes) -> None:
    """Write a page into a folder that no reader sees yet (no temporary file needed)."""
    try:
        page.write_bytes(data)
        os.chmod(page, RENDERED_MODE)
    except OSError as exc:
        raise FileWriteError(page, f"rendering {page.name}", exc) from exc


def _write_pages(
    layout: HistoryLayout,
    targets: RenderTargets,
    rows: Sequence[tuple[str, str]],
    mode: str,
    folder: Path | None = None,
) -> int:
    """Write the pages of ``rows`` (sha256, comparison key); return how many were written.

    ``mode`` is ``"missing"`` (only pages that do not exist), ``"rewrite"`` (every page
    whose bytes differ from what is there, atomically) or ``"new"`` (every page, straight
    into ``folder``, a fresh folder moved into place afterwards).
    """
    written = 0
    builder = RecordPageBuilder(layout, targets)
    if mode == "new":
        assert folder is not None
        # pages link ../keys/ and the record's JSON relative to the final folder
        for sha256, key in rows:
            _write_new(folder / record_page_name(sha256), builder.build(sha256, key))
        return len(rows)
    for sha256, key in rows:
        page = targets.record_page(sha256)
        if mode == "missing" and page.exists():
            continue
        data = builder.build(sha256, key)
        if mode == "rewrite":
            try:
                if page.read_bytes() == data:
                    continue  # unchanged: replacing it would only cost an unlink
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise FileWriteError(page, f"reading {page.name}", exc) from exc
        write_atomic(page, data)
        written += 1
    return written


def _pages_task(
    layout: HistoryLayout,
    targets: RenderTargets,
    rows: Sequence[tuple[str, str]],
    mode: str,
    folder: Path | None,
) -> int | tuple[str, int]:
    """A worker's share; a harness error comes back as (message, exit code) because its
    class need not survive pickling."""
    try:
        return _write_pages(layout, targets, rows, mode, folder)
    except HarnessError as exc:
        return (str(exc), exc.exit_code)


def _lower_priority() -> None:
    """A page worker's initializer: yield the CPU to the render's own process."""
    if hasattr(os, "nice"):  # POSIX; lowering one's priority is always permitted
        os.nice(WORKER_NICENESS)


def render_processes() -> int:
    """Worker processes for record pages: the cores this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_PROCESSES))


class RecordPages:
    """The writing of many record pages, started before other work and finished after it.

    :func:`start_record_pages` makes one; :meth:`finish` waits for the workers, moves a
    freshly built folder into place and returns how many pages were written; :meth:`close`
    (always, e.g. in ``finally``) stops workers that are still running after an error.
    """

    def __init__(
        self,
        layout: HistoryLayout,
        targets: RenderTargets,
        rows: list[tuple[str, str]],
        mode: str,
        processes: int,
    ) -> None:
        self._layout = layout
        self._targets = targets
        self._rows = rows
        self._mode = mode
        self._folder = targets.record_page("x").parent
        self._fresh = self._folder.with_name(f".{self._folder.name}.new")
        self._futures: list[Future] = []
        self._executor: ProcessPoolExecutor | None = None
        if mode == "new":
            shutil.rmtree(self._fresh, ignore_errors=True)
            try:
                self._fresh.mkdir(parents=True)
            except OSError as exc:
                raise FileWriteError(self._fresh, "rendering record pages", exc) from exc
        if processes > 1 and len(rows) >= PARALLEL_PAGES:
            methods = multiprocessing.get_all_start_methods()
            # fork: workers start at once with everything imported; they use no inherited
            # connection or lock, only read records and write pages
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._executor = ProcessPoolExecutor(
                max_workers=processes, mp_context=context, initializer=_lower_priority
            )
            folder = self._fresh if mode == "new" else None
            for first in range(0, len(rows), PAGES_PER_TASK):
                chunk = rows[first : first + PAGES_PER_TASK]
                self._futures.append(
                    self._executor.submit(_pages_task, layout, targets, chunk, mode, folder)
                )

    def finish(self) -> int:
        if self._executor is None:
            written = _write_pages(
                self._layout,
                self._targets,
                self._rows,
                self._mode,
                self._fresh if self._mode == "new" else None,
            )
        else:
            written = 0
            for future in self._futures:
                result = future.result()
                if isinstance(result, tuple):
                    error = RecordPageError(result[0])
                    error.exit_code = result[1]
                    raise error
                written += result
        if self._mode == "new":
            try:
                os.replace(self._fresh, self._folder)
            except OSError as exc:
                raise FileWriteError(self._folder, "rendering record pages", exc) from exc
        return written

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._mode == "new":
            shutil.rmtree(self._fresh, ignore_errors=True)


#: Up to this many seqs are selected by an IN list; more are filtered while reading
#: (SQLite caps a statement's parameters, at 32,766 in recent versions).
_IN_LIST_SEQS = 1000


def start_record_pages(
    connection: Connection,
    layout: HistoryLayout,
    targets: RenderTargets,
    seqs: Iterable[int] | None,
    *,
    rewrite: bool,
    processes: int | None = None,
) -> RecordPages:
    """Start writing the pages of the records ``seqs`` (all when ``None``).

    Without ``rewrite`` a page that exists is kept: it depends only on its immutable
    record and baseline. With it, every page is built again and a page whose bytes
    changed is replaced (on this VM's ext4, freeing a page's old copy cost 1.5 ms, more
    than building it). When the record folder does not exist yet, the pages go into a
    fresh folder that is moved into place at the end, so none is ever half-written.
    """
    query = select(RecordRow.seq, RecordRow.sha256, RecordRow.comparison_key)
    wanted = None if seqs is None else set(seqs)
    if wanted is not None and len(wanted) <= _IN_LIST_SEQS:
        query = query.where(RecordRow.seq.in_(sorted(wanted)))
    rows = [
        (sha256, key)
        for seq, sha256, key in connection.execute(query.order_by(RecordRow.seq))
        if wanted is None or seq in wanted
    ]
    folder = targets.record_page("x").parent
    if not folder.exists():
        mode = "new"
    else:
        mode = "rewrite" if rewrite else "missing"
    return RecordPages(
        layout, targets, rows, mode, render_processes() if processes is None else processes
    )


def write_record_pages(
    connection: Connection,
    layout: HistoryLayout,
    targets: RenderTargets,
    seqs: Iterable[int] | None,
    *,
    rewrite: bool,
    processes: int | None = None,
) -> int:
    """Write the pages of the records ``seqs`` (all when ``None``); return how many were written
    (:func:`start_record_pages`, then finished)."""
    pages = start_record_pages(
        connection, layout, targets, seqs, rewrite=rewrite, processes=processes
    )
    try:
        return pages.finish()
    finally:
        pages.close()
