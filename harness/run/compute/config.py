"""What a ``harness run compute`` run is asked to do, and whether it may run.

:class:`ComputeConfig` is built by the CLI (``harness.commands.run``) or by tests;
:func:`check_config` refuses a bad one (UsageError) and requires the backend, once.
The kind that runs it is :mod:`harness.run.compute.kind`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.compare import DEFAULT_REGRESSION_PERCENT
from harness.errors import UsageError
from harness.history.backend import HistoryBackend
from harness.history.store import RegistrationRenderer
from harness.run.backends import BackendProfile, profile_for
from harness.run.compute.workloads import ComputeParameters
from harness.run.instrumentation import refuse_instrumentation


@dataclass
class ComputeConfig:
    """Everything a compute run needs; built by the CLI or by tests."""

    workload: str
    root: Path
    manifest: Path
    backend: str
    storage_id: str
    output_dir: Path
    reps: int = 5
    parameters: ComputeParameters = field(default_factory=ComputeParameters)
    save_outputs: Path | None = None
    accept_output_change: bool = False
    #: the history (a :class:`~harness.history.backend.HistoryBackend`, opened by the
    #: command) the baseline is looked up in and the report registered into; None: none
    history: HistoryBackend | None = None
    #: Brings the history's rendered files up to date after registration (see IoScaleConfig).
    render: RegistrationRenderer | None = None
    baseline: str | None = None
    regression_percent: float = DEFAULT_REGRESSION_PERCENT
    #: Read by the runner frame: calibration record for significance, recheck rounds of
    #: flagged cells (compute reruns none: 0), host locks.
    calibration: str | None = None
    recheck: int = 0
    lock_dir: Path | None = None
    lock_timeout: float = 600.0
    #: Check every shard file against the manifest's size and SHA-256 before measuring
    #: (False: --no-verify-source).
    check_source_files: bool = True
    #: ``--fresh-process N`` (products only): N fresh processes per acquisition, BF and
    #: CoM timed from spawn (harness.run.fresh.first_call); ``--peer-python`` the peers' interpreter.
    fresh_processes: int = 0
    peer_python: str | None = None
    #: ``--format qem``: each acquisition is converted once, untimed, to a ``.qem`` of
    #: ``qem_version`` in the workspace and loaded from it as ``representation``.
    source_format: str = "hdf5"
    qem_version: int = 1
    representation: str = "dense"
    command: Sequence[str] = ()
    progress: bool | None = None
    on_event: Callable[[str, dict], None] | None = None


def check_parallax_guess(workload: str, parameters: ComputeParameters) -> None:
    """Refuse a defocus or rotation guess the run would not use or could not (UsageError):
    parallax aligns around the defocus, dpc checks its focus against it."""
    guess = parameters.c10_guess_angstrom
    if guess is not None:
        if workload not in ("parallax", "dpc"):
            raise UsageError(
                "--c10-guess seeds the parallax alignment and dpc's focus check; the "
                f"{workload} workload does not use it"
            )
        if not math.isfinite(guess):
            raise UsageError(f"--c10-guess must be a finite number of angstrom, got {guess!r}")
        missing = [
            flag
            for flag, value in (
                ("--energy-ev (or --voltage-kv)", parameters.energy_ev),
                ("--convergence-mrad", parameters.convergence_mrad),
            )
            if value is None
        ]
        if workload == "dpc" and missing:
            raise UsageError(f"--c10-guess for dpc (its focus check) needs {' and '.join(missing)}")
    rotation = parameters.rotation_deg
    if rotation is not None and not math.isfinite(rotation):
        raise UsageError(f"--rotation must be a finite number of degrees, got {rotation!r}")


#: Workloads whose stages read the data only through detector products (an encoded
#: payload has no dense array to hand the others).
ENCODED_WORKLOADS = ("products", "virtual")


def check_source_format(cfg: ComputeConfig) -> None:
    """Refuse a format, ``.qem`` version or representation the run cannot use (UsageError)."""
    if cfg.source_format not in ("hdf5", "qem"):
        raise UsageError(f"--format must be hdf5 or qem, not {cfg.source_format!r}")
    if cfg.qem_version not in (1, 2):
        raise UsageError(f"--qem-version must be 1 or 2, not {cfg.qem_version!r}")
    if cfg.representation not in ("dense", "encoded"):
        raise UsageError(f"--representation must be dense or encoded, not {cfg.representation!r}")
    if cfg.source_format == "hdf5":
        if cfg.qem_version != 1 or cfg.representation != "dense":
            raise UsageError("--qem-version and --representation encoded need --format qem")
        return
    if cfg.workload == "validate":
        raise UsageError("validate reads its truth beside the HDF5 source: --format hdf5 only")
    if cfg.fresh_processes:
        raise UsageError("--fresh-process times the HDF5 source: --format hdf5 only")
    if cfg.parameters.streaming:
        raise UsageError("--memory-budget and --scan-block-rows stream the HDF5 source only")
    if cfg.representation == "encoded":
        if cfg.backend != "cuda":
            raise UsageError("--representation encoded is a cuda representation (--backend cuda)")
        if cfg.workload not in ENCODED_WORKLOADS:
            raise UsageError(
                f"--representation encoded: the {cfg.workload} workload needs the dense data; "
                f"encoded runs {' and '.join(ENCODED_WORKLOADS)}"
            )


def check_config(cfg: ComputeConfig) -> BackendProfile:
    """Refuse a bad configuration (UsageError); return the backend's profile, required once."""
    if cfg.reps < 1:
        raise UsageError("--reps must be at least 1")
    if cfg.regression_percent <= 0:
        raise UsageError("--regression-percent must be positive")
    if not cfg.storage_id.strip():
        raise UsageError("--storage-id must not be empty")
    if cfg.accept_output_change and cfg.baseline is None:
        raise UsageError("--accept-output-change needs --baseline")
    if cfg.backend not in ("cpu", "cuda"):
        raise UsageError(f"compute runs on --backend cpu or cuda, not {cfg.backend!r}")
    if cfg.parameters.scan_block_rows is not None and cfg.parameters.scan_block_rows < 1:
        raise UsageError("--scan-block-rows must be at least 1")
    if cfg.parameters.memory_budget_bytes is not None and cfg.parameters.memory_budget_bytes < 1:
        raise UsageError("--memory-budget must be positive")
    if cfg.parameters.dtype == "float32" and cfg.backend == "cpu":
        raise UsageError("--dtype float32 is a cuda option (cpu outputs are float64)")
    if (
        cfg.save_outputs is not None
        and cfg.save_outputs.exists()
        and any(cfg.save_outputs.iterdir())
    ):
        raise UsageError(f"--save-outputs {cfg.save_outputs} is not empty")
    check_parallax_guess(cfg.workload, cfg.parameters)
    if cfg.fresh_processes < 0:
        raise UsageError("--fresh-process must not be negative")
    if cfg.fresh_processes and cfg.workload != "products":
        raise UsageError("--fresh-process times the products workload's BF and CoM")
    if cfg.peer_python is not None:
        if not cfg.fresh_processes:
            raise UsageError("--peer-python needs --fresh-process N")
        if not os.access(cfg.peer_python, os.X_OK) or Path(cfg.peer_python).is_dir():
            raise UsageError(f"--peer-python {cfg.peer_python}: not an executable file")
    check_source_format(cfg)
    refuse_instrumentation()  # timed stages run without profiling hooks
    profile = profile_for(cfg.backend)
    profile.require()
    return profile
