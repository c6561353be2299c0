"""One dashboard page per record: the full report, readable, and its comparison.

A record page depends only on its (immutable) record and its baseline, so a page that
exists is kept unless a rewrite is asked for, and a rewrite leaves a page whose bytes
come out the same untouched. A history of thousands of records has its pages written
by worker processes while the caller draws the key pages, the plots and timings.csv:
each page is the same bytes
whichever process writes it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from jinja2 import TemplateError
from sqlalchemy import Connection, select

from harness.errors import HarnessError, ReportValidationError
from harness.fsio import FileWriteError
from harness.history.index_db import RecordRow, read_meta_json, write_meta
from harness.history.layout import HistoryLayout, record_relpath
from harness.render.floor_html import floor_rows_html
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
#: not wait for them; the workers take whatever CPU it leaves.
WORKER_NICENESS = 10
#: The sections a record page shows under their own heading, in this order, when its
#: record has them; the rest follow generically, under their names.
RECORD_SECTIONS = (
    ("acquisitions", "Acquisitions and product hashes"),
    ("conversion", "Conversion"),
    ("memory", "Memory"),
    ("conditions", "Conditions"),
    ("environment", "Environment"),
    ("provenance", "Provenance"),
    ("baseline", "Baseline"),
)
#: The fields a record page shows in their own sections (the rest follow generically).
HANDLED_SECTIONS = frozenset(
    {"trials", "summaries", "status", "floors"} | {n for n, _ in RECORD_SECTIONS}
)
#: Each record kind's page template, by the record's ``schema``; a schema not named here
#: (an older report migrated in memory reads as the loading report) gets the first.
RECORD_TEMPLATES = {
    "quantem-harness/loading-report": "dashboard_record.html.j2",
    "quantem-harness/compute-report": "dashboard_record_compute.html.j2",
    "quantem-harness/self-report": "dashboard_record_self.html.j2",
}
#: A page that could not be drawn: the record's JSON and the error, nothing else reached.
FALLBACK_TEMPLATE = "dashboard_record_fallback.html.j2"


class RecordPageError(HarnessError):
    """Writing record pages failed in a worker process; the message is the worker's error."""


#: Index metadata: the records whose page is the fallback page, {sha256: error}
#: (``history verify`` names them; a later render that draws the page drops it).
META_FAILED_PAGES = "render.failed_pages"
#: A fallback page holds this text (so a render can tell whether a page was redrawn).
FALLBACK_MARKER = b'<p class="status-failed">This record\'s page could not be drawn'


class RecordPagesFailed(HarnessError):
    """Some record pages could not be drawn: each got the fallback page, the rest of the
    render completed. The message names every such record and its error."""

    exit_code = 1

    def __init__(self, failures: Sequence[tuple[str, str]]) -> None:
        self.failures = list(failures)
        listed = "; ".join(f"record {sha} ({error})" for sha, error in self.failures[:10])
        more = len(self.failures) - 10
        super().__init__(
            f"{len(self.failures)} record page(s) could not be drawn and show the record's "
            f"JSON instead: {listed}{f'; and {more} more' if more > 0 else ''}"
        )


def settle_failed_pages(
    connection: Connection, targets: RenderTargets, failures: Sequence[tuple[str, str]]
) -> dict[str, str]:
    """Store which records' pages are fallback pages (the history's own render): those
    that failed now, and those that failed before and whose page is still a fallback
    page. Return them."""
    known: dict[str, str] = read_meta_json(connection, META_FAILED_PAGES) or {}
    still = {}
    for sha256, error in known.items():
        try:
            if FALLBACK_MARKER in targets.record_page(sha256).read_bytes():
                still[sha256] = error
        except FileNotFoundError:
            still[sha256] = error  # not drawn again yet
        except OSError as exc:
            page = targets.record_page(sha256)
            raise FileWriteError(page, f"reading {page.name}", exc) from exc
    still.update(failures)
    if still != known:
        write_meta(connection, META_FAILED_PAGES, json.dumps(still, sort_keys=True))
    return still


#: Maps every digit to ``0``: a run of :data:`_LONG_RUN` in the mapped bytes is a run of
#: 19 or more digits in the record.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19
_ZERO, _POINT = ord("0"), ord(".")


def _may_hold_a_long_integer(data: bytes) -> bool:
    """Whether ``data`` has a run of 19 or more digits that is not a fraction's (after a
    ``.``): an integer orjson might not read as ``json`` does, or digits in a string."""
    mapped = data.translate(_DIGITS_TO_ZERO)
    at = mapped.find(_LONG_RUN)
    while at != -1:
        start = at
        while start and mapped[start - 1] == _ZERO:
            start -= 1
        if start == 0 or mapped[start - 1] != _POINT:
            return True
        end = at + len(_LONG_RUN)
        while end < len(mapped) and mapped[end] == _ZERO:
            end += 1
        at = mapped.find(_LONG_RUN, end)
    return False


