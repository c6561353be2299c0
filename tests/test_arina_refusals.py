"""Every refusal of the ARINA reader, each from a crafted file, with its exact message.

One test per ``raise`` of ``quantem/stem4d/io/arina.py`` that no other default-tier test
pins down exactly: deleting or loosening any of these checks fails a test here (the
mutation run of docs/arina.md counts on it). The files are written with h5py and
hdf5plugin (not our writer) where the point is a layout our writer never makes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from quantem.stem4d.errors import (
    ArinaFormatError,
    ScanShapeError,
    SourceNotFoundError,
    UnsupportedDtypeError,
)
from quantem.stem4d.io.arina import (
    iter_frame_batches,
    load_arina,
    open_arina,
    read_compressed,
    resolve_scan_shape,
)
from quantem.stem4d.io.synthetic import make_frames, write_synthetic_arina

SPEC = "/entry/instrument/detector/detectorSpecific"
FRAMES = make_frames(0, 12, scan_shape=(3, 4), detector_shape=(8, 8))


@pytest.fixture(scope="module")
def _template(tmp_path_factory) -> Path:
    return write_synthetic_arina(
        tmp_path_factory.mktemp("template") / "acq", scan_shape=(3, 4), detector_shape=(8, 8),
        frames_per_shard=5, processes=1,
    )  # fmt: skip


@pytest.fixture
def master(tmp_path, _template) -> Path:
    """12 frames of 8x8 uint16 in shards of 5, 5 and 2 frames, scan_shape (3, 4) (a
    private copy of one written acquisition)."""
    shutil.copytree(_template.parent, tmp_path / "acq")
    return tmp_path / "acq" / _template.name


def shard(master: Path, i: int) -> Path:
    return master.parent / f"synthetic_data_{i:06d}.h5"


def link_of(master: Path, i: int) -> str:
    return f"the target of /entry/data/data_{i:06d} in {master}"


def refusal(error_type, call, *args, **kwargs) -> BaseException:
    with pytest.raises(error_type) as info:
        call(*args, **kwargs)
    return info.value


def replace_shard(master: Path, i: int, data: np.ndarray, **create) -> Path:
    """Shard ``i`` rewritten by h5py with ``data`` and the given dataset options."""
    path = shard(master, i)
    path.unlink()
    with h5py.File(path, "w") as f:
        f.create_dataset("/entry/data/data", data=data, **create)
    return path


def set_field(master: Path, name: str, value) -> None:
    with h5py.File(master, "r+") as f:
        spec = f[SPEC]
        if name in spec:
            del spec[name]
        if value is not None:
            spec[name] = value


def relink(master: Path, name: str, link) -> None:
    with h5py.File(master, "r+") as f:
        group = f["/entry/data"]
        del group[name]
        if link is not None:
            group[name] = link


# -- the master -----------------------------------------------------------------------


def test_no_data_group(tmp_path):
    path = tmp_path / "x_master.h5"
    with h5py.File(path, "w") as f:
        f["/entry/other"] = 1
    error = refusal(ArinaFormatError, open_arina, path)
    assert str(error) == f"{path}: not an ARINA master: no /entry/data group"


def test_no_data_entries(master):
    with h5py.File(master, "r+") as f:
        for name in ("data_000001", "data_000002", "data_000003"):
            f["/entry/data"].move(name, f"frames_{name}")  # names the pattern does not match
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == f"{master}: not an ARINA master: no data_NNNNNN entries in /entry/data"


def test_soft_link(master):
    relink(master, "data_000002", h5py.SoftLink("/entry/data/data_000001"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == f"{master}: /entry/data/data_000002 is a soft link"


def test_no_ntrigger(master):
    set_field(master, "ntrigger", None)
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: not an ARINA master: no /entry/instrument/detector/detectorSpecific/ntrigger"
    )


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (np.float64(12.0), "ntrigger must be an integer, not 12.0"),
        (np.bool_(True), "ntrigger must be an integer, not True"),
        (np.int64(0), "ntrigger must be at least 1, not 0"),
        (np.int64(-12), "ntrigger must be at least 1, not -12"),
    ],
)
def test_ntrigger_not_a_positive_integer(master, value, detail):
    set_field(master, "ntrigger", value)
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == f"{master}: {detail}"


def test_nimages_is_checked_and_multiplies(master):
    set_field(master, "nimages", np.float32(1.0))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == f"{master}: nimages must be an integer, not 1.0"
    set_field(master, "nimages", np.uint64(2))  # 12 frames held, 12 * 2 expected
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: frame count mismatch: shards hold 12 frames, ntrigger * nimages = 24"
    )
    set_field(master, "ntrigger", np.uint64(6))
    assert open_arina(master).n_frames == 12  # 6 * 2 holds


def test_pixel_mask_not_integer(master):
    set_field(master, "pixel_mask", np.zeros((8, 8), np.float32))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: pixel_mask has dtype float32; an integer bit mask is expected"
    )


def test_pixel_mask_shape(master):
    set_field(master, "pixel_mask", np.zeros((8, 7), np.uint32))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == f"{master}: pixel_mask shape (8, 7) differs from the frames' (8, 8)"


# -- shard links ----------------------------------------------------------------------


def test_two_links_to_one_shard(master):
    """Defect 3 of issue 39: data_000002 linking to shard 1 returned frames 0-4 twice."""
    relink(master, "data_000002", h5py.ExternalLink(shard(master, 1).name, "/entry/data/data"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: /entry/data/data_000002 and /entry/data/data_000001 both link to "
        f"/entry/data/data in {shard(master, 1)}; each data_NNNNNN must name its own frames"
    )


def test_two_links_to_one_shard_spelled_apart(master):
    """``./name`` and a symbolic link to the file are the same shard as ``name``."""
    relink(
        master, "data_000002", h5py.ExternalLink("./" + shard(master, 1).name, "/entry/data/data")
    )
    error = refusal(ArinaFormatError, open_arina, master)
    assert "/entry/data/data_000002 and /entry/data/data_000001 both link to" in str(error)
    os.symlink(shard(master, 1), master.parent / "alias.h5")
    relink(master, "data_000002", h5py.ExternalLink("alias.h5", "/entry/data/data"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert "/entry/data/data_000002 and /entry/data/data_000001 both link to" in str(error)


def test_two_links_to_one_dataset_through_a_hard_link(master):
    """A second name for the same file (a hard link) reaches the same HDF5 object."""
    os.link(shard(master, 1), master.parent / "hard.h5")
    relink(master, "data_000002", h5py.ExternalLink("hard.h5", "/entry/data/data"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: /entry/data/data_000002 and /entry/data/data_000001 reach the same dataset "
        f"(/entry/data/data in {master.parent / 'hard.h5'}); each data_NNNNNN must name its "
        "own frames"
    )


def test_image_numbers_must_match_the_links_place(master):
    """Shards 1 and 2 swapped in the links: their frame numbers give it away."""
    with h5py.File(master, "r+") as f:
        group = f["/entry/data"]
        del group["data_000001"], group["data_000002"]
        group["data_000001"] = h5py.ExternalLink(shard(master, 2).name, "/entry/data/data")
        group["data_000002"] = h5py.ExternalLink(shard(master, 1).name, "/entry/data/data")
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{shard(master, 2)}: holds frames 6-10 (image_nr_low/image_nr_high, 5 frames stored) "
        f"but /entry/data/data_000001 in {master} places it at frames 1-5; "
        "those are the frames of /entry/data/data_000002 (link data_000001)"
    )


def test_image_numbers_naming_the_other_link(master):
    with h5py.File(shard(master, 2), "r+") as f:
        f["/entry/data/data"].attrs["image_nr_low"] = np.uint64(1)
        f["/entry/data/data"].attrs["image_nr_high"] = np.uint64(5)
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{shard(master, 2)}: holds frames 1-5 (image_nr_low/image_nr_high, 5 frames stored) "
        f"but /entry/data/data_000002 in {master} places it at frames 6-10; those are the "
        "frames of /entry/data/data_000001 (link data_000002)"
    )


def test_image_numbers_not_integers(master):
    with h5py.File(shard(master, 3), "r+") as f:
        f["/entry/data/data"].attrs["image_nr_low"] = "eleven"
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error).startswith(f"{shard(master, 3)}: image_nr_low/image_nr_high [")
    assert str(error).endswith(f"are not two integers ({link_of(master, 3)})")


def test_shard_one_frame_short(master):
    """Defect 9 of issue 39: a shard with one frame less names the file and the link."""
    frames = FRAMES[5:9]
    path = replace_shard(master, 2, frames, chunks=(1, 8, 8), **hdf5plugin.Bitshuffle(cname="lz4"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: frame count mismatch: shards hold 11 frames, ntrigger * nimages = 12; "
        f"/entry/data/data_000002 ({path}) holds 4, the first 5"
    )
    with h5py.File(path, "r+") as f:  # frame numbers claiming 5 frames, 4 stored
        f["/entry/data/data"].attrs["image_nr_low"] = np.uint64(6)
        f["/entry/data/data"].attrs["image_nr_high"] = np.uint64(10)
    set_field(master, "ntrigger", np.uint64(11))  # even where the counts add up
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: holds frames 6-10 (image_nr_low/image_nr_high, 4 frames stored) but "
        f"/entry/data/data_000002 in {master} places it at frames 6-9 (link data_000002)"
    )


def test_count_mismatch_in_the_last_shard(master):
    path = replace_shard(
        master, 3, FRAMES[10:13].repeat(2, axis=0)[:3], chunks=(1, 8, 8),
        **hdf5plugin.Bitshuffle(cname="lz4"),
    )  # fmt: skip
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{master}: frame count mismatch: shards hold 13 frames, ntrigger * nimages = 12"
    )
    assert path.exists()


def test_link_to_a_missing_dataset(master):
    """Defect 9 of issue 39: the error names the shard file and the master's link."""
    relink(master, "data_000002", h5py.ExternalLink(shard(master, 2).name, "/entry/data/nothing"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{shard(master, 2)}: no dataset /entry/data/nothing ({link_of(master, 2)})"
    )


def test_link_escaping_the_folder(master, tmp_path):
    """Defect 9 of issue 39: a link to a file outside the folder (here one that is not
    HDF5, as /etc/passwd) names that file and the master's link."""
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n")
    relink(master, "data_000002", h5py.ExternalLink("../passwd", "/entry/data/data"))
    error = refusal(ArinaFormatError, open_arina, master)
    target = master.parent / "../passwd"
    assert str(error).startswith(f"{target}: cannot open the data shard ({link_of(master, 2)}): ")
    if Path("/etc/passwd").is_file():
        relink(master, "data_000002", h5py.ExternalLink("/etc/passwd", "/entry/data/data"))
        error = refusal(ArinaFormatError, open_arina, master)
        assert str(error).startswith(
            f"/etc/passwd: cannot open the data shard ({link_of(master, 2)}): "
        )


def test_missing_shard_names_the_link(master):
    shard(master, 3).unlink()
    error = refusal(SourceNotFoundError, open_arina, master)
    assert str(error) == f"{shard(master, 3)}: data shard is missing ({link_of(master, 3)})"


# -- a shard's dataset ----------------------------------------------------------------


def test_shard_not_three_dimensional(master):
    path = replace_shard(master, 1, FRAMES[:5].reshape(5, 64))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: data has shape (5, 64), expected (frames, rows, cols) ({link_of(master, 1)})"
    )


