"""Whether a recheck is paired: the choice, its reason, and how it is said.

A recheck of the candidate alone samples the candidate again but not the baseline, so
it cannot clear the run-to-run drift of a host (on the idle 2-core development VM, 8.4%
of simulated A/A comparisons at 5 reps stay at exit 2 after an unpaired ``--recheck 5``,
even calibrated); a paired recheck (:mod:`harness.run.paired.coordinator`) measures both codes at
one moment and can (0.1% left at exit 2, 97.6% of 30% slowdowns flagged:
docs/verdicts.md). So
``--recheck K`` is paired **by default** whenever the baseline's code can be had
(:func:`harness.run.paired.baseline_code.baseline_checked_out`: ``--baseline-tree``, this
checkout when its source fingerprint is the baseline's, or the baseline's clean git
revision exported). When it cannot, the default is the unpaired recheck, and
:class:`PairingChoice` says why in one line; that is not an error.

- ``--paired`` (``paired=True``) requires the pairing: a baseline whose code cannot be
  had is refused, :class:`IncomparableError` (exit 2), as before;
- ``--no-paired`` (``paired=False``) asks for the unpaired recheck;
- ``--baseline-tree DIR`` names the baseline's code, so a wrong tree is refused too
  (as with ``--paired``), and it cannot go with ``--no-paired`` (usage error).

The choice is recorded as the report's ``recheck.pairing`` (``paired``, ``requested``,
``reason``) and printed (:func:`describe_pairing`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import IncomparableError, UsageError
from harness.run.paired.baseline_code import BaselineCode, baseline_checked_out

#: How the pairing was asked for, as recorded (``recheck.pairing.requested``).
REQUESTED = {None: "default", True: "--paired", False: "--no-paired"}
NATIVE_REASON = (
    "a native load runs this checkout's built binary, not the baseline's code, so it cannot "
    "be paired"
)


@dataclass(frozen=True)
class PairingChoice:
    """How a recheck runs: paired or not, how that was asked for, and why (one line)."""

    paired: bool
    requested: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"paired": self.paired, "requested": self.requested, "reason": self.reason}


def parse_pairing_flags(paired: bool, no_paired: bool, baseline_tree: Path | None) -> bool | None:
    """``--paired`` / ``--no-paired`` / ``--baseline-tree`` as the config's ``paired``:
    True (forced), False (refused) or None (the default: paired when possible)."""
    if paired and no_paired:
        raise UsageError("--paired and --no-paired contradict each other: give one of them")
    if no_paired and baseline_tree is not None:
        raise UsageError(
            "--baseline-tree names the baseline's code for a paired recheck; it cannot go "
            "with --no-paired"
        )
    if baseline_tree is not None and not baseline_tree.is_dir():
        raise UsageError(f"--baseline-tree {baseline_tree} is not a folder")
    return True if paired else (False if no_paired else None)


@contextlib.contextmanager
def choose_baseline_code(
    baseline_doc: dict,
    baseline_sha256: str,
    *,
    paired: bool | None,
    tree: Path | None,
    checkout: Path,
    fingerprint: str | None,
    in_process: bool = True,
) -> Iterator[tuple[BaselineCode | None, PairingChoice]]:
    """The baseline's code (None: the recheck is unpaired) and the choice, while needed.

    ``fingerprint`` is the source fingerprint of ``checkout``, the code running now;
    ``in_process``: the backend's load runs the imported code (not native). Called before
    anything is measured, so that a refusal comes before the trials.
    """
    requested = REQUESTED[paired]
    if paired is False:
        yield None, PairingChoice(False, requested, "--no-paired asked for this code alone")
        return
    if not in_process:
        if paired is True or tree is not None:
            raise UsageError(f"--paired needs --backend cpu or cuda ({NATIVE_REASON})")
        yield None, PairingChoice(False, requested, NATIVE_REASON)
        return
    required = paired is True or tree is not None
    with contextlib.ExitStack() as stack:
        try:
            code: BaselineCode | None = stack.enter_context(
                baseline_checked_out(
                    baseline_doc,
                    baseline_sha256,
                    tree=tree,
                    checkout=checkout,
                    fingerprint=fingerprint,
                )
            )
        except IncomparableError as exc:
            if required:
                raise
            code = None
            reason = str(exc).removeprefix("paired recheck: ")
        choice = (
            PairingChoice(True, requested, f"the baseline's code: {code.origin}")
            if code is not None
            else PairingChoice(False, requested, f"pairing not possible: {reason}")
        )
        yield code, choice


def describe_pairing(block: dict | None) -> str | None:
    """The one line saying how a report's recheck ran (None: no recheck, or an old report)."""
    pairing = (block or {}).get("pairing")
    if not pairing:
        return None
    how = "by default" if pairing["requested"] == "default" else f"({pairing['requested']})"
    if pairing["paired"]:
        return f"recheck: paired {how}, {pairing['reason']}"
    return (
        f"recheck: unpaired {how}, this code alone against the baseline's original trials: "
        f"{pairing['reason']}"
    )