def _decode_json(data: bytes) -> Any:
    """``json.loads(data)``, through orjson where that gives the same values: orjson reads
    an integer beyond 64 bits as a float (-9223372036854775809 has 19 digits), so bytes
    with a run of 19 digits that is not a fraction's go to ``json``
    (:func:`_may_hold_a_long_integer`), as do bytes orjson refuses (NaN, an out-of-range
    float, a lone surrogate), for ``json``'s own result or error. Floats are the same
    doubles (both round correctly); the key order too. orjson, the check included, takes
    about half of ``json``'s time a record."""
    if not _may_hold_a_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def read_record_doc(path: Path) -> dict[str, Any]:
    """A registered record's document, migrated in memory.

    The record passed the strict parser (no duplicate keys, no NaN) and the schema when it
    was registered, and ``history verify`` checks its bytes against its name, so it is
    read here with a C JSON decoder (:func:`_decode_json`): the strict one's Python hook
    per object took a third of a record page. Bytes that do not decode go through the
    strict parser for its message naming the file.
    """
    from harness.report import migrate_report, parse_report_json, schema_version_of

    data = path.read_bytes()
    try:
        doc = _decode_json(data)
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
    its record's JSON), the template's constant arguments. The pages are most of a
    large history's first render's CPU.
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
        environment = template_environment()
        self._templates = {
            schema: environment.get_template(name) for schema, name in RECORD_TEMPLATES.items()
        }
        self._default_template = self._templates[next(iter(RECORD_TEMPLATES))]
        self._fallback = environment.get_template(FALLBACK_TEMPLATE)
        self._markup = Markup
        self._constants = {
            "seconds": format_seconds,
            "value": lambda item: Markup(value_html(item)),
            "handled": HANDLED_SECTIONS,
        }
        #: (sha256, error) of each page drawn as the fallback page by this builder
        self.failures: list[tuple[str, str]] = []

    def build(self, sha256: str, comparison_key: str, placed: str | None = None) -> bytes | None:
        """The page's bytes; with ``placed`` (a page written while the records are still
        being copied), None when the record declares a baseline other than ``placed`` (the
        baseline whose file is known to be in place: "" for none), to be built later.

        A record whose page cannot be drawn (a kind or shape no template expects, bytes
        that no longer parse) gets the fallback page, its JSON and the error, and is added
        to :attr:`failures`: one record never stops the rest of a render.
        """
        relative = record_relpath(sha256)
        path = Path(self._root, relative)
        try:
            doc = read_record_doc(path)
            if placed is not None and ((doc.get("baseline") or {}).get("sha256") or "") != placed:
                return None
            return self._build(sha256, comparison_key, doc, path, relative)
        except (ReportValidationError, TemplateError, LookupError, TypeError, ValueError) as exc:
            # what a template or a record's shape can raise; OSError (the disk) propagates
            error = f"{type(exc).__name__}: {exc}"
            self.failures.append((sha256, error))
            return self._fallback_page(sha256, comparison_key, path, relative, error)

    def _build(
        self, sha256: str, comparison_key: str, doc: dict[str, Any], path: Path, relative: str
    ) -> bytes:
        trials = sorted(
            doc["trials"],
            key=lambda t: (
                t["acquisition"], t["format"], t["cache_state"] != "cold", t["trial_index"]
            ),
        )  # fmt: skip
        markup = self._markup
        template = self._templates.get(doc.get("schema"), self._default_template)
        return template.render(
            sha256=sha256,
            key=comparison_key,
            doc=doc,
            sections=[(name, heading) for name, heading in RECORD_SECTIONS if name in doc],
            comparison=_comparison_of(self._layout, doc, sha256, path),
            json_href=f"{self._href_prefix}/{relative}",
            trial_rows=markup(trial_rows_html(trials, format_seconds)),
            summary_rows=markup(summary_rows_html(doc["summaries"], format_seconds)),
            floor_rows=markup(floor_rows_html(doc.get("floors"), format_seconds)),
            **self._constants,
        ).encode("utf-8")

    def _fallback_page(
        self, sha256: str, comparison_key: str, path: Path, relative: str, error: str
    ) -> bytes:
        try:
            raw = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raw = f"(unreadable: {exc})"
        return self._fallback.render(
            sha256=sha256,
            key=comparison_key,
            json_href=f"{self._href_prefix}/{relative}",
            record_json=raw,
            error=error,
        ).encode("utf-8")