def test_shard_unsupported_dtype(master):
    path = replace_shard(
        master, 1, FRAMES[:5].astype(np.int16), chunks=(1, 8, 8),
        **hdf5plugin.Bitshuffle(cname="lz4"),
    )  # fmt: skip
    error = refusal(UnsupportedDtypeError, open_arina, master)
    assert str(error) == (
        f"{path}: data type int16 is not supported (uint8, uint16, uint32) ({link_of(master, 1)})"
    )


def test_chunks_not_one_frame_each(master):
    path = replace_shard(
        master, 1, FRAMES[:5], chunks=(2, 8, 8), **hdf5plugin.Bitshuffle(cname="lz4")
    )
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (f"{path}: chunks (2, 8, 8) are not one frame each ({link_of(master, 1)})")


def test_contiguous_storage(master):
    path = replace_shard(master, 1, FRAMES[:5])
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == f"{path}: chunks None are not one frame each ({link_of(master, 1)})"


@pytest.mark.parametrize(
    ("create", "ids"),
    [
        ({"compression": "gzip"}, "[1]"),
        ({}, "[]"),
        ({"shuffle": True, **hdf5plugin.Bitshuffle(cname="lz4")}, "[2, 32008]"),
    ],
)
def test_filter_not_bitshuffle_alone(master, create, ids):
    path = replace_shard(master, 1, FRAMES[:5], chunks=(1, 8, 8), **create)
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: filters {ids} are not bitshuffle (32008) alone ({link_of(master, 1)})"
    )


