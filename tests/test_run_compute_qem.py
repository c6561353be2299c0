"""``harness run compute --format qem``: the workload on a ``.qem`` made from the source, and
``--representation encoded`` (cuda; its products read the resident encoded payload)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_run_compute import MASTER, config

import quantem.stem4d.io
from harness.cli import main
from harness.comparability import collect_differences, comparison_key
from harness.errors import UsageError
from harness.report import parse_report
from harness.run.compute import workloads as compute_workloads
from harness.run.compute.config import check_source_format
from harness.run.compute.kind import run_compute
from harness.run.floors.read_once import read_once_floor
from quantem.stem4d.io.qem.reader import QemFile


def test_products_on_a_converted_qem_equal_the_hdf5_run(tmp_path):
    hdf5 = run_compute(config(tmp_path, "hdf5", workload="products"))
    qem = run_compute(config(tmp_path, "qem", workload="products", source_format="qem"))
    assert hdf5.exit_code == 0 and qem.exit_code == 0
    a, b = parse_report(hdf5.report_path), parse_report(qem.report_path)  # schema-valid
    # exact integer products: the same bytes whichever file they were read from
    assert b["acquisitions"][0]["outputs"] == a["acquisitions"][0]["outputs"]
    assert {t["format"] for t in b["trials"]} == {"qem"}
    assert {s["format"] for s in b["summaries"]} == {"qem"}
    assert b["conditions"]["source_format"] == "qem" and b["conditions"]["qem_version"] == 1
    assert b["acquisitions"][0]["qem_bytes"] > 0
    # a .qem run is never judged against an HDF5 one
    assert comparison_key(a) != comparison_key(b)
    assert [d.field for d in collect_differences(a, b)] == ["conditions.source_format"]


def test_qem_version_two_is_written_and_recorded(tmp_path, monkeypatch):
    written = []
    original = quantem.stem4d.io.load

    def spy(path, backend, **options):
        with QemFile(path) as qem:
            written.append(2 if qem.version_2 else 1)
        return original(path, backend, **options)

    monkeypatch.setattr(quantem.stem4d.io, "load", spy)
    cfg = config(tmp_path, "v2", workload="products", source_format="qem", qem_version=2, reps=1)
    outcome = run_compute(cfg)
    assert outcome.exit_code == 0
    assert set(written) == {2}
    assert parse_report(outcome.report_path)["conditions"]["qem_version"] == 2


def test_encoded_representation_reaches_the_loader(tmp_path, monkeypatch):
    seen = []

    def fake_load(path, backend, **options):
        seen.append((Path(path).suffix, backend, options))
        raise RuntimeError("stop after the load call")

    monkeypatch.setattr(quantem.stem4d.io, "load", fake_load)
    state = {"path": str(tmp_path / "x.qem"), "backend": "cuda", "on_close": []}
    state["load_options"] = {"representation": "encoded"}
    with pytest.raises(RuntimeError, match="stop after"):
        compute_workloads._load(state)
    assert seen == [(".qem", "cuda", {"representation": "encoded"})]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"representation": "encoded"}, "need --format qem"),
        ({"qem_version": 2}, "need --format qem"),
        ({"source_format": "qem", "representation": "encoded"}, "cuda representation"),
        (
            {"source_format": "qem", "representation": "encoded", "backend": "cuda"},
            "dpc workload needs the dense data",
        ),
        ({"source_format": "qem", "workload": "validate"}, "--format hdf5 only"),
        ({"source_format": "qem", "workload": "products", "fresh_processes": 2}, "hdf5 only"),
        ({"source_format": "zarr"}, "--format must be"),
        ({"source_format": "qem", "qem_version": 3}, "--qem-version must be"),
    ],
)
def test_refused_combinations(tmp_path, overrides, message):
    with pytest.raises(UsageError, match=message):
        check_source_format(config(tmp_path, "refused", **overrides))


def test_cli_refuses_encoded_on_the_cpu_without_a_traceback(tmp_path, capsys):
    code = main(
        [
            "run", "compute", "products", "--source", str(MASTER), "--backend", "cpu",
            "--output-dir", str(tmp_path / "out"), "--format", "qem",
            "--representation", "encoded",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 64 and "--representation encoded" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "compute.json").exists()


class _Encoded:
    def __init__(self, payload, nbytes):
        self.payload, self.nbytes = payload, nbytes


class _EncodedAcquisition:
    array = None

    def __init__(self, encoded):
        self.encoded = encoded


def test_read_once_floor_of_an_encoded_acquisition_reads_its_payload():
    rng = np.random.default_rng(3)
    payload = rng.integers(0, 256, 4096 + 64, dtype=np.uint8)  # padded past nbytes
    acq = _EncodedAcquisition(_Encoded(payload, 4096))
    floor = read_once_floor({"acq": acq}, "cpu", lambda: None)
    assert floor["data"] == "encoded_payload" and floor["bytes"] == 4096
    assert floor["seconds"] > 0
    assert read_once_floor({"acq": _EncodedAcquisition(None)}, "cpu", lambda: None) is None


def test_a_qem_run_with_a_streaming_ssb_is_refused(tmp_path):
    params = replace(config(tmp_path, "p").parameters, scan_block_rows=4)
    with pytest.raises(UsageError, match="stream the HDF5 source only"):
        check_source_format(
            config(tmp_path, "ssb", workload="ssb", source_format="qem", parameters=params)
        )


def test_products_stages_carry_the_floor_of_their_own_path(tmp_path):
    outcome = run_compute(config(tmp_path, "floors", workload="products", reps=1))
    assert outcome.exit_code == 0
    doc = parse_report(outcome.report_path)
    by_stage = {s["stage"]: s for s in doc["summaries"]}
    assert "ratio_to_floor" not in by_stage["prepare"]  # reads no data: no floor
    assert by_stage["mean_dp"]["floor_method"] == "read_once_xor_fold"
    assert by_stage["com"]["floor_method"] == "read_once_xor_fold"
    whole = doc["floors"]["read_once"]["focus"]
    lines = doc["floors"]["mask_lines"]["focus"]
    assert set(lines) == {"bf", "adf"}
    for stage in ("bf", "adf"):
        assert by_stage[stage]["floor_method"] == "mask_lines_xor_fold"
        assert by_stage[stage]["floor_seconds"] == lines[stage]["seconds"]
        assert 0 < lines[stage]["bytes"] <= whole["bytes"]
    # each reads its own mask's lines: the round's session knows no frame totals before
    # its CoM (the last stage), so the ADF's complement is no read of its own
    assert lines["bf"]["settings"]["read"] == "mask"
    assert lines["adf"]["settings"]["read"] == "mask"
    assert lines["adf"]["bytes"] > lines["bf"]["bytes"]
