"""Selection manifests: schema validation, ROOT confinement, master SHA-256 checks."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from harness.errors import ManifestError
from harness.run.manifest import check_master_hashes, dump_manifest, parse_manifest


@pytest.fixture
def root(tmp_path):
    data = tmp_path / "root"
    (data / "scan").mkdir(parents=True)
    (data / "scan" / "a_master.h5").write_bytes(b"master bytes")
    return data


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(tmp_path, entries, **top):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"selected_acquisitions": entries, **top}))
    return path


def _entry(**fields):
    entry = {
        "id": "a",
        "filename": "scan/a_master.h5",
        "source_master_sha256": _sha(b"master bytes"),
    }
    entry.update(fields)
    return entry


def test_valid_manifest_parses_and_checks(tmp_path, root):
    manifest = parse_manifest(_write(tmp_path, [_entry(shape=[2, 2, 4, 4], dtype="uint16")]), root)
    (acq,) = manifest.acquisitions
    assert acq.master_path == (root / "scan" / "a_master.h5").resolve()
    assert acq.shape == (2, 2, 4, 4)
    check_master_hashes(manifest)


def test_wrong_master_sha256_is_refused(tmp_path, root):
    manifest = parse_manifest(_write(tmp_path, [_entry(source_master_sha256="0" * 64)]), root)
    with pytest.raises(ManifestError, match="has SHA-256") as info:
        check_master_hashes(manifest)
    assert info.value.exit_code == 1


@pytest.mark.parametrize(
    "filename", ["../outside_master.h5", "scan/../../outside_master.h5", "/etc/passwd"]
)
def test_paths_escaping_root_are_refused(tmp_path, root, filename):
    (tmp_path / "outside_master.h5").write_bytes(b"x")
    with pytest.raises(ManifestError, match=r"escapes ROOT|absolute"):
        parse_manifest(_write(tmp_path, [_entry(filename=filename)]), root)


def test_symlink_escaping_root_is_refused(tmp_path, root):
    (tmp_path / "outside_master.h5").write_bytes(b"x")
    os.symlink(tmp_path / "outside_master.h5", root / "link_master.h5")
    with pytest.raises(ManifestError, match="escapes ROOT"):
        parse_manifest(_write(tmp_path, [_entry(filename="link_master.h5")]), root)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_entry(source_master_sha256="abc"), "source_master_sha256"),
        (_entry(unknown_field=1), "unknown_field"),
        (_entry(dtype="float32"), "dtype"),
        (_entry(sample_hashes_u32_le=["0" * 64]), "sample_frames"),
        ({"id": "a", "filename": "scan/a_master.h5"}, "source_master_sha256"),
    ],
)
def test_schema_errors_name_the_field(tmp_path, root, entry, message):
    with pytest.raises(ManifestError, match=message):
        parse_manifest(_write(tmp_path, [entry]), root)


def test_duplicate_ids_and_hash_count_mismatch(tmp_path, root):
    with pytest.raises(ManifestError, match="duplicate"):
        parse_manifest(_write(tmp_path, [_entry(), _entry()]), root)
    with pytest.raises(ManifestError, match="2 hashes for 1 sample frames"):
        parse_manifest(
            _write(tmp_path, [_entry(sample_frames=[0], sample_hashes_u32_le=["0" * 64] * 2)]), root
        )


def test_reference_header_relative_to_manifest(tmp_path, root):
    (tmp_path / "a.qemhdr").write_bytes(b"h")
    manifest = parse_manifest(_write(tmp_path, [_entry(qem_reference_header="a.qemhdr")]), root)
    assert manifest.acquisitions[0].qem_reference_header == tmp_path / "a.qemhdr"
    with pytest.raises(ManifestError, match="no such file"):
        parse_manifest(_write(tmp_path, [_entry(qem_reference_header="missing.qemhdr")]), root)


def test_newer_schema_version_and_bad_json(tmp_path, root):
    with pytest.raises(ManifestError, match="newer"):
        parse_manifest(_write(tmp_path, [_entry()], schema_version=2), root)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ManifestError, match="not valid JSON"):
        parse_manifest(bad, root)


def test_dump_manifest_round_trips(tmp_path, root):
    path = tmp_path / "m.json"
    path.write_bytes(dump_manifest([_entry()]))
    assert parse_manifest(path, root).acquisitions[0].id == "a"