def _write_new(page: Path, data: bytes) -> None:
    """Write a page into a folder that no reader sees yet (no temporary file needed)."""
    try:
        page.write_bytes(data)
        os.chmod(page, RENDERED_MODE)
    except OSError as exc:
        raise FileWriteError(page, f"rendering {page.name}", exc) from exc


#: A row of pages to write: (sha256, comparison key), or while the records are still
#: being copied (sha256, comparison key, the baseline known to be in place: "" for none).
PageRow = tuple[str, str] | tuple[str, str, str]


def _write_pages(
    layout: HistoryLayout,
    targets: RenderTargets,
    rows: Sequence[PageRow],
    mode: str,
    folder: Path | None = None,
) -> tuple[int, list[tuple[str, str]], list[tuple[str, str]]]:
    """Write the pages of ``rows``; return how many were written, the rows deferred
    (a page whose record declares a baseline not yet in place, :meth:`RecordPageBuilder.build`)
    and the (sha256, error) of the pages drawn as fallback pages.

    ``mode`` is ``"missing"`` (only pages that do not exist), ``"rewrite"`` (every page
    whose bytes differ from what is there, atomically) or ``"new"`` (every page, straight
    into ``folder``, a fresh folder moved into place afterwards).
    """
    written = 0
    deferred: list[tuple[str, str]] = []
    builder = RecordPageBuilder(layout, targets)
    for sha256, key, *placed in rows:
        if mode == "new":
            assert folder is not None
            # pages link ../keys/ and the record's JSON relative to the final folder
            page = folder / record_page_name(sha256)
        else:
            page = targets.record_page(sha256)
            if mode == "missing" and page.exists():
                continue
        data = builder.build(sha256, key, *placed)
        if data is None:
            deferred.append((sha256, key))
            continue
        if mode == "new":
            _write_new(page, data)
        else:
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
    return written, deferred, builder.failures


@dataclass(frozen=True)
class _TaskResult:
    """A worker's share done: pages written and rows deferred, or a harness error as its
    message and exit code (its class need not survive pickling)."""

    written: int = 0
    deferred: tuple[tuple[str, str], ...] = ()
    failures: tuple[tuple[str, str], ...] = ()
    error: str | None = None
    exit_code: int = 0


