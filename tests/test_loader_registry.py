"""Loaders found by (backend, format) through quantem.stem4d.io.registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from quantem.stem4d import io
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import SourceIsDirectoryError, UnsupportedDtypeError
from quantem.stem4d.io import formats, registry
from quantem.stem4d.io.transforms import LoadOptions, parse_loader_options
from quantem.stem4d.testing.loader_contract import (
    RegisteredLoaderContract,
    h5py_frames,
    make_sources,
)


def load_npy(path, load_options=None, **options):
    """A test loader: a 4D ``.npy`` array, what it was given recorded in the metadata."""
    data = np.load(path)
    meta = {"scan_shape": data.shape[:2], "detector_shape": data.shape[2:], "options": options}
    meta["load_options"] = load_options
    return Acquisition(data, meta, np.ones(data.shape[2:], bool), "cpu")


@pytest.fixture
def npy_format(monkeypatch, tmp_path):
    monkeypatch.setitem(formats.FORMAT_SUFFIXES, ".npy", "npy")
    yield tmp_path / "scan.npy"
    registry.unregister_loader("cpu", "npy")


def test_detect_format():
    assert formats.detect_format("a/b.QEM") == "qem"
    assert formats.detect_format("a/b_master.h5") == "hdf5"
    assert formats.is_qem("x.qem") and not formats.is_qem("x.qem.h5")


def test_detect_format_refuses_a_directory(tmp_path):
    with pytest.raises(SourceIsDirectoryError, match="is a directory"):
        formats.detect_format(tmp_path)


def test_a_registered_loader_is_what_load_calls(npy_format):
    np.save(npy_format, np.arange(2 * 3 * 4 * 5, dtype=np.uint16).reshape(2, 3, 4, 5))
    registry.register_loader("cpu", "npy", f"{__name__}:load_npy")
    with io.load(npy_format, det_bin=1, threads=2) as acq:
        assert acq.shape == (2, 3, 4, 5)
        assert acq.metadata["options"] == {"threads": 2}
        assert acq.metadata["load_options"] == LoadOptions("native", True, 1)


def test_an_entry_point_registers_a_loader(npy_format, monkeypatch):
    class Point:
        name, value = "cpu:npy", f"{__name__}:load_npy"

    asked = []
    monkeypatch.setattr(registry, "_entry_points_read", False)
    monkeypatch.setattr(registry, "entry_points", lambda group: asked.append(group) or [Point])
    np.save(npy_format, np.zeros((1, 1, 2, 2), np.uint8))
    with io.load(npy_format) as acq:
        assert acq.shape == (1, 1, 2, 2)
    assert asked == [registry.ENTRY_POINT_GROUP]


def test_an_unknown_format_names_what_is_registered(npy_format):
    npy_format.write_bytes(b"")
    with pytest.raises(ValueError, match=r"no loader for format 'npy' on backend 'cpu'.*cpu/qem"):
        io.load(npy_format)


def test_a_second_loader_for_one_key_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        registry.register_loader("cpu", "qem", f"{__name__}:load_npy")
    with pytest.raises(ValueError, match="'module:function'"):
        registry.register_loader("cpu", "npy", "load_npy")


def test_the_builtin_entries_name_real_loaders():
    for entry in registry.registered_loaders():
        if entry.backend == "cpu":
            assert callable(entry.resolve())
        assert entry.target.startswith("quantem.stem4d.")


def test_devices_on_a_backend_without_a_sharded_loader(tmp_path):
    with pytest.raises(ValueError, match="backend 'cpu' takes none"):
        io.load(tmp_path / "x.qem", "cpu", devices=[0])


def test_importing_io_imports_no_loader():
    """The registry names loaders: importing io loads no loader, no h5py, no cuda package,
    and (until the first load) neither numpy nor the entry-point machinery."""
    heavy = (
        "'quantem.stem4d.cuda', 'h5py', 'quantem.stem4d.io.arina', 'numpy', 'importlib.metadata'"
    )
    code = (
        "import sys, quantem.stem4d.io; "
        f"print(sorted(m for m in sys.modules if m.startswith(({heavy}))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"dtype": "f4"}, UnsupportedDtypeError, "dtype 'f4'"),
        ({"apply_mask": "yes"}, ValueError, "apply_mask must be True or False"),
        ({"det_bin": 0}, ValueError, "det_bin must be an integer >= 1"),
    ],
)
def test_bad_options_are_refused_before_the_backend_or_the_file(options, error, match, tmp_path):
    """No GPU, no file: the option error still comes first, naming the parameter."""
    with pytest.raises(error, match=match):
        io.load(tmp_path / "missing_master.h5", "cuda", **options)


def test_the_loader_gets_one_parsed_load_options(npy_format):
    np.save(npy_format, np.zeros((1, 1, 2, 2), np.uint8))
    registry.register_loader("cpu", "npy", f"{__name__}:load_npy")
    with io.load(npy_format, dtype=np.dtype("uint8"), det_bin=np.int64(2)) as acq:
        assert acq.metadata["options"] == {}
        parsed = acq.metadata["load_options"]
        assert type(parsed) is LoadOptions and parsed == LoadOptions("uint8", True, 2)
        assert type(parsed.det_bin) is int
    given = LoadOptions("uint16", False, 1)
    with io.load(npy_format, load_options=given) as acq:
        assert acq.metadata["load_options"] is given
    with io.load(npy_format, dtype="source") as acq:  # a .qem reader resolves it per file
        assert acq.metadata["options"] == {"dtype": "source"}
        assert acq.metadata["load_options"] is None


def test_load_options_and_their_keywords_are_not_both_taken(npy_format):
    registry.register_loader("cpu", "npy", f"{__name__}:load_npy")
    with pytest.raises(ValueError, match="not both"):
        io.load(npy_format, dtype="u8", load_options=LoadOptions())
    with pytest.raises(ValueError, match="not both"):
        parse_loader_options(LoadOptions(), "native", False, 1)
    with pytest.raises(TypeError, match="load_options must be a LoadOptions"):
        parse_loader_options({"dtype": "u8"}, "native", True, 1)


def load_qem_unmasked(path, *, load_options=None, **options):
    """A faulty third-party ``.qem`` loader: it drops ``apply_mask``."""
    from quantem.stem4d.io.qem.reader import load_qem

    return load_qem(path, **options, apply_mask=False)


class ReplacedQem(RegisteredLoaderContract):
    backend, fmt = "cpu", "qem"


def test_the_shipped_contract_catches_a_replaced_loader_that_breaks_it(tmp_path):
    """Replace the cpu/qem entry as a third party would: the contract, called on that
    entry, fails where the loader is wrong and passes for the built-in one."""
    sources = make_sources(tmp_path)
    raw = h5py_frames(sources["hdf5"])
    contract = ReplacedQem()
    contract.test_default_load_masks_dead_pixels(sources["qem"], raw)  # the built-in
    builtin = registry.find_loader("cpu", "qem")
    registry.register_loader("cpu", "qem", f"{__name__}:load_qem_unmasked", replace=True)
    try:
        with pytest.raises(AssertionError):
            contract.test_default_load_masks_dead_pixels(sources["qem"], raw)
    finally:
        registry.register_loader("cpu", "qem", builtin.target, replace=True)
    assert registry.find_loader("cpu", "qem") == builtin