@pytest.mark.parametrize("options", [None, (0,)])
def test_bitshuffle_without_lz4(master, options):
    create = {"compression": 32008}
    if options is not None:
        create["compression_opts"] = options
    path = replace_shard(master, 1, FRAMES[:5], chunks=(1, 8, 8), **create)
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: bitshuffle without LZ4 compression is not supported ({link_of(master, 1)})"
    )


@pytest.mark.parametrize(("cname", "code"), [("none", 0), ("zstd", 3)])
def test_bitshuffle_other_compression(master, cname, code):
    path = replace_shard(
        master, 1, FRAMES[:5], chunks=(1, 8, 8), **hdf5plugin.Bitshuffle(cname=cname)
    )
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: bitshuffle compression {code} is not LZ4 ({link_of(master, 1)})"
    )


def test_frames_differ_between_shards(master):
    bigger = np.zeros((5, 8, 9), np.uint16)
    path = replace_shard(master, 2, bigger, chunks=(1, 8, 9), **hdf5plugin.Bitshuffle(cname="lz4"))
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: frames (8, 9) uint16 differ from the first shard's (8, 8) uint16 "
        f"({link_of(master, 2)})"
    )
    path = replace_shard(
        master, 2, FRAMES[5:10].astype(np.uint32), chunks=(1, 8, 8),
        **hdf5plugin.Bitshuffle(cname="lz4"),
    )  # fmt: skip
    error = refusal(ArinaFormatError, open_arina, master)
    assert str(error) == (
        f"{path}: frames (8, 8) uint32 differ from the first shard's (8, 8) uint16 "
        f"({link_of(master, 2)})"
    )


