"""The self-benchmark run: every stage of every scale, checked, into a report.

Per scale (``records-N``) a folder history of N synthetic records is built (untimed; its
seconds are recorded under ``fitted``), then each stage runs ``repeat + 1`` rounds: round
0 is the *first* (imports, caches; not kept), rounds 1..repeat the *warm* trials. Each
stage's result is checked outside its timer; a failed check is a correctness failure. The
verdict-power table (:mod:`.power`) is one more acquisition, ``verdict-power``, whose
rounds must give the same table and an A/A false-positive rate within its bound.

The report shares the loading report's sections, so the frame's provenance, contention,
judging against a baseline, writing and registration are those of every other kind.
"""

from __future__ import annotations

import datetime
import hashlib
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.comparability import canonical_json
from harness.compare import resolve_calibration
from harness.history.backend import HistoryBackend, load_reference
from harness.history.store import RegistrationRenderer
from harness.report import PROTOCOL_VERSION, quantile
from harness.run.checks import FailureLog
from harness.run.contention import collect_contention_sample, contention_section
from harness.run.environment import collect_environment
from harness.run.provenance import SourceTracker
from harness.run.registration import register_measured
from harness.run.reporting import RunOutcome, judge, status_section, write_report
from harness.run.runner import finish_provenance
from harness.run.trials import FIRST, WARM, stage_trial
from harness.run.workspace import claim_output_dir, progress_bar
from harness.self_report import BENCHMARK, SCHEMA_NAME, SCHEMA_VERSION
from harness.selfbench import e2e
from harness.selfbench.power import MAX_FALSE_POSITIVE, power_table
from harness.selfbench.stages import GROUPS, ScaleStages, build_history, records_digest

SELF_REPORT_NAME = "self.json"
FOLDER_STAGES = ("register", "query", "render_full", "verify")
PLOTS_STAGE = "render_plots"
POSTGRES_STAGE = "postgres_register"
POWER_STAGE = "verdict_draws"
POWER_ACQUISITION = "verdict-power"
E2E_ACQUISITION = "verdict-e2e"


@dataclass
class SelfConfig:
    """What ``harness run self`` was asked (docs/self-benchmark.md)."""

    output_dir: Path
    records: tuple[int, ...] = (40,)
    repeat: int = 3
    verdict_draws: int = 20
    postgres_url: str | None = None
    plots: bool = False
    work_dir: Path | None = None
    storage_id: str = "local"
    #: the history (a :class:`~harness.history.backend.HistoryBackend`, opened by the
    #: command) the baseline is looked up in and the report registered into; None: none
    history: HistoryBackend | None = None
    baseline: str | None = None
    regression_percent: float = 20.0
    calibration: str | None = None
    render: RegistrationRenderer | None = None
    command: list[str] = field(default_factory=list)
    #: runs per scenario of the verdict's end-to-end check (0: not measured)
    verdict_e2e_runs: int = 0
    #: the scenarios (:func:`e2e.parse_scenario`): extra passes over the loaded array
    #: (0: A/A), or "S%": passes for S% of the load's own time
    e2e_passes: tuple[int | str, ...] = (0, 2, "25%")
    e2e_recheck: int = 5
    #: processes of other work at nice 19 during every e2e run (the contended scenario)
    e2e_contend: int = 0
    #: a new folder to keep every e2e run's reports in (None: only the summaries)
    e2e_keep: Path | None = None
    #: the git repository whose HEAD the scenarios export (None: this checkout)
    e2e_repo: Path | None = None
    progress: bool | None = None


