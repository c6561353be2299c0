"""The runner's timed conversion streams: host memory follows a batch, not the acquisition."""

from __future__ import annotations

import numpy as np
import pytest

from harness.run.checks import FailureLog
from harness.run.io_scale import conversion
from harness.run.manifest import SelectedAcquisition
from quantem.stem4d.io.arina import open_arina
from quantem.stem4d.io.synthetic import write_synthetic_arina

SCAN, DET = (8, 8), (32, 32)


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    folder = tmp_path_factory.mktemp("arina")
    return write_synthetic_arina(
        folder / "acq",
        scan_shape=SCAN,
        detector_shape=DET,
        dtype="uint16",
        frames_per_shard=16,
        processes=1,
    )


def _selected(master) -> SelectedAcquisition:
    return SelectedAcquisition(
        id="acq",
        filename=master.name,
        master_path=master,
        source_master_sha256="0" * 64,
        shape=None,
        dtype=None,
        indexed_product_sha256=None,
        qem_reference_header=None,
        sample_frames=None,
        sample_hashes_u32_le=None,
    )


class _Source:
    """An ARINA source stand-in: frames made on demand, counting the largest request."""

    def __init__(self, n_frames: int) -> None:
        self.n_frames, self.scan_shape, self.detector_shape = n_frames, (1, n_frames), (4, 4)
        self.largest = 0

    def frames(self, start: int, stop: int) -> np.ndarray:
        self.largest = max(self.largest, stop - start)
        values = np.arange(start, stop, dtype=np.uint16)[:, None, None]
        return np.broadcast_to(values, (stop - start, 4, 4)).copy()


class _Qem(_Source):
    def __init__(self, n_frames: int, changed: int | None = None) -> None:
        super().__init__(n_frames)
        self.changed = changed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def read_frames(self, start: int, stop: int) -> np.ndarray:
        out = self.frames(start, stop)
        if self.changed is not None and start <= self.changed < stop:
            out[self.changed - start, 0, 0] += 1
        return out


def _stand_ins(monkeypatch, qem: _Qem) -> _Source:
    source = _Source(qem.n_frames)

    def batches(src, batch_frames, *, stop):
        for first in range(0, stop, batch_frames):
            yield first, src.frames(first, min(first + batch_frames, stop))

    monkeypatch.setattr(conversion, "QemFile", lambda path, verify: qem)
    monkeypatch.setattr(conversion, "iter_frame_batches", batches)
    return source


@pytest.mark.parametrize("changed", [None, 0, 999, 1000])
def test_reopen_verify_reads_one_batch_at_a_time(monkeypatch, changed):
    """Both sides are asked for at most one batch: memory follows the batch, not the data."""
    qem = _Qem(1001, changed)
    source = _stand_ins(monkeypatch, qem)
    assert conversion.reopened_equals_source("x.qem", source, batch_frames=64) is (changed is None)
    assert 0 < source.largest <= 64 and 0 < qem.largest <= 64


def test_timed_conversion_never_loads_the_whole_acquisition(master, tmp_path, monkeypatch):
    """The conversion streams: ``quantem.stem4d.io.load`` (a whole decoded array) is never called."""

    def whole_load(*args, **kwargs):
        raise AssertionError("the timed conversion loaded a whole acquisition")

    monkeypatch.setattr(conversion.quantem.stem4d.io, "load", whole_load)
    log = FailureLog()
    settings = conversion.ConversionSettings(verify=True, source_hashes=True, reloads=1)
    record = conversion.timed_conversion(
        _selected(master), tmp_path / "a.qem", tmp_path / "index", settings, log, lambda: None
    )
    assert not log.failures
    assert set(record["stages"]) == {"hdf5_read", "encode_write", "reopen_verify"}
    assert "verified_conversion_seconds" in record


@pytest.mark.slow
def test_reopened_comparison_finds_a_changed_frame(master, tmp_path, monkeypatch):
    """The batch-wise comparison does compare: a file of other counts differs."""
    source = open_arina(master, index_dir=str(tmp_path / "index"))
    good = tmp_path / "good.qem"
    conversion.prepare_untimed(_selected(master), good, tmp_path / "index")
    assert conversion.reopened_equals_source(good, source, batch_frames=100)
    other_master = write_synthetic_arina(
        tmp_path / "other", scan_shape=SCAN, detector_shape=DET, dtype="uint16", seed=5, processes=1
    )
    other = tmp_path / "other.qem"
    conversion.prepare_untimed(_selected(other_master), other, tmp_path / "index")
    assert not conversion.reopened_equals_source(other, source, batch_frames=100)
    log = FailureLog()
    monkeypatch.setattr(conversion, "reopened_equals_source", lambda path, src: False)
    conversion.timed_conversion(
        _selected(master), tmp_path / "c.qem", tmp_path / "index",
        conversion.ConversionSettings(), log, lambda: None,
    )  # fmt: skip
    assert log.correctness_failed
    assert log.failures == ["correctness: acq: reopened QEM differs from the HDF5 source"]