# -- scan shape -----------------------------------------------------------------------


def set_scan_attr(master: Path, value) -> None:
    with h5py.File(master, "r+") as f:
        f["/entry/data"].attrs["scan_shape"] = value


def test_scan_shape_attribute_not_integers(master):
    set_scan_attr(master, np.array([b"three", b"four"]))
    error = refusal(ScanShapeError, open_arina, master)
    assert str(error) == (
        f"{master}: scan_shape attribute array([b'three', b'four'], dtype='|S5') is not two "
        "integers"
    )


def test_scan_shape_argument_not_integers(master):
    error = refusal(ScanShapeError, open_arina, master, scan_shape=("a", "b"))
    assert str(error) == f"{master}: scan_shape argument ('a', 'b') is not two integers"
    error = refusal(ScanShapeError, open_arina, master, scan_shape=[[1, 2], 3])
    assert "scan_shape argument [[1, 2], 3] is not two integers" in str(error)


@pytest.mark.parametrize(
    ("value", "shown"), [((12,), "(12,)"), ((2, 3, 2), "(2, 3, 2)"), ((0, 12), "(0, 12)"),
                         ((-3, -4), "(-3, -4)")],
)  # fmt: skip
def test_scan_shape_not_two_positive_integers(master, value, shown):
    error = refusal(ScanShapeError, open_arina, master, scan_shape=value)
    assert str(error) == f"{master}: scan_shape argument {shown} is not two positive integers"


def test_scan_shape_attribute_wrong_count(master):
    set_scan_attr(master, np.array([4, 4]))
    error = refusal(ScanShapeError, open_arina, master)
    assert str(error) == (
        f"{master}: scan_shape (4, 4) (attribute) holds 16 frames, the acquisition has 12"
    )
    assert open_arina(master, scan_shape=(2, 6)).scan_shape == (2, 6)  # the argument wins


def test_scan_shape_not_square_without_attribute(master):
    with h5py.File(master, "r+") as f:
        del f["/entry/data"].attrs["scan_shape"]
    error = refusal(ScanShapeError, open_arina, master)
    assert str(error) == (
        f"{master}: 12 frames are not a square scan and the file has no scan_shape "
        "attribute; pass scan_shape=(rows, cols)"
    )
    assert resolve_scan_shape(16, None, None, "x") == ((4, 4), "square")
    assert resolve_scan_shape(1, None, None, "x") == ((1, 1), "square")


# -- reading --------------------------------------------------------------------------


def test_shard_cut_short_during_preadv(master):
    """The index says a chunk is at bytes the file no longer has (cut after opening)."""
    source = open_arina(master)
    path = shard(master, 2)
    first = int(source.index.frame_offset[5])
    with open(path, "r+b") as f:
        f.truncate(first + 3)
    error = refusal(ArinaFormatError, read_compressed, source, 5, 7)
    assert str(error) == f"{path}: file is truncated: a chunk at byte {first + 3} is missing"
    error = refusal(ArinaFormatError, read_compressed, source, threads=2)  # one run a shard
    assert str(error) == f"{path}: file is truncated: a chunk at byte {first + 3} is missing"
    error = refusal(ArinaFormatError, load_arina, master)  # reopened: named, not wrong data
    assert error.path == str(path)


def test_shard_removed_after_opening(master):
    source = open_arina(master)
    shard(master, 3).unlink()
    error = refusal(SourceNotFoundError, read_compressed, source, 10, 12)
    assert str(error) == f"{shard(master, 3)}: data shard is missing"
    np.testing.assert_array_equal(
        read_compressed(source, 0, 1)[1], [0, source.index.frame_nbytes[0]]
    )


