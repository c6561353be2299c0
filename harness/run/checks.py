"""Correctness of a run: the failure log and the checks every load passes.

Every load of a run (first observations, trials, reloads, reference loads) is
checked outside its timing: shape, exposed dtype, and the *indexed product* (the
masked sum over ``mask[::2, ::2]``, see :func:`harness.run.trials.indexed_product`),
which must equal the manifest's when it names one and the first load's always.
Native trials are checked by the SHA-256 of sample frames (as little-endian uint32)
against the Python reader's for the same file, and the manifest's when it lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import quantem.stem4d.io
from harness.native import hash_frame_u32_le
from harness.run import trials
from harness.run.manifest import SelectedAcquisition


@dataclass
class FailureLog:
    """The failures of a run, in order, and which kinds of failure occurred."""

    failures: list[str] = field(default_factory=list)
    execution_failed: bool = False
    correctness_failed: bool = False

    def correctness(self, message: str) -> None:
        self.correctness_failed = True
        self.failures.append(f"correctness: {message}")

    def execution(self, message: str) -> None:
        self.execution_failed = True
        self.failures.append(f"execution: {message}")

    def other(self, message: str) -> None:
        """A failure that is neither execution nor correctness (e.g. source stability)."""
        self.failures.append(message)

    @property
    def failed(self) -> bool:
        return self.execution_failed or self.correctness_failed


@dataclass
class Expected:
    """What every load of one acquisition must show; ``products`` collects the hashes seen."""

    selected: SelectedAcquisition
    shape: list[int] | None = None
    dtype: str | None = None
    qem_dtype: str | None = None
    products: list[str] = field(default_factory=list)

    def dtype_of(self, fmt: str) -> str | None:
        """HDF5 loads expose the source dtype; QEM loads the file's stored dtype."""
        return self.dtype if fmt == "hdf5" else self.qem_dtype


def check_source(log: FailureLog, expected: Expected, shape: list[int], dtype: str) -> None:
    """Record the source's shape and dtype; compare them with the manifest's."""
    expected.shape, expected.dtype = shape, dtype
    sel = expected.selected
    if sel.shape is not None and list(sel.shape) != shape:
        log.correctness(f"{sel.id}: shape {shape} differs from the manifest's {list(sel.shape)}")
    if sel.dtype is not None and sel.dtype != dtype:
        log.correctness(f"{sel.id}: dtype {dtype} differs from the manifest's {sel.dtype}")


def check_product(
    log: FailureLog, expected: Expected, acquisition: Any, what: str, fmt: str = "hdf5"
) -> str:
    """Check shape, exposed dtype and the indexed product of one load; return the hash.

    HDF5 loads expose the source dtype; QEM loads the file's stored dtype (the
    narrowest holding every count, docs/qem-format.md §16). The product is uint64
    either way, so it must agree across formats.
    """
    digest, shape, dtype = trials.indexed_product(acquisition)
    sel = expected.selected
    expected_dtype = expected.dtype_of(fmt)
    if shape != expected.shape:
        log.correctness(f"{sel.id}: {what} returned shape {shape}, expected {expected.shape}")
    if dtype != expected_dtype:
        log.correctness(f"{sel.id}: {what} exposed dtype {dtype}, expected {expected_dtype}")
    if sel.indexed_product_sha256 is not None and digest != sel.indexed_product_sha256:
        log.correctness(
            f"{sel.id}: {what}: indexed product SHA-256 {digest} differs from the manifest's "
            f"{sel.indexed_product_sha256}"
        )
    if expected.products and digest != expected.products[0]:
        log.correctness(
            f"{sel.id}: {what}: indexed product SHA-256 {digest} differs from the first load's "
            f"{expected.products[0]}"
        )
    expected.products.append(digest)
    return digest


def check_products_consistent(log: FailureLog, expected: Expected) -> None:
    """After the trials: every load of the acquisition gave the same product."""
    if len(set(expected.products)) > 1:
        log.correctness(f"{expected.selected.id}: indexed products differ between loads")


def sample_frames_of(expected: Expected) -> list[int]:
    """The manifest's sample frames, else first, middle and last frame."""
    if expected.selected.sample_frames is not None:
        return list(expected.selected.sample_frames)
    n = expected.shape[0] * expected.shape[1]
    return sorted({0, n // 2, n - 1})


def python_sample_hashes(log: FailureLog, expected: Expected, qem_path: Path) -> list[str] | None:
    """Hash the sample frames with the Python reader (untimed) and check its product.

    Returns the hashes native trials must reproduce, or None when a sample frame is
    outside the acquisition (a correctness failure).
    """
    frames = sample_frames_of(expected)
    n = expected.shape[0] * expected.shape[1]
    if max(frames) >= n:
        log.correctness(
            f"{expected.selected.id}: sample frame {max(frames)} is outside the {n} frames"
        )
        return None
    acquisition = quantem.stem4d.io.load(qem_path, backend="cpu", apply_mask=False)  # stored counts
    try:
        check_product(log, expected, acquisition, "python qem reference load", "qem")
        flat = acquisition.data.reshape(n, *acquisition.data.shape[2:])
        hashes = [hash_frame_u32_le(flat[i]) for i in frames]
    finally:
        acquisition.close()
    listed = expected.selected.sample_hashes_u32_le
    if listed is not None and list(listed) != hashes:
        bad = [f for f, a, b in zip(frames, hashes, listed) if a != b]
        log.correctness(
            f"{expected.selected.id}: Python sample-frame hashes differ from the manifest's "
            f"for frames {bad}"
        )
    return hashes


def check_native_load(
    log: FailureLog,
    expected: Expected,
    reference_hashes: list[str] | None,
    frames: list[int],
    hashes: list[str],
    shape: list[int],
) -> None:
    """A native trial's sample hashes and shape against the Python reader's."""
    sel_id = expected.selected.id
    if hashes != reference_hashes:
        log.correctness(
            f"{sel_id}: native sample-frame hashes {hashes} differ from the Python "
            f"reader's {reference_hashes} (frames {frames})"
        )
    if shape and shape != expected.shape:
        log.correctness(f"{sel_id}: native shape {shape} != {expected.shape}")


def check_products_match(
    log: FailureLog,
    ours: dict[str, str | None],
    theirs: dict[str, str | None],
    *,
    what: str,
    whose: str,
) -> None:
    """Every acquisition's indexed product of ``what`` (a recheck) must be ``whose`` (the
    candidate's, this run's): same data, same code, same product."""
    for acquisition, mine in ours.items():
        other = theirs.get(acquisition)
        if mine and other and mine != other:
            log.correctness(
                f"{acquisition}: {what} product {mine[:12]} differs from {whose} {other[:12]}"
            )
