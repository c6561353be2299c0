"""GPU ARINA HDF5 loading against the CPU backend: parity, options, corruption, memory."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.errors import ArinaFormatError, ChunkDecodeError  # noqa: E402
from quantem.stem4d.io.synthetic import make_frames, write_synthetic_arina  # noqa: E402


def synthetic(tmp_path, name="s", scan=(6, 7), det=(40, 36), dtype="uint16", **kw):
    kw.setdefault("frames_per_shard", 10)
    kw.setdefault("processes", 1)
    kw.setdefault("dose", 3000.0)
    return write_synthetic_arina(
        tmp_path, name=name, scan_shape=scan, detector_shape=det, dtype=dtype, **kw
    )


@pytest.mark.parametrize(
    "scan,det,dtype",
    [
        ((6, 7), (40, 36), "uint16"),
        ((5, 5), (64, 64), "uint8"),
        ((4, 6), (24, 20), "uint32"),
        ((3, 5), (7, 13), "uint16"),  # partial bitshuffle block and raw tail
        ((3, 3), (96, 100), "uint16"),
    ],
)
@pytest.mark.parametrize("staging", ["pread", "mapped"])
def test_load_matches_cpu_and_generator(tmp_path, scan, det, dtype, staging):
    master = synthetic(tmp_path, scan=scan, det=det, dtype=dtype)
    cpu = io.load(master)
    with io.load(master, backend="cuda", staging=staging) as gpu:
        assert gpu.metadata["load_stats"]["staging"] == staging
        assert gpu.backend == "cuda" and isinstance(gpu.data, cupy.ndarray)
        assert gpu.data.shape == cpu.data.shape and gpu.data.dtype == cpu.data.dtype
        np.testing.assert_array_equal(gpu.data.get(), cpu.data)
        np.testing.assert_array_equal(gpu.validity, cpu.validity)
    expected = make_frames(
        0, scan[0] * scan[1], scan_shape=scan, detector_shape=det, dtype=dtype, dose=3000.0
    )
    with io.load(master, backend="cuda", staging=staging, apply_mask=False) as raw:
        np.testing.assert_array_equal(raw.data.get().reshape(expected.shape), expected)


@pytest.mark.parametrize(
    "opts",
    [
        {"apply_mask": True},
        {"dtype": "u8"},
        {"dtype": "u32"},
        {"det_bin": 2},
        {"det_bin": 3},
        {"apply_mask": True, "dtype": "u8", "det_bin": 4},
    ],
)
@pytest.mark.parametrize("staging", ["pread", "mapped"])
def test_options_match_cpu(tmp_path, opts, staging):
    master = synthetic(tmp_path, scan=(5, 6), det=(38, 41), dose=20000.0)
    cpu = io.load(master, **opts)
    many_batches = {"batch_bytes": 4096, "staging": staging}
    with io.load(master, backend="cuda", **many_batches, **opts) as gpu:
        np.testing.assert_array_equal(gpu.data.get(), cpu.data)
        assert gpu.data.dtype == cpu.data.dtype
        np.testing.assert_array_equal(gpu.validity, cpu.validity)
        if "clipped_pixels" in cpu.metadata:
            assert gpu.metadata["clipped_pixels"] == cpu.metadata["clipped_pixels"]


@pytest.mark.parametrize("staging", ["pread", "mapped"])
def test_small_batches_equal_one_batch(tmp_path, staging):
    master = synthetic(tmp_path, scan=(8, 8), det=(32, 32))
    one = {"staging": staging}
    each = {"staging": staging, "batch_bytes": 1}
    with io.load(master, backend="cuda", **one) as a, io.load(master, backend="cuda", **each) as b:
        assert b.metadata["load_stats"]["batches"] == 64
        np.testing.assert_array_equal(a.data.get(), b.data.get())


def test_default_staging_and_mapped_leaves_nothing_registered(tmp_path):
    from quantem.stem4d.cuda.hdf5_pipeline import DEFAULT_STAGING
    from quantem.stem4d.cuda.mapped_staging import live_registrations

    master = synthetic(tmp_path, scan=(8, 8), det=(32, 32))
    cpu = io.load(master)
    assert DEFAULT_STAGING == "registered"
    with io.load(master, backend="cuda") as default:
        # Registered from the first load (just written, so racy: registered for this
        # load only, tests/hardware/test_registered_staging_gpu.py).
        stats = default.metadata["load_stats"]
        assert stats["staging"] == "registered", stats
        np.testing.assert_array_equal(default.data.get(), cpu.data)
    with io.load(master, backend="cuda", staging="mapped", batch_bytes=4096) as mapped:
        assert mapped.metadata["load_stats"]["staging"] == "mapped"
        assert mapped.metadata["load_stats"]["batches"] > 1
        np.testing.assert_array_equal(mapped.data.get(), cpu.data)
    assert live_registrations() == 0
    with pytest.raises(ValueError, match="staging must be one of"):
        io.load(master, backend="cuda", staging="auto")


def chunk_location(master, frame):
    from quantem.stem4d.io.arina import open_arina

    source = open_arina(master)
    index = source.index
    shard = source.shard_paths[int(index.frame_shard[frame])]
    return shard, int(index.frame_offset[frame]), int(index.frame_nbytes[frame])


@pytest.mark.parametrize("staging", ["pread", "mapped"])
@pytest.mark.parametrize("where", ["header", "block_length", "lz4_body"])
def test_corrupt_chunk_raises_naming_shard_and_frame(tmp_path, where, staging):
    master = synthetic(tmp_path, scan=(5, 6), det=(40, 36))
    frame = 13
    shard, offset, _nbytes = chunk_location(master, frame)
    with open(shard, "r+b") as f:
        if where == "header":
            f.seek(offset + 7)
            f.write(b"\xff")
        elif where == "block_length":
            f.seek(offset + 12)
            f.write(b"\x7f\xff\xff\xff")
        else:
            f.seek(offset + 16)
            f.write(b"\xff\xff\xff\xff")  # token + extended lengths far past the block
    with pytest.raises(ChunkDecodeError) as info:
        io.load(master, backend="cuda", staging=staging)
    message = str(info.value)
    assert shard.split("/")[-1] in message and f"frame {frame}" in message


@pytest.mark.parametrize("staging", ["pread", "mapped"])
def test_truncated_shard_raises(tmp_path, staging):
    from quantem.stem4d.cuda.mapped_staging import live_registrations

    master = synthetic(tmp_path, scan=(5, 6), det=(40, 36))
    shard, offset, nbytes = chunk_location(master, 29)
    with open(shard, "r+b") as f:
        f.truncate(offset + nbytes // 2)
    with pytest.raises((ChunkDecodeError, ArinaFormatError)):
        io.load(master, backend="cuda", fresh_index=True, staging=staging)
    assert live_registrations() == 0


@pytest.mark.parametrize("staging", ["pread", "mapped"])
def test_stale_index_past_the_end_of_a_shard_raises_naming_it(tmp_path, staging):
    """The index says a chunk lies beyond the file's end (file truncated after indexing)."""
    master = synthetic(tmp_path, scan=(5, 6), det=(40, 36))
    io.load(master).close()  # index built and stored
    shard, offset, nbytes = chunk_location(master, 29)
    stat = os.stat(shard)
    with open(shard, "r+b") as f:
        f.truncate(offset + nbytes // 2)
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises((ArinaFormatError, ChunkDecodeError)) as info:
        io.load(master, backend="cuda", staging=staging)
    assert shard.split("/")[-1] in str(info.value)


def test_memory_returns_after_close_over_20_cycles(tmp_path):
    from quantem.stem4d.cuda import pinned
    from quantem.stem4d.cuda.mapped_staging import live_registrations

    master = synthetic(tmp_path, scan=(10, 10), det=(64, 64))
    # Earlier tests' garbage (pytest keeps their exceptions) must not blur the baseline.
    gc.collect()
    pool = cupy.get_default_memory_pool()
    io.load(master, backend="cuda").close()
    baseline_used = pool.used_bytes()
    baseline_total = pool.total_bytes()
    pinned_cached = pinned.cached_bytes()
    for cycle in range(20):
        staging = ("pread", "mapped")[cycle % 2]
        acq = io.load(master, backend="cuda", det_bin=2, staging=staging)
        assert pool.used_bytes() > baseline_used
        acq.close()
        assert pool.used_bytes() == baseline_used
        assert live_registrations() == 0  # every page-locked range was released
    assert pool.total_bytes() <= baseline_total + (64 << 20)
    assert pinned.cached_bytes() == pinned_cached  # staging buffers are reused, not added


def test_detector_products_match_cpu(tmp_path):
    from quantem.stem4d import detector

    master = synthetic(tmp_path, scan=(7, 8), det=(48, 48), dose=20000.0)
    cpu = detector.prepare(io.load(master))
    with io.load(master, backend="cuda") as acq:
        gpu = detector.prepare(acq)
        mask = np.zeros((48, 48), bool)
        mask[12:36, 10:30] = True
        np.testing.assert_array_equal(gpu.masked_sum_exact(mask), cpu.masked_sum_exact(mask))
        np.testing.assert_array_equal(gpu.mean_dp_exact(), cpu.mean_dp_exact())
        com_gpu, com_cpu = gpu.center_of_mass(), cpu.center_of_mass()
        np.testing.assert_array_equal(cupy.asnumpy(com_gpu.row), com_cpu.row)
        np.testing.assert_array_equal(cupy.asnumpy(com_gpu.col), com_cpu.col)