def _pages_task(
    layout: HistoryLayout,
    targets: RenderTargets,
    rows: Sequence[PageRow],
    mode: str,
    folder: Path | None,
) -> _TaskResult:
    try:
        written, deferred, failures = _write_pages(layout, targets, rows, mode, folder)
    except HarnessError as exc:
        return _TaskResult(error=str(exc), exit_code=exc.exit_code)
    return _TaskResult(written, tuple(deferred), tuple(failures))


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

    :func:`start_record_pages` makes one with every row; :class:`PagesDuringCopy` makes
    one with none (``total``: how many will come) and :meth:`add`\\ s rows as their
    records are copied. :meth:`finish` waits for the workers, writes what was deferred,
    moves a freshly built folder into place and returns how many pages were written;
    :meth:`close` (always, e.g. in ``finally``) stops workers that are still running
    after an error.
    """

    def __init__(
        self,
        layout: HistoryLayout,
        targets: RenderTargets,
        rows: list[tuple[str, str]],
        mode: str,
        processes: int,
        *,
        total: int | None = None,
    ) -> None:
        self._layout = layout
        self._targets = targets
        self._rows: list[PageRow] = []  # written in this process by finish()
        self._pending: list[PageRow] = []  # not yet handed to a worker
        self._mode = mode
        self._folder = targets.record_page("x").parent
        self._fresh = self._folder.with_name(f".{self._folder.name}.new")
        self._futures: list[Future] = []
        self._executor: ProcessPoolExecutor | None = None
        #: (sha256, error) of every page drawn as a fallback page (known after finish)
        self.failures: list[tuple[str, str]] = []
        if mode == "new":
            shutil.rmtree(self._fresh, ignore_errors=True)
            try:
                self._fresh.mkdir(parents=True)
            except OSError as exc:
                raise FileWriteError(self._fresh, "rendering record pages", exc) from exc
        if processes > 1 and (len(rows) if total is None else total) >= PARALLEL_PAGES:
            methods = multiprocessing.get_all_start_methods()
            # fork: workers start at once with everything imported; they use no inherited
            # connection or lock, only read records and write pages
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._executor = ProcessPoolExecutor(
                max_workers=processes, mp_context=context, initializer=_lower_priority
            )
        self.add(rows)

    def add(self, rows: Sequence[PageRow]) -> None:
        """Pages to write: in a worker as soon as a task's worth is gathered, or in
        this process at :meth:`finish` (few pages, or no workers)."""
        if self._executor is None:
            # written at the end, every record in place: nothing provisional
            self._rows.extend((row[0], row[1]) for row in rows)
            return
        self._pending.extend(rows)
        while len(self._pending) >= PAGES_PER_TASK:
            self._submit(self._pending[:PAGES_PER_TASK])
            del self._pending[:PAGES_PER_TASK]

    def _submit(self, chunk: list[PageRow]) -> None:
        assert self._executor is not None
        folder = self._fresh if self._mode == "new" else None
        self._futures.append(
            self._executor.submit(
                _pages_task, self._layout, self._targets, chunk, self._mode, folder
            )
        )

    def _gather(self) -> tuple[int, list[tuple[str, str]]]:
        written, deferred = 0, []
        futures, self._futures = self._futures, []
        for future in futures:
            result = future.result()
            if result.error is not None:
                error = RecordPageError(result.error)
                error.exit_code = result.exit_code
                raise error
            written += result.written
            deferred.extend(result.deferred)
            self.failures.extend(result.failures)
        return written, deferred

    def finish(self) -> int:
        folder = self._fresh if self._mode == "new" else None
        if self._executor is None:
            written, deferred, failures = _write_pages(
                self._layout, self._targets, self._rows, self._mode, folder
            )
            self.failures.extend(failures)
            assert not deferred  # rows written here are never provisional
        else:
            if self._pending:
                self._submit(self._pending)
                self._pending = []
            written, deferred = self._gather()
            # pages whose record's baseline came after it in the copy: every record is
            # in place now
            for first in range(0, len(deferred), PAGES_PER_TASK):
                self._submit(deferred[first : first + PAGES_PER_TASK])
            more, again = self._gather()
            assert not again
            written += more
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


class PagesDuringCopy:
    """Every record page of a server render, started while the server's records are
    being copied into the folder (the ``record_files`` hook of
    :func:`harness.history.snapshot.take_snapshot`), not after the copy: on two cores
    the export of a large history would otherwise run with no page worker beside it.

    The pages are those of the server's index rows (read in the snapshot's transaction:
    the rows the snapshot's records table receives). A page is handed to a worker once
    its record file is in place and so is the baseline its index row names, if any; a
    record whose own bytes declare another baseline than its row says is deferred by
    the worker (:meth:`RecordPageBuilder.build`) and written at the end, as are the pages
    whose baseline never came, once every record is in place (as a page written after
    the copy sees the folder). :attr:`pages` is the :class:`RecordPages`, for
    ``render_all``; None until :meth:`begin`.
    """

    def __init__(
        self, layout: HistoryLayout, targets: RenderTargets, processes: int | None = None
    ) -> None:
        self._layout, self._targets = layout, targets
        self._processes = render_processes() if processes is None else processes
        self._waiting: dict[str, list[tuple[str, str | None]]] = {}  # sha -> (key, baseline)
        self._on_baseline: dict[str, list[tuple[str, str]]] = {}  # baseline -> (sha, key)
        self._placed: set[str] = set()
        self.pages: RecordPages | None = None

    def begin(self, connection: Connection) -> None:
        rows = connection.execute(
            select(RecordRow.sha256, RecordRow.comparison_key, RecordRow.baseline_sha256)
            .order_by(RecordRow.seq)
        ).all()  # fmt: skip
        for sha256, key, baseline in rows:
            self._waiting.setdefault(sha256, []).append((key, baseline))
        mode = "rewrite" if self._targets.record_page("x").parent.exists() else "new"
        self.pages = RecordPages(
            self._layout, self._targets, [], mode, self._processes, total=len(rows)
        )

    def placed(self, sha256s: Iterable[str]) -> None:
        """These records' files hold the server's bytes now."""
        assert self.pages is not None
        ready: list[PageRow] = []
        for sha256 in sha256s:
            self._placed.add(sha256)
            for key, baseline in self._waiting.pop(sha256, ()):
                if not baseline:
                    ready.append((sha256, key, ""))
                elif baseline in self._placed:
                    ready.append((sha256, key, baseline))
                else:
                    self._on_baseline.setdefault(baseline, []).append((sha256, key))
            ready.extend((sha, key, sha256) for sha, key in self._on_baseline.pop(sha256, ()))
        self.pages.add(ready)

    def done(self) -> None:
        """Every record is in place: the pages still waiting are written as they are."""
        assert self.pages is not None
        rest: list[PageRow] = [
            (sha256, key) for sha256, rows in self._waiting.items() for key, _ in rows
        ]
        rest.extend(row for rows in self._on_baseline.values() for row in rows)
        self._waiting, self._on_baseline = {}, {}
        self.pages.add(rest)


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
