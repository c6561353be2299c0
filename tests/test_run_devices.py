"""``harness run io-scale --devices``: parsing, configuration checks, the comparison key
and the per-device trial fields (no GPU needed)."""

from __future__ import annotations

import copy
import hashlib
import json
import types

import pytest

from harness import comparability
from harness.commands.run import _parse_devices_flag
from harness.errors import ReportValidationError, UsageError
from harness.report import validate_report
from harness.run import trials
from harness.run.backends import PROFILES
from harness.run.io_scale import config as io_scale_config
from harness.run.io_scale import steps as io_steps
from harness.testing import make_example_report

DEVICES = [
    {"id": 0, "name": "NVIDIA H200", "uuid": "GPU-00"},
    {"id": 1, "name": "NVIDIA H200", "uuid": "GPU-11"},
]


def test_devices_flag_parses_ids_and_all():
    assert _parse_devices_flag(None) is None
    assert _parse_devices_flag("0,1") == (0, 1)
    assert _parse_devices_flag("all") == "all"
    with pytest.raises(UsageError, match=r"--devices '0,x': give GPU ids"):
        _parse_devices_flag("0,x")


def _config(tmp_path, **overrides):
    values = dict(
        root=tmp_path, manifest=tmp_path / "m.json", backend="cuda", storage_id="s",
        output_dir=tmp_path / "out",
    )  # fmt: skip
    values.update(overrides)
    return io_scale_config.IoScaleConfig(**values)


@pytest.fixture
def gpus(monkeypatch):
    """Pretend the cuda backend can run, with ``n`` GPUs."""

    def install(n: int) -> None:
        monkeypatch.setattr(type(PROFILES["cuda"]), "require", lambda self: None)
        monkeypatch.setattr(io_scale_config, "device_count", lambda: n)

    return install


def test_check_config_resolves_devices_and_refuses_bad_ones(tmp_path, gpus):
    gpus(2)
    profile = io_scale_config.check_config(_config(tmp_path, devices=(1, 0)))
    assert profile.devices == (1, 0)
    assert io_scale_config.check_config(_config(tmp_path, devices="all")).devices == (0, 1)
    assert io_scale_config.check_config(_config(tmp_path)).devices is None
    with pytest.raises(UsageError, match=r"^--devices: GPU 5 does not exist; this host has 2"):
        io_scale_config.check_config(_config(tmp_path, devices=(5,)))
    with pytest.raises(UsageError, match="GPU 0 is listed twice"):
        io_scale_config.check_config(_config(tmp_path, devices=(0, 0)))
    with pytest.raises(UsageError, match="--devices needs --backend cuda"):
        io_scale_config.check_config(_config(tmp_path, backend="cpu", devices=(0,)))


def test_one_gpu_reports_keep_their_comparison_key():
    doc = make_example_report(1, device_uuid="GPU-abc")
    assert "devices" not in doc["conditions"]
    fields = comparability.comparison_fields(doc)
    assert "conditions.devices" not in fields
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    assert comparability.comparison_key(doc) == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_devices_are_part_of_the_comparison_key():
    one = make_example_report(1, device_uuid="GPU-00")
    two = copy.deepcopy(one)
    two["conditions"]["devices"] = DEVICES
    swapped = copy.deepcopy(one)
    swapped["conditions"]["devices"] = DEVICES[::-1]
    keys = {comparability.comparison_key(d) for d in (one, two, swapped)}
    assert len(keys) == 3
    differences = comparability.collect_differences(one, two)
    assert [d.field for d in differences] == ["conditions.devices"]
    assert differences[0].baseline is None and differences[0].candidate == DEVICES


def _sharded_acquisition():
    stats = {
        "compressed_bytes": 300,
        "pipeline_seconds": 0.5,
        "read_seconds": 0.7,
        "devices": [
            {"device": 0, "name": "G", "uuid": "GPU-00", "rows": [0, 3], "compressed_bytes": 200,
             "bytes_share": 2 / 3, "read_seconds": 0.4, "pipeline_seconds": 0.5, "batches": 2},
            {"device": 1, "name": "G", "uuid": "GPU-11", "rows": [3, 5], "compressed_bytes": 100,
             "bytes_share": 1 / 3, "read_seconds": 0.3, "pipeline_seconds": 0.45, "batches": 1},
        ],
    }  # fmt: skip
    return types.SimpleNamespace(metadata={"load_stats": stats})


def test_trial_records_carry_each_device_and_validate():
    acq = _sharded_acquisition()
    devices = io_steps.loader_devices(acq)
    assert [d["device"] for d in devices] == [0, 1]
    assert [d["bytes"] for d in devices] == [200, 100]
    assert devices[0]["stages"] == {"loader_read": 0.4, "loader_pipeline": 0.5}
    assert io_steps.loader_stages(acq) == {"loader_pipeline": 0.5, "loader_read": 0.7}
    assert io_steps.loader_devices(types.SimpleNamespace(metadata={})) is None
    m = trials.Measurement("cached", 1.0, {}, 1.0, 0, 10, extra={"devices": devices})
    state = types.SimpleNamespace(
        selected=types.SimpleNamespace(id="scan-a"),
        expected=types.SimpleNamespace(shape=[5, 4, 8, 8], dtype_of=lambda fmt: "uint16"),
    )
    record = io_steps.trial_record(state, "hdf5", 0, m, product=None)
    assert record["devices"] == devices
    doc = make_example_report(1)
    doc["conditions"]["devices"] = DEVICES
    doc["trials"][0]["devices"] = devices
    validate_report(doc)
    doc["trials"][0]["devices"][0]["bytes_share"] = 2.0
    with pytest.raises(ReportValidationError):
        validate_report(doc)
