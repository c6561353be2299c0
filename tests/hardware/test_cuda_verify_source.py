"""``verify_source=True`` on ``backend="cuda"``: the real XXH3 kernel on staged chunks."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.cuda import xxh3  # noqa: E402
from quantem.stem4d.errors import SourceIntegrityError  # noqa: E402
from quantem.stem4d.io.arina import open_arina  # noqa: E402
from quantem.stem4d.io.synthetic import write_synthetic_arina  # noqa: E402


def _flip(source, frame: int, at: int) -> None:
    """Flip one bit of frame ``frame``'s raw chunk in its shard (the index already built)."""
    path = source.shard_paths[int(source.index.frame_shard[frame])]
    where = int(source.index.frame_offset[frame]) + at % int(source.index.frame_nbytes[frame])
    with open(path, "r+b") as f:
        f.seek(where)
        byte = f.read(1)[0]
        f.seek(where)
        f.write(bytes([byte ^ 0x01]))


@pytest.fixture
def acquisition(tmp_path):
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(6, 9), detector_shape=(64, 48), dtype="uint16",
        frames_per_shard=10, processes=1, dose=5000.0,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    cpu = io.load(master, index_dir=index_dir, apply_mask=False)
    return master, index_dir, np.asarray(cpu.data)


@pytest.mark.parametrize("staging", ["pread", "mapped"])
@pytest.mark.parametrize("batch_bytes", [4096, 50_000, 128 << 20])
def test_flipped_bit_raises_with_shard_and_frame(acquisition, staging, batch_bytes):
    master, index_dir, cpu = acquisition
    kw = dict(backend="cuda", index_dir=index_dir, apply_mask=False, staging=staging,
              batch_bytes=batch_bytes)  # fmt: skip
    source = open_arina(master, index_dir=index_dir)
    nbytes = np.asarray(source.index.frame_nbytes)
    assert (nbytes > xxh3.MIDSIZE_MAX).all()  # every chunk hashed by the kernel
    offsets = np.asarray(source.index.frame_offset)
    assert (offsets % 8).any()  # unaligned chunk starts are exercised
    ok = io.load(master, **kw, verify_source=True)
    np.testing.assert_array_equal(cupy.asnumpy(ok.data), cpu)
    assert ok.metadata["load_stats"]["staging"] == staging
    del ok
    _flip(source, 37, at=777)  # shard 3, its frame 7
    _flip(source, 45, at=5)  # a later change: not the one named
    with pytest.raises(SourceIntegrityError) as info:
        io.load(master, **kw, verify_source=True)
    assert info.value.fields == {"frame": 37, "shard_frame": 7}
    assert str(source.shard_paths[3]) in str(info.value)
    # the finishing path (per-batch consume) checks as well
    with pytest.raises(SourceIntegrityError) as info:
        io.load(master, **kw, verify_source=True, dtype="u32")
    assert info.value.fields["frame"] == 37


def test_every_single_bit_flip_of_a_chunk_sample_is_caught(acquisition):
    """A sample of positions over one chunk (header, middle, last byte)."""
    master, index_dir, _cpu = acquisition
    source = open_arina(master, index_dir=index_dir)
    frame = 12
    n = int(source.index.frame_nbytes[frame])
    for at in sorted({0, 11, 12, 100, n // 2, n - 64, n - 1}):
        _flip(source, frame, at)
        with pytest.raises(SourceIntegrityError) as info:
            io.load(master, backend="cuda", index_dir=index_dir, verify_source=True)
        assert info.value.fields["frame"] == frame, at
        _flip(source, frame, at)  # restore
    io.load(master, backend="cuda", index_dir=index_dir, verify_source=True)