def test_read_range_and_buffer(master):
    source = open_arina(master)
    for start, stop in ((-1, 2), (3, 2), (0, 13)):
        error = refusal(IndexError, read_compressed, source, start, stop)
        assert str(error) == f"frame range [{start}, {stop}) outside [0, 12)"
    total = int(source.index.frame_nbytes[:2].sum())
    bad = [
        np.empty(total, np.uint16).view(np.uint16),
        np.empty((1, total), np.uint8),
        np.empty(total - 1, np.uint8),
        np.empty(2 * total, np.uint8)[::2],
    ]
    for out in bad:
        error = refusal(ValueError, read_compressed, source, 0, 2, out)
        assert str(error) == f"out must be a contiguous 1-D uint8 buffer of at least {total} bytes"
    exact = np.empty(total, np.uint8)
    buffer, offsets = read_compressed(source, 0, 2, exact)
    assert buffer is exact and offsets[-1] == total


def test_read_compressed_returns_the_stored_chunks(master):
    """All frames by default, an empty range as an empty buffer, integer offsets that
    slice out each chunk exactly as h5py stores it."""
    source = open_arina(master)
    buffer, offsets = read_compressed(source)
    assert offsets.dtype == np.int64 and offsets.shape == (13,)
    assert offsets[-1] == buffer.size == int(source.index.frame_nbytes.sum())
    with h5py.File(shard(master, 2), "r") as f:
        _, chunk = f["/entry/data/data"].id.read_direct_chunk((2, 0, 0))
    assert buffer[offsets[7] : offsets[8]].tobytes() == chunk  # frame 7, shard 2's third
    buffer, offsets = read_compressed(source, 3, 3)
    assert buffer.size == 0 and offsets.tolist() == [0]


def test_batch_frames_must_be_positive(master):
    source = open_arina(master)
    error = refusal(ValueError, lambda: list(iter_frame_batches(source, 0)))
    assert str(error) == "batch_frames must be >= 1, got 0"
    error = refusal(ValueError, load_arina, master, batch_frames=0)
    assert str(error) == "batch_frames must be >= 1, got 0"
    from quantem.stem4d.io.arina import _iter_compressed_batches

    batches = _iter_compressed_batches(source, 5, 0, 12, None)  # read, not decoded
    assert [(first, last) for first, last, _ in batches] == [(0, 5), (5, 10), (10, 12)]


def test_shard_gone_between_the_stat_and_the_inspection(master):
    """open_arina stats every shard first (and names a missing one with its link); a shard
    removed after that is still named, not a bare h5py error."""
    from quantem.stem4d.io.arina import ShardLink, _inspect_shard

    gone = ShardLink("data_000002", str(master.parent / "gone.h5"), "/entry/data/data")
    error = refusal(SourceNotFoundError, _inspect_shard, master, gone)
    assert str(error) == f"{gone.path}: data shard is missing ({link_of(master, 2)})"


def test_read_shard_links(master):
    from quantem.stem4d.io.arina import read_shard_links

    links = read_shard_links(master)
    assert [(link.name, Path(link.path).name, link.dataset) for link in links] == [
        (f"data_00000{i}", f"synthetic_data_00000{i}.h5", "/entry/data/data") for i in (1, 2, 3)
    ]
    missing = master.parent / "none_master.h5"
    error = refusal(SourceNotFoundError, read_shard_links, missing)
    assert str(error) == f"{missing}: master file does not exist"


def test_a_failing_piece_stops_a_threaded_load(tmp_path):
    """With more frames than one piece (FRAMES_PER_TASK) and two threads, pieces run in a
    pool: a chunk changed after indexing, in the second piece, still raises (the pool's
    error is not swallowed) naming its frame."""
    from quantem.stem4d.errors import SourceIntegrityError
    from quantem.stem4d.io.cpu_decode import FRAMES_PER_TASK

    n = 2 * FRAMES_PER_TASK + 3
    path = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(1, n), detector_shape=(4, 4), frames_per_shard=n,
        processes=1,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    source = open_arina(path, index_dir=index_dir)
    frame = FRAMES_PER_TASK + 5
    at = int(source.index.frame_offset[frame]) + int(source.index.frame_nbytes[frame]) - 1
    shard_file = Path(source.shard_paths[0])
    stat = shard_file.stat()
    with open(shard_file, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x01]))
    os.utime(shard_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    error = refusal(SourceIntegrityError, load_arina, path, index_dir=index_dir, threads=2)
    assert error.fields["frame"] == frame and error.path == str(shard_file)
