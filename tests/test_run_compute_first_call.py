"""``harness run compute products --fresh-process N [--peer-python PY]``: first-call cells.

The peers here are stand-ins installed in a folder of their own (``py4DSTEM`` and
``libertem`` modules that read the frames with h5py): one returns the exact disk sum,
the other a wrong one, so the record's ``bf_equals_disk_sum`` is seen to be computed.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.render import claims
from harness.report import parse_report
from harness.run.compute.config import ComputeConfig
from harness.run.compute.kind import run_compute
from harness.run.manifest import dump_manifest, manifest_entry

DATA = Path(__file__).parent / "data" / "srtio3"
MASTER = DATA / "srtio3_focus_high_master.h5"

_FRAMES = """
import h5py, hdf5plugin, numpy as np
def frames(path, link):
    with h5py.File(path, "r") as f:
        return np.asarray(f["entry/data"][link])
def disk_sum(data, cy, cx, r, extra=0):
    rows, cols = np.ogrid[: data.shape[-2], : data.shape[-1]]
    inside = (rows - cy) ** 2 + (cols - cx) ** 2 <= r ** 2
    return data[..., inside].sum(axis=-1, dtype=np.int64) + extra
"""

_PY4DSTEM = """
__version__ = "0.0-standin"
from _frames import frames, disk_sum
class _Image:
    def __init__(self, data): self.data = data
class _Cube:
    def __init__(self, data): self.data = data
    def get_virtual_image(self, mode, geometry, verbose):
        (cy, cx), r = geometry
        return _Image(disk_sum(self.data, cy, cx, r))
def import_file(path, filetype):
    data = frames(path, "data_000001")
    return _Cube(data.reshape(24, 24, *data.shape[1:]))
"""

_LIBERTEM_API = """
from _frames import frames, disk_sum
class _Result:
    def __init__(self, raw_data): self.raw_data = raw_data
class Context:
    @classmethod
    def make_with(cls, name): return cls()
    def load(self, kind, path, ds_path):
        data = frames(path, ds_path.rsplit("/", 1)[-1])
        return data.reshape(24, 24, *data.shape[1:])
    def create_disk_analysis(self, ds, cx, cy, r): return (ds, cy, cx, r)
    def run(self, analysis):
        ds, cy, cx, r = analysis
        return {"intensity": _Result(disk_sum(ds, cy, cx, r, extra=1))}  # wrong on purpose
"""


def _peer_python(tmp_path: Path) -> Path:
    site = tmp_path / "peers"
    (site / "libertem").mkdir(parents=True)
    (site / "_frames.py").write_text(_FRAMES)
    (site / "py4DSTEM.py").write_text(_PY4DSTEM)
    (site / "libertem" / "__init__.py").write_text('__version__ = "0.0-standin"\n')
    (site / "libertem" / "api.py").write_text(_LIBERTEM_API)
    python = tmp_path / "peer-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def _config(tmp_path: Path, **overrides) -> ComputeConfig:
    entry = manifest_entry("focus", MASTER, DATA, (24, 24), (32, 32), "uint16")
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(dump_manifest([entry]))
    values = dict(
        workload="products", root=DATA, manifest=manifest, backend="cpu", storage_id="test",
        output_dir=tmp_path / "out", reps=1, progress=False,
    )  # fmt: skip
    values.update(overrides)
    return ComputeConfig(**values)


def test_fresh_process_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(UsageError, match="products workload"):
        run_compute(_config(tmp_path, workload="dpc", fresh_processes=1))
    with pytest.raises(UsageError, match="needs --fresh-process"):
        run_compute(_config(tmp_path, peer_python=sys.executable))
    with pytest.raises(UsageError, match="not an executable"):
        run_compute(_config(tmp_path, fresh_processes=1, peer_python=str(tmp_path)))
    with pytest.raises(UsageError, match="negative"):
        run_compute(_config(tmp_path, fresh_processes=-1))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_fresh_process_cells_record_ours_and_the_peers_of_the_same_run(tmp_path):
    peer = _peer_python(tmp_path)
    outcome = run_compute(_config(tmp_path, fresh_processes=2, peer_python=str(peer)))
    assert outcome.exit_code == 0
    doc = parse_report(outcome.report_path)  # validates against the compute schema
    section = doc["first_call"]
    assert section["peer_versions"] == {"py4DSTEM": "0.0-standin", "LiberTEM": "0.0-standin"}
    cells = {c["library"]: c for c in section["cells"]}
    ours = cells["quantem.stem4d"]
    assert ours["n"] == 2 and ours["median"] > 0 and ours["median_cpu_seconds"] > 0
    outputs = doc["acquisitions"][0]["outputs"]
    for run in ours["runs"]:
        assert set(run["parts"]) >= {"interpreter", "imports", "load", "bf", "com"}
        assert run["numba_imported"] is False  # the one-shot path never starts numba
        for name in ("bf", "com_row", "com_col"):  # the in-process rounds' products
            assert run["products_sha256"][name] == outputs[name]["sha256"]
        assert run["residency_before"] == 1.0
    assert [r["bf_equals_disk_sum"] for r in cells["py4DSTEM"]["runs"]] == [True, True]
    assert [r["bf_equals_disk_sum"] for r in cells["LiberTEM"]["runs"]] == [False, False]
    assert cells["LiberTEM"]["disk"] == cells["py4DSTEM"]["disk"]
    # a claim may name a fresh-process cell of the record
    row = claims._one_summary(doc, {"acquisition": "focus", "library": "py4DSTEM"}, "test")
    assert row is cells["py4DSTEM"]


def test_a_peer_missing_from_the_interpreter_is_left_out(tmp_path):
    from harness.run.fresh.first_call import peer_versions

    assert peer_versions(None) == {"py4DSTEM": None, "LiberTEM": None}
    peer = _peer_python(tmp_path)
    assert peer_versions(str(peer)) == {"py4DSTEM": "0.0-standin", "LiberTEM": "0.0-standin"}
