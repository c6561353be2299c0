"""The loader contract: one suite that every loader of an acquisition passes.

Test-only (imports pytest and h5py). As zarr-python's ``testing/store.py`` does for stores, :class:`LoaderContract` holds
the tests and a subclass per loader says only how to load (``load``) and which loader
its metadata must equal (``reference``). The loaders are the CPU HDF5 and ``.qem``
readers (``tests/test_loader_contract.py``), the CUDA HDF5 and ``.qem`` paths with
CuPy replaced by host code (same file), and the real CUDA paths plus the encoded
representation (``tests/hardware/test_loader_contract_cuda.py``).

What every loader must give, for every load option:

- ``data`` equal to an independent reference: h5py's frames finished by a loop-based
  implementation of the options (:func:`reference_options`);
- ``validity`` equal to the reference's (a binned pixel valid iff its whole block is);
- the whole ``metadata`` dict equal to its reference loader's (the CPU reader of the
  same format), key for key and value for value, apart from ``load_stats`` (timings);
  and across formats, the load-option keys and the geometry equal the HDF5 reader's;
- the same errors for bad options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import h5py
import hdf5plugin  # noqa: F401  (registers the bitshuffle filter for h5py)
import numpy as np
import pytest

from quantem.stem4d.errors import UnsupportedDtypeError
from quantem.stem4d.io import parse_options
from quantem.stem4d.io.qem.writer import save_qem
from quantem.stem4d.io.registry import find_loader
from quantem.stem4d.io.synthetic import SyntheticModel, write_synthetic_arina
from quantem.stem4d.io.transforms import LOAD_METADATA_KEYS

SCAN = (3, 4)
DETECTOR = (13, 10)
SEED = 5
#: Option sets every loader is checked with (dtype, apply_mask, det_bin).
OPTION_SETS = [
    ("native", True, 1),
    ("native", False, 1),
    ("u8", True, 1),
    ("u32", False, 1),
    ("native", True, 3),
    ("u8", False, 2),
]
#: Keys that describe one run, not the data (timings, staging), never compared.
RUN_KEYS = ("load_stats",)


def h5py_frames(master: Path) -> np.ndarray:
    """Every frame of an ARINA acquisition, in shard order, read by h5py through the links."""
    with h5py.File(master, "r") as f:
        group = f["/entry/data"]
        names = sorted(k for k in group if k.startswith("data_"))
        return np.concatenate([group[k][()] for k in names])


def reference_options(
    frames: np.ndarray, pixel_mask: np.ndarray, dtype: str, apply_mask: bool, det_bin: int
) -> tuple[np.ndarray, int]:
    """Independent, loop-based reference of the load options (mask, dtype, bin).

    ``dtype`` is ``"native"``, ``"u8"``, ``"u16"`` or ``"u32"``; returns int64 frames
    and the number of clipped values.
    """
    out = frames.astype(np.int64)
    if apply_mask:
        out[:, pixel_mask != 0] = 0
    clipped = 0
    limits = {"u8": 255, "u16": 65535, "u32": 2**32 - 1}
    if dtype != "native":
        clipped = int((out > limits[dtype]).sum())
        out = np.minimum(out, limits[dtype])
    if det_bin > 1:
        n, r, c = out.shape
        rows, cols = r // det_bin, c // det_bin
        binned = np.zeros((n, rows, cols), dtype=np.int64)
        for i in range(rows):
            for j in range(cols):
                binned[:, i, j] = out[
                    :, i * det_bin : (i + 1) * det_bin, j * det_bin : (j + 1) * det_bin
                ].sum(axis=(1, 2))
        out = np.minimum(binned, 2**32 - 1)  # uint32 block sums saturate
    return out, clipped


class Loaded:
    """What a contract test looks at: host copies of data and validity, the metadata."""

    def __init__(self, data: Any, metadata: dict, validity: Any) -> None:
        self.data = None if data is None else np.asarray(data)
        self.metadata = metadata
        self.validity = np.asarray(validity)


def make_sources(folder: Path) -> dict[str, Path]:
    """A small ARINA acquisition with dead pixels (uint16, counts above 255) and the
    same acquisition as ``.qem`` (source dtype kept, so ``native`` means the same)."""
    master = write_synthetic_arina(
        folder / "arina",
        scan_shape=SCAN,
        detector_shape=DETECTOR,
        dtype="uint16",
        frames_per_shard=5,
        dose=4000.0,
        seed=SEED,
        dead_pixels=4,
        processes=1,
    )
    qem = save_qem(master, folder / "acq.qem", keep_source_dtype=True, block_frames=5)
    return {"hdf5": master, "qem": qem}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and (a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    return type(a) is type(b) and a == b


def assert_same_metadata(got: dict, expected: dict) -> None:
    got = {k: v for k, v in got.items() if k not in RUN_KEYS}
    expected = {k: v for k, v in expected.items() if k not in RUN_KEYS}
    assert got.keys() == expected.keys(), (
        sorted(set(got) ^ set(expected)),
        "keys that only one loader has",
    )
    differ = [k for k in got if not _equal(got[k], expected[k])]
    assert not differ, {k: (got[k], expected[k]) for k in differ}


class LoaderContract:
    """Subclass, set ``fmt`` (``"hdf5"`` or ``"qem"``) and implement :meth:`load`."""

    fmt: ClassVar[str]
    #: False for the encoded representation: no dense data, only the stored counts.
    dense: ClassVar[bool] = True

    def load(self, path: Path, **options: Any) -> Loaded:
        raise NotImplementedError

    def reference(self, path: Path, fmt: str | None = None, **options: Any) -> Loaded:
        """The CPU loader of ``fmt`` (default: this loader's format): the metadata every
        loader of that format must match."""
        from quantem.stem4d.io.arina import load_arina
        from quantem.stem4d.io.qem.reader import load_qem

        reader = load_arina if (fmt or self.fmt) == "hdf5" else load_qem
        with reader(path, **options) as acq:
            return Loaded(acq.data, acq.metadata, acq.validity)

    # -- fixtures ---------------------------------------------------------------------
    @pytest.fixture(scope="class")
    def sources(self, tmp_path_factory) -> dict[str, Path]:
        return make_sources(tmp_path_factory.mktemp("contract"))

    @pytest.fixture(scope="class")
    def raw(self, sources) -> np.ndarray:
        return h5py_frames(sources["hdf5"])

    @pytest.fixture
    def path(self, sources) -> Path:
        return sources[self.fmt]

    # -- the contract -----------------------------------------------------------------
    @pytest.mark.parametrize(("dtype", "apply_mask", "det_bin"), OPTION_SETS)
    def test_data_validity_and_metadata(self, path, raw, dtype, apply_mask, det_bin):
        if not self.dense and (dtype, det_bin) != ("native", 1):
            pytest.skip("the encoded representation keeps the stored counts")
        options = dict(dtype=dtype, apply_mask=apply_mask, det_bin=det_bin)
        got = self.load(path, **options)
        mask = SyntheticModel(SCAN, DETECTOR, "uint16", 4000.0, SEED, 4).pixel_mask
        expected, clipped = reference_options(raw, mask, dtype, apply_mask, det_bin)
        if self.dense:
            assert got.data.shape == (*SCAN, *expected.shape[1:])
            assert got.data.dtype.name == got.metadata["dtype"]
            np.testing.assert_array_equal(got.data.reshape(expected.shape), expected)
        assert got.metadata["clipped_pixels"] == clipped
        rows, cols = expected.shape[1:]
        valid = (mask == 0)[: rows * det_bin, : cols * det_bin]
        valid = valid.reshape(rows, det_bin, cols, det_bin).all(axis=(1, 3))
        assert got.validity.dtype == bool
        np.testing.assert_array_equal(got.validity, valid)
        reference = self.reference(path, **options)
        assert_same_metadata(got.metadata, reference.metadata)

    def test_default_load_masks_dead_pixels(self, path, raw):
        got = self.load(path)
        assert got.metadata["load_options"] == {
            "dtype": "native",
            "apply_mask": self.dense,  # the encoded payload keeps the stored counts
            "det_bin": 1,
        }
        mask = got.metadata["pixel_mask"]
        assert mask.any(), "the source must have dead pixels for this test to mean anything"
        if self.dense:
            frames = got.data.reshape(-1, *DETECTOR)
            assert not frames[:, mask != 0].any()
            assert (raw[:, mask != 0] == np.iinfo(raw.dtype).max).all()  # dead: the maximum
            np.testing.assert_array_equal(frames[:, mask == 0], raw[:, mask == 0])

    def test_load_keys_agree_across_formats(self, sources):
        hdf5 = self.reference(sources["hdf5"], "hdf5", det_bin=2)
        mine = self.load(sources[self.fmt], **({"det_bin": 2} if self.dense else {}))
        keys = [*LOAD_METADATA_KEYS, "scan_shape", "n_frames", "pixel_mask", "invalid_pixels"]
        if not self.dense:
            hdf5 = self.reference(sources["hdf5"], "hdf5", apply_mask=False)
        for key in keys:
            assert _equal(mine.metadata[key], hdf5.metadata[key]), key

    @pytest.mark.parametrize(
        ("options", "error", "match"),
        [
            ({"dtype": "f4"}, UnsupportedDtypeError, "dtype"),
            ({"apply_mask": 1}, ValueError, "apply_mask"),
            ({"det_bin": 0}, ValueError, "det_bin"),
            ({"det_bin": 11}, ValueError, "larger than"),
        ],
    )
    def test_bad_options_raise_the_same_errors(self, path, options, error, match):
        with pytest.raises(error, match=match):
            self.load(path, **options)


class RegisteredLoaderContract(LoaderContract):
    """The contract for the loader registered for (``backend``, ``fmt``) in
    :mod:`quantem.stem4d.io.registry` (built in, by :func:`register_loader
    <quantem.stem4d.io.registry.register_loader>` or by an entry point), called as
    ``io.load`` calls it (one parsed ``load_options``). Subclass and set ``backend``
    and ``fmt``."""

    backend: ClassVar[str] = "cpu"

    def load(self, path: Path, **options: Any) -> Loaded:
        loader = find_loader(self.backend, self.fmt).resolve()
        with loader(path, **parse_options(options)) as acq:
            return Loaded(acq.data, acq.metadata, acq.validity)
