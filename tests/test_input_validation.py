"""Bad input is a clean error, never a traceback or silently wrong data (issue 12, "Inputs")."""

from __future__ import annotations

import hashlib
import json
import os
import time

import h5py
import numpy as np
import pytest

from harness.cli import main
from harness.errors import ManifestError, ReportValidationError
from harness.fsio import PARTIAL_STALE_SECONDS, iter_stale_partials
from harness.report import dump_report, parse_report
from harness.run.manifest import parse_manifest
from harness.testing import make_example_report
from quantem.stem4d.errors import ArinaFormatError
from quantem.stem4d.io.arina import open_arina
from quantem.stem4d.io.synthetic import write_synthetic_arina

SHA = hashlib.sha256(b"master bytes").hexdigest()


@pytest.fixture
def root(tmp_path):
    data = tmp_path / "root"
    (data / "scan").mkdir(parents=True)
    (data / "scan" / "a_master.h5").write_bytes(b"master bytes")
    return data


def _manifest(tmp_path, text: str):
    path = tmp_path / "manifest.json"
    path.write_text(text)
    return path


def _entry(**fields) -> dict:
    return {"id": "a", "filename": "scan/a_master.h5", "source_master_sha256": SHA, **fields}


# --- JSON Schema patterns: `$` alone lets a trailing newline through (Python's re) -----


@pytest.mark.parametrize(
    "field, value",
    [("id", "a\n"), ("source_master_sha256", SHA + "\n"), ("indexed_product_sha256", SHA + "\n")],
)
def test_manifest_ids_and_hashes_with_a_trailing_newline_are_refused(tmp_path, root, field, value):
    path = _manifest(tmp_path, json.dumps({"selected_acquisitions": [_entry(**{field: value})]}))
    with pytest.raises(ManifestError, match=field):
        parse_manifest(path, root)


@pytest.mark.parametrize("where", ["created_utc", "sha256"])
def test_report_timestamps_and_hashes_with_a_trailing_newline_are_refused(where) -> None:
    doc = make_example_report(1)
    if where == "created_utc":
        doc["created_utc"] = doc["created_utc"] + "\n"
    else:
        doc["acquisitions"][0]["source_master_sha256"] += "\n"
    with pytest.raises(ReportValidationError):
        parse_report(dump_report(doc), name="report.json")


# --- manifests: duplicate keys, NUL bytes, deep nesting --------------------------------


def test_manifest_with_duplicate_keys_is_refused(tmp_path, root) -> None:
    entry = json.dumps(_entry())
    text = '{"selected_acquisitions": [' + entry[:-1] + ', "id": "b"}]}'
    with pytest.raises(ManifestError, match="duplicate key 'id'"):
        parse_manifest(_manifest(tmp_path, text), root)


def test_manifest_filename_with_a_nul_byte_is_a_clean_error(tmp_path, root) -> None:
    text = json.dumps({"selected_acquisitions": [_entry(filename="scan/a\u0000_master.h5")]})
    with pytest.raises(ManifestError, match="NUL byte"):
        parse_manifest(_manifest(tmp_path, text), root)
    text = json.dumps({"selected_acquisitions": [_entry(qem_reference_header="h\u0000.json")]})
    with pytest.raises(ManifestError, match="NUL byte"):
        parse_manifest(_manifest(tmp_path, text), root)


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deeply_nested_manifest_is_a_clean_error(tmp_path, root, depth) -> None:
    nested = "[" * depth + "]" * depth
    text = '{"selected_acquisitions": [' + json.dumps(_entry())[:-1] + f', "x": {nested}}}]}}'
    with pytest.raises(ManifestError):
        parse_manifest(_manifest(tmp_path, text), root)


def test_manifest_that_is_not_an_object_is_refused(tmp_path, root) -> None:
    with pytest.raises(ManifestError, match="JSON object"):
        parse_manifest(_manifest(tmp_path, "[1, 2]"), root)


def test_bad_manifest_through_the_cli_is_one_line(tmp_path, root, capsys) -> None:
    path = _manifest(tmp_path, "[" * 100_000 + "]" * 100_000)
    code = main(
        ["run", "io-scale", str(root), "--selection-manifest", str(path),
         "--output-dir", str(tmp_path / "out"), "--storage-id", "x", "--backend", "cpu"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and "nested too deeply" in err


# --- ARINA masters: a float pixel_mask, a string ntrigger ------------------------------


@pytest.fixture
def acquisition(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=(3, 4), detector_shape=(16, 16), frames_per_shard=5,
        processes=1,
    )  # fmt: skip


def _replace_spec(master, name, value) -> None:
    with h5py.File(master, "r+") as f:
        spec = f["/entry/instrument/detector/detectorSpecific"]
        del spec[name]
        spec[name] = value


def test_float_pixel_mask_is_refused(acquisition) -> None:
    _replace_spec(acquisition, "pixel_mask", np.full((16, 16), 0.5, np.float32))
    with pytest.raises(ArinaFormatError, match="pixel_mask has dtype float32"):
        open_arina(acquisition)


@pytest.mark.parametrize("value", [np.bytes_(b"twelve"), np.float64(12.0), np.uint64(0)])
def test_non_integer_ntrigger_is_refused(acquisition, value) -> None:
    _replace_spec(acquisition, "ntrigger", value)
    with pytest.raises(ArinaFormatError, match="ntrigger must be"):
        open_arina(acquisition)


def test_string_ntrigger_through_the_cli_is_one_line(acquisition, capsys) -> None:
    _replace_spec(acquisition, "ntrigger", np.bytes_(b"twelve"))
    assert main(["data", "info", str(acquisition)]) == 1
    err = capsys.readouterr().err
    assert "ntrigger must be an integer" in err and "Traceback" not in err


# --- a killed `qem convert` leaves .partial files: the next convert removes them -------


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_stale_partial_files_are_removed_by_the_next_convert(acquisition, tmp_path, capsys):
    out = tmp_path / "qem"
    out.mkdir()
    old = time.time() - 2 * PARTIAL_STALE_SECONDS
    stale = out / f".killed.qem.{_dead_pid()}.partial"
    stale.write_bytes(b"half a file")
    os.utime(stale, (old, old))
    fresh_dead = out / f".recent.qem.{_dead_pid()}.partial"  # maybe another host's writer
    fresh_dead.write_bytes(b"being written")
    alive = out / f".running.qem.{os.getpid()}.partial"
    alive.write_bytes(b"being written")
    os.utime(alive, (old, old))
    assert list(iter_stale_partials(out)) == [stale]
    assert main(["qem", "convert", str(acquisition), str(out / "a.qem")]) == 0
    assert not stale.exists() and fresh_dead.exists() and alive.exists()
    assert f"removed {stale}" in capsys.readouterr().err
    assert (out / "a.qem").is_file()
