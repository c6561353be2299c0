"""The staging engines' host logic, run without a GPU against a stand-in for CuPy.

``run_staged`` (pread into pinned buffers) and ``run_mapped`` (page-locked file
mappings) decide which bytes go to which device slot, in which order, and what is
released when; none of that needs a device. The stand-in copies synchronously with
``memmove`` (so events and streams are trivially ordered) and records every
``hostRegister``/``hostUnregister``. The real CUDA behaviour is covered by
``tests/hardware/test_cuda_hdf5.py`` on the device.
"""

from __future__ import annotations

import ctypes
import os
import sys
import types

import numpy as np
import pytest

from quantem.cuda import mapped_staging, pinned, staging
from quantem.io.page_cache import PAGE_SIZE


class DeviceArray(np.ndarray):
    """A host array that answers ``.data.ptr`` like a CuPy array."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


class FakeCuda:
    def __init__(self, fail_register_at: int | None = None) -> None:
        self.registered: dict[int, int] = {}
        self.register_calls: list[tuple[int, int, int]] = []
        self.unregister_calls: list[int] = []
        self.copies = 0
        self.fail_register_at = fail_register_at

    def module(self) -> types.ModuleType:
        fake = self

        class Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                self.ptr = id(self)

            def wait_event(self, event) -> None:
                assert event.recorded, "waiting on an event that was never recorded"

            def synchronize(self) -> None:
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                pass

        class Event:
            def __init__(self, disable_timing: bool = False) -> None:
                self.recorded = False

            def record(self, stream=None) -> None:
                self.recorded = True

            def synchronize(self) -> None:
                assert self.recorded, "synchronising on an event that was never recorded"

        def memcpy_async(dst, src, nbytes, kind, stream) -> None:
            assert kind == staging.CUDA_MEMCPY_HOST_TO_DEVICE
            fake.copies += 1
            ctypes.memmove(dst, src, nbytes)

        def host_register(ptr, nbytes, flags) -> None:
            if (
                fake.fail_register_at is not None
                and len(fake.register_calls) == fake.fail_register_at
            ):
                fake.register_calls.append((ptr, nbytes, flags))
                raise RuntimeError("cudaErrorInvalidValue (stand-in)")
            assert ptr not in fake.registered
            fake.registered[ptr] = nbytes
            fake.register_calls.append((ptr, nbytes, flags))

        def host_unregister(ptr) -> None:
            assert ptr in fake.registered, "unregistering memory that is not registered"
            del fake.registered[ptr]
            fake.unregister_calls.append(ptr)

        runtime = types.SimpleNamespace(
            deviceSynchronize=lambda: None,
            memcpyAsync=memcpy_async,
            hostRegister=host_register,
            hostUnregister=host_unregister,
        )

        class Device:
            def __init__(self, id=0):
                self.id = id

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

        cuda = types.SimpleNamespace(
            runtime=runtime,
            Stream=Stream,
            Event=Event,
            Device=Device,
            alloc_pinned_memory=lambda n: bytearray(n),
        )
        module = types.ModuleType("cupy")
        module.cuda = cuda
        module.uint8 = np.uint8
        module.int32, module.int64, module.uint32 = np.int32, np.int64, np.uint32
        module.empty = lambda shape, dtype=np.uint8: np.zeros(shape, dtype=dtype).view(DeviceArray)
        module.zeros = module.empty
        module.asnumpy = np.asarray
        module.asarray = lambda a: np.array(a).view(DeviceArray)
        return module


@pytest.fixture
def fake_cuda(monkeypatch):
    def install(**kwargs) -> FakeCuda:
        fake = FakeCuda(**kwargs)
        monkeypatch.setitem(sys.modules, "cupy", fake.module())
        monkeypatch.setattr(pinned, "_cache", {})  # never keep stand-in buffers
        return fake

    return install


def _files(tmp_path, sizes):
    rng = np.random.default_rng(3)
    paths, blobs = [], []
    for k, size in enumerate(sizes):
        blob = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        path = tmp_path / f"f{k}.bin"
        path.write_bytes(blob)
        paths.append(str(path))
        blobs.append(blob)
    return paths, blobs


def test_run_staged_moves_each_batch_to_a_slot_in_order(tmp_path, fake_cuda):
    fake = fake_cuda()
    paths, blobs = _files(tmp_path, [50_000, 30_000])
    # 7 batches (more than the pinned and device slots), reads from both files
    wanted = [(0, 0, 4000), (1, 100, 9000), (0, 20_000, 1), (1, 29_000, 1000),
              (0, 30_000, 20_000), (1, 0, 30_000), (0, 7, 13)]  # fmt: skip
    batches = [
        staging.Batch(staging.split_reads(f, off, 0, n, piece_bytes=4096), n)
        for f, off, n in wanted
    ]
    seen, hooks = {}, []

    def launch(i, device_bytes, stream) -> None:
        seen[i] = bytes(np.asarray(device_bytes))

    def on_read(i, slot) -> None:
        hooks.append(i)

    with staging.OpenFiles(paths, lambda p, d: OSError(p, d)) as files:
        stats = staging.run_staged(files, batches, launch, on_read=on_read, threads=3)
    assert sorted(seen) == list(range(len(wanted))) and sorted(hooks) == sorted(seen)
    for i, (f, off, n) in enumerate(wanted):
        assert seen[i] == blobs[f][off : off + n], i
    assert stats.batches == len(wanted) and stats.copied_bytes == sum(n for *_, n in wanted)
    assert fake.copies == len(wanted)


def test_run_mapped_copies_each_range_and_releases_every_registration(tmp_path, fake_cuda):
    fake = fake_cuda()
    paths, blobs = _files(tmp_path, [9 * PAGE_SIZE + 5, 3 * PAGE_SIZE])
    ranges = [
        mapped_staging.covering_range(0, 10, 2 * PAGE_SIZE + 1),
        mapped_staging.covering_range(0, 2 * PAGE_SIZE + 7, 9 * PAGE_SIZE + 5),
        mapped_staging.covering_range(1, PAGE_SIZE + 3, 3 * PAGE_SIZE),
        mapped_staging.covering_range(1, 0, 100),
        mapped_staging.covering_range(0, 5 * PAGE_SIZE, 5 * PAGE_SIZE + 1),
        mapped_staging.covering_range(1, 2 * PAGE_SIZE, 2 * PAGE_SIZE + 2),
    ]
    seen = {}

    def launch(i, device_bytes, stream) -> None:
        seen[i] = bytes(np.asarray(device_bytes))

    fds = [os.open(p, os.O_RDONLY) for p in paths]
    try:
        stats = mapped_staging.run_mapped(fds, ranges, launch, threads=2)
    finally:
        for fd in fds:
            os.close(fd)
    for i, r in enumerate(ranges):
        assert seen[i] == blobs[r.file][r.offset : r.offset + r.length], i
    assert len(fake.register_calls) == len(ranges) == len(fake.unregister_calls)
    flags = mapped_staging.HOST_REGISTER_READ_ONLY | mapped_staging.HOST_REGISTER_PORTABLE
    assert {f for _, _, f in fake.register_calls} == {flags}
    assert all(n % PAGE_SIZE == 0 for _, n, _ in fake.register_calls)
    assert not fake.registered and mapped_staging.live_registrations() == 0
    assert stats.copied_bytes == sum(r.length for r in ranges)


@pytest.mark.parametrize("fail_at", [0, 3])
def test_run_mapped_refused_registration_releases_the_others(tmp_path, fake_cuda, fail_at):
    fake = fake_cuda(fail_register_at=fail_at)
    paths, _ = _files(tmp_path, [8 * PAGE_SIZE])
    ranges = [
        mapped_staging.covering_range(0, k * PAGE_SIZE, (k + 1) * PAGE_SIZE) for k in range(8)
    ]
    launched = []
    fd = os.open(paths[0], os.O_RDONLY)
    try:
        with pytest.raises(mapped_staging.MappedStagingUnavailable, match="stand-in"):
            mapped_staging.run_mapped([fd], ranges, lambda i, d, s: launched.append(i), threads=1)
    finally:
        os.close(fd)
    assert launched == list(range(fail_at))  # nothing launched for the refused range
    assert not fake.registered and mapped_staging.live_registrations() == 0


def test_run_mapped_launch_failure_releases_everything(tmp_path, fake_cuda):
    fake = fake_cuda()
    paths, _ = _files(tmp_path, [6 * PAGE_SIZE])
    ranges = [
        mapped_staging.covering_range(0, k * PAGE_SIZE, (k + 1) * PAGE_SIZE) for k in range(6)
    ]

    def launch(i, device_bytes, stream) -> None:
        if i == 2:
            raise ValueError("kernel launch failed (stand-in)")

    fd = os.open(paths[0], os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="stand-in"):
            mapped_staging.run_mapped([fd], ranges, launch, threads=2)
    finally:
        os.close(fd)
    assert not fake.registered and mapped_staging.live_registrations() == 0
    assert len(fake.unregister_calls) == len(fake.register_calls) >= 3


class HostChunkDecoder:
    """Stands in for the GPU ``ChunkDecoder``: the CPU decoder on the same byte ranges."""

    def __init__(self, elem_size, frame_elems, block_bytes, *, stage_compressed=False) -> None:
        self.elem_size = elem_size
        self.frame_bytes = frame_elems * elem_size
        self.blocks_per_frame = 1

    def decode(self, buffer, offsets, n_frames, out, errors, scratch, stream=None, ends=None):
        from quantem.io.cpu_decode import decode_chunk

        buffer = np.asarray(buffer)
        offsets = np.asarray(offsets)
        starts = offsets[:n_frames]
        stops = offsets[1 : n_frames + 1] if ends is None else np.asarray(ends)[:n_frames]
        flat = np.asarray(out).reshape(-1).view(np.uint8)
        work = np.empty(self.frame_bytes, dtype=np.uint8)
        for i in range(n_frames):
            start, stop = int(starts[i]), int(stops[i])
            assert 0 <= start <= stop <= buffer.size, "a chunk outside the staged bytes"
            code = decode_chunk(
                buffer, start, stop, flat, i * self.frame_bytes, self.frame_bytes,
                self.elem_size, work,
            )  # fmt: skip
            errors[i] = int(code != 0)


@pytest.mark.parametrize("staging_name", ["pread", "mapped"])
@pytest.mark.parametrize("batch_bytes", [1, 3000, 1 << 20])
def test_decode_source_to_device_moves_every_chunk(tmp_path, fake_cuda, monkeypatch,
                                                   staging_name, batch_bytes):  # fmt: skip
    """The whole HDF5 pipeline (planning, offsets, both stagings) with host stand-ins."""
    from quantem.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.io.arina import load_arina, open_arina
    from quantem.io.synthetic import write_synthetic_arina

    fake = fake_cuda()
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(5, 7), detector_shape=(24, 20),
        frames_per_shard=8, processes=1, dose=3000.0,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    expected = load_arina(master, index_dir=index_dir, apply_mask=False).data.reshape(35, 24, 20)
    source = open_arina(master, index_dir=index_dir)
    out, stats = hdf5_pipeline.decode_source_to_device(
        source, staging=staging_name, batch_bytes=batch_bytes, threads=2
    )
    assert stats.staging == staging_name and stats.fallback is None
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert stats.compressed_bytes == int(np.asarray(source.index.frame_nbytes).sum())
    if staging_name == "mapped":
        assert len(fake.register_calls) == stats.batches == len(fake.unregister_calls)
        assert stats.batches >= 5  # at least one range per shard
    else:
        assert not fake.register_calls
    # the consume path (non-default options) sees every frame once, in order
    seen = []
    hdf5_pipeline.decode_source_to_device(
        source, staging=staging_name, batch_bytes=batch_bytes, threads=2,
        consume=lambda a, b, frames: seen.append((a, np.array(frames))),
    )  # fmt: skip
    assert [a for a, _ in seen] == sorted(a for a, _ in seen)
    np.testing.assert_array_equal(np.concatenate([f for _, f in seen]), expected)


def test_mapped_staging_falls_back_to_pread_when_registration_is_refused(
    tmp_path, fake_cuda, monkeypatch
):
    from quantem.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.io.arina import load_arina, open_arina
    from quantem.io.synthetic import write_synthetic_arina

    fake = fake_cuda(fail_register_at=2)
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(4, 6), detector_shape=(16, 16),
        frames_per_shard=5, processes=1,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    expected = load_arina(master, index_dir=index_dir, apply_mask=False).data.reshape(24, 16, 16)
    out, stats = hdf5_pipeline.decode_source_to_device(
        open_arina(master, index_dir=index_dir), staging="mapped", threads=2
    )
    assert stats.staging == "pread" and "stand-in" in stats.fallback
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert not fake.registered and mapped_staging.live_registrations() == 0


def test_lazy_pinned_slots_allocate_on_first_use_and_return_to_the_cache(fake_cuda):
    fake_cuda()
    with pinned.LazySlots(3, 10, device=0) as slots:
        first = slots.get(1)
        assert slots.get(1) is first
        assert pinned.cached_bytes() == 0
    assert pinned.cached_bytes() == pinned.SIZE_STEP  # only the slot that was used
    with pinned.LazySlots(2, 10) as slots:
        assert slots.get(0) is first  # reused, not allocated again
    assert pinned.cached_bytes() == pinned.SIZE_STEP