class SelfRun:
    """Measures every scale's stages and the verdict power; :meth:`execute` runs it."""

    def __init__(self, config: SelfConfig) -> None:
        self.config = config
        self.log = FailureLog()
        self.trials: list[dict] = []
        self.acquisitions: list[dict] = []
        #: the verdict e2e's rate fields per scenario stage (summaries carry them)
        self.e2e_rates: dict[str, dict] = {}

    @property
    def stages(self) -> list[str]:
        stages = list(FOLDER_STAGES)
        if self.config.plots:
            stages.append(PLOTS_STAGE)
        if self.config.postgres_url:
            stages.append(POSTGRES_STAGE)
        stages.append(POWER_STAGE)
        if self.config.verdict_e2e_runs:
            stages += [e2e.stage_name(p) for p in self.config.e2e_passes]
        return stages

    def _trial(self, acquisition: str, stage: str, index: int, seconds: float) -> None:
        self.trials.append(stage_trial(acquisition, "history", stage, index, seconds))

    def _timed(self, acquisition: str, stage: str, index: int, call: Callable[[], object]):
        start = time.perf_counter_ns()
        result = call()
        self._trial(acquisition, stage, index, (time.perf_counter_ns() - start) / 1e9)
        return result

    def measure_scale(self, records: int, work: Path) -> None:
        cfg, log = self.config, self.log
        acquisition = f"records-{records}"
        history = work / acquisition
        start = time.perf_counter()
        stored = build_history(history, records)
        build_seconds = time.perf_counter() - start
        digest = records_digest(stored)
        if len(set(stored)) != records:
            log.correctness(f"{acquisition}: {len(set(stored))} distinct records of {records}")
        stages = ScaleStages(history, next_index=records, postgres_url=cfg.postgres_url)
        checked: dict = {"build_seconds": build_seconds, "records_built": len(stored)}
        total = records
        for index in range(cfg.repeat + 1):
            result = self._timed(acquisition, "register", index, stages.register())
            total += 1
            if not result.created:
                log.correctness(f"{acquisition}: register round {index} stored no new record")
            found = self._timed(acquisition, "query", index, stages.query(stored[index]))
            if found.sha256 != stored[index]:
                log.correctness(f"{acquisition}: query round {index} found {found.sha256}")
            listed = self._timed(acquisition, "render_full", index, stages.render_full())
            if len(listed["records"]) != total:
                log.correctness(
                    f"{acquisition}: render round {index}: index.json lists "
                    f"{len(listed['records'])} records of {total}"
                )
            if cfg.plots:
                drawn = self._timed(acquisition, PLOTS_STAGE, index, stages.render_full("all"))
                plots = list((history / "plots").glob("*.png"))
                if len(drawn["records"]) != total or len(plots) < len(GROUPS):
                    log.correctness(
                        f"{acquisition}: render with plots round {index}: "
                        f"{len(plots)} plots for {len(GROUPS)} keys"
                    )
            verified = self._timed(acquisition, "verify", index, stages.verify())
            if verified.errors or verified.records != total:
                log.correctness(
                    f"{acquisition}: verify round {index}: {verified.records} records, "
                    f"{len(verified.errors)} problems"
                )
            if cfg.postgres_url:
                on_server = self._timed(
                    acquisition, POSTGRES_STAGE, index, stages.postgres_register()
                )
                if not on_server.created:
                    log.correctness(f"{acquisition}: PostgreSQL round {index} stored nothing new")
        checked["records_at_end"] = total
        self.acquisitions.append(
            {
                "id": acquisition,
                "filename": "",
                "source_master_sha256": digest["sha256"],
                "outputs": {"records": digest},
                "fitted": checked,
                "deterministic": True,
            }
        )

    def measure_power(self) -> None:
        draws = self.config.verdict_draws
        tables = [
            self._timed(POWER_ACQUISITION, POWER_STAGE, i, lambda: power_table(draws))
            for i in range(self.config.repeat + 1)
        ]
        first = canonical_json(tables[0])
        deterministic = all(canonical_json(t) == first for t in tables)
        if not deterministic:
            self.log.correctness("verdict-power: the rounds drew different tables from one seed")
        false_positive = tables[0][0]["comparisons_slower"]
        if draws and false_positive > MAX_FALSE_POSITIVE:
            self.log.correctness(
                f"verdict-power: A/A comparisons judged slower {false_positive:.1%} "
                f"> {MAX_FALSE_POSITIVE:.0%}"
            )
        sha = hashlib.sha256(first.encode("ascii")).hexdigest()
        identity = hashlib.sha256(canonical_json({"draws": draws}).encode("ascii")).hexdigest()
        self.acquisitions.append(
            {
                "id": POWER_ACQUISITION,
                "filename": "",
                "source_master_sha256": identity,
                "outputs": {"table": {"sha256": sha, "dtype": "json", "shape": [len(tables[0])]}},
                "fitted": {"table": tables[0], "max_false_positive": MAX_FALSE_POSITIVE},
                "deterministic": deterministic,
            }
        )

    def measure_e2e(self, work: Path) -> None:
        """The verdict's end-to-end check (:mod:`.e2e`): every scenario's runs as trials
        of ``verdict-e2e`` (one stage per scenario, every run kept), its rates and goals
        under ``fitted`` (a goal not met is a finding the record states, not a failure)."""
        cfg = self.config
        repo = cfg.e2e_repo or Path(__file__).resolve().parents[2]
        try:
            revision = subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "HEAD"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.CalledProcessError):
            self.log.execution(f"verdict-e2e: {repo} is not a git checkout (its HEAD is exported)")
            return
        total = cfg.verdict_e2e_runs * len(cfg.e2e_passes)
        with progress_bar("verdict e2e runs", total, cfg.progress) as bar:

            def on_run(stage: str, index: int, result: dict) -> None:
                bar.advance()
                self.trials.append(
                    stage_trial(
                        E2E_ACQUISITION,
                        "history",
                        stage,
                        index,
                        float(result["seconds"]),
                        label=WARM,
                        kept="cells" in result,
                    )
                )
                if "cells" not in result:
                    self.log.execution(
                        f"verdict-e2e: {stage} run {index}: "
                        + str(result.get("error", "no report")).strip()[-300:]
                    )

            summaries = e2e.run_scenarios(
                work / "verdict-e2e", repo, revision, list(cfg.e2e_passes),
                cfg.verdict_e2e_runs, cfg.e2e_recheck, on_run=on_run, contend=cfg.e2e_contend,
            )  # fmt: skip
        if cfg.e2e_keep is not None:
            e2e.keep_runs(work / "verdict-e2e", cfg.e2e_keep)
        for summary in summaries:
            stage = summary["scenario"]
            self.e2e_rates[stage] = {
                "exit_2_rate": summary["exit_2_rate"],
                **{f"{v}_rate": summary["verdict_rates"][v] for v in e2e.VERDICTS},
                "min_measured_slowdown_percent": min(
                    summary["measured_slowdown_percent"].values(), default=None
                ),
                "max_measured_slowdown_percent": max(
                    summary["measured_slowdown_percent"].values(), default=None
                ),
            }
            large = e2e.large_cell_rates(summary)
            if large is not None:
                self.e2e_rates[stage]["large_cells_slower_rate"] = large["slower"]
                self.e2e_rates[stage]["large_cells_unchanged_rate"] = large["unchanged"]
                self.e2e_rates[stage]["large_cells_undecided_rate"] = large["undecided"]
        digest = hashlib.sha256(canonical_json(summaries).encode("ascii")).hexdigest()
        identity = {"revision": revision, "runs": cfg.verdict_e2e_runs,
                    "passes": list(cfg.e2e_passes), "recheck": cfg.e2e_recheck}  # fmt: skip
        if cfg.e2e_contend:
            identity["contend"] = cfg.e2e_contend
        self.acquisitions.append(
            {
                "id": E2E_ACQUISITION,
                "filename": "",
                "source_master_sha256": hashlib.sha256(
                    canonical_json(identity).encode("ascii")
                ).hexdigest(),
                "outputs": {
                    "scenarios": {"sha256": digest, "dtype": "json", "shape": [len(summaries)]}
                },
                "fitted": {
                    "tree": {"revision": revision, "exported": "git archive"},
                    "scenarios": summaries,
                },
                "deterministic": False,
            }
        )

    def summaries(self) -> list[dict]:
        cells: dict[tuple[str, str], list[dict]] = {}
        for trial in self.trials:
            cells.setdefault((trial["acquisition"], trial["stage"]), []).append(trial)
        out = []
        for (acquisition, stage), members in cells.items():
            warm = sorted(float(t["seconds"]) for t in members if t["kept"])
            first = [float(t["seconds"]) for t in members if t["label"] == FIRST]
            out.append(
                {
                    "acquisition": acquisition,
                    "format": "history",
                    "cache_state": stage,
                    "stage": stage,
                    "n": len(members),
                    "n_kept": len(warm),
                    "first": first[0] if first else None,
                    "median": quantile(warm, 0.5) if warm else None,
                    "p90": quantile(warm, 0.9) if warm else None,
                    "p95": quantile(warm, 0.95) if warm else None,
                    "min": warm[0] if warm else None,
                    "max": warm[-1] if warm else None,
                    **(self.e2e_rates.get(stage, {}) if acquisition == E2E_ACQUISITION else {}),
                }
            )
        return out

    def execute(self) -> RunOutcome:
        cfg = self.config
        tracker = SourceTracker().start()
        with claim_output_dir(cfg.output_dir, SELF_REPORT_NAME):
            baseline = (
                load_reference(cfg.history, cfg.baseline, what="--baseline")
                if cfg.baseline
                else None
            )
            calibration = (
                resolve_calibration(cfg.history, cfg.calibration, baseline.doc)
                if baseline is not None
                else None
            )
            created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            with tempfile.TemporaryDirectory(prefix="harness-self-", dir=cfg.work_dir) as tmp:
                work = Path(tmp)
                environment = collect_environment("cpu", work, cfg.storage_id)
                before = collect_contention_sample()
                for records in cfg.records:
                    self.measure_scale(records, work)
                self.measure_power()
                if cfg.verdict_e2e_runs:
                    self.measure_e2e(work)
                after = collect_contention_sample()
            doc = self.build_report(tracker, created, environment, before, after)
            exit_code = judge(doc, baseline, cfg.regression_percent, calibration=calibration)
            report_path = write_report(doc, cfg.output_dir, SELF_REPORT_NAME)
        outcome = RunOutcome(doc, report_path, exit_code)
        if cfg.history is not None:
            outcome.registered = register_measured(cfg.history, report_path, render=cfg.render)
        return outcome

    def build_report(self, tracker, created, environment, before, after) -> dict:
        cfg = self.config
        provenance, stable = finish_provenance(tracker, self.log)
        contention = contention_section(before, after)
        status = status_section(self.log, stable)
        status["host_load"] = "contended" if contention["contended"] else "quiet"
        parameters = {
            "records": list(cfg.records),
            "repeat": cfg.repeat,
            "verdict_draws": cfg.verdict_draws,
            "postgres": bool(cfg.postgres_url),
            "plots": cfg.plots,
        }
        if cfg.verdict_e2e_runs:
            parameters["verdict_e2e"] = {
                "runs": cfg.verdict_e2e_runs,
                "passes": list(cfg.e2e_passes),
                "recheck": cfg.e2e_recheck,
            }
            if cfg.e2e_contend:
                parameters["verdict_e2e"]["contend"] = cfg.e2e_contend
        return {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "protocol_version": PROTOCOL_VERSION,
            "benchmark": BENCHMARK,
            "created_utc": created,
            "command": [str(a) for a in cfg.command],
            "status": status,
            "baseline": None,
            "provenance": provenance,
            "environment": environment,
            "contention": contention,
            "conditions": {
                "workload": "self",
                "backend": "cpu",
                "representation": "folder+postgres" if cfg.postgres_url else "folder",
                "timing_boundary": "cpu:stage-call (the stage's result checked outside it)",
                "allocator_policy": "default",
                "cache_states": self.stages,
                "stages": self.stages,
                "reps": cfg.repeat,
                "parameters": parameters,
                "calibration": {},
            },
            "acquisitions": self.acquisitions,
            "trials": self.trials,
            "summaries": self.summaries(),
        }


def run_self(config: SelfConfig) -> RunOutcome:
    """Run the self-benchmark as configured (module docstring)."""
    return SelfRun(config).execute()


__all__ = ["SELF_REPORT_NAME", "SelfConfig", "SelfRun", "run_self"]
