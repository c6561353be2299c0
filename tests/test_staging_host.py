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
import time
import types

import numpy as np
import pytest

from quantem.stem4d.cuda import mapped_staging, pinned, registered_files, staging
from quantem.stem4d.io.page_cache import PAGE_SIZE


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
        # A registration cache of this test's own, whose clock runs ahead so that the
        # files just written are not racy (kept across loads, as older files would be),
        # registering from the first load (the default policy has a test of its own).
        cache = registered_files.RegisteredFiles(
            1 << 40, clock=lambda: time.time_ns() + 10 * registered_files.RACY_NS,
            register_from=1,
        )  # fmt: skip
        monkeypatch.setattr(registered_files, "_instance", cache)
        fake.cache = cache
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


@pytest.mark.parametrize("fails", [False, True])
def test_run_registered_checks_after_the_copies_and_drains_first_on_failure(
    tmp_path, fake_cuda, monkeypatch, fails
):
    """``after_copies`` runs once, after every copy was enqueued and the copy stream
    synchronised; what it raises comes out after the launched work was drained."""
    fake = fake_cuda()
    blob = np.arange(4096, dtype=np.uint8)
    events = []
    real_drain = staging.DeviceLanes.drain

    def drain(self) -> None:
        events.append("drain")
        real_drain(self)

    monkeypatch.setattr(staging.DeviceLanes, "drain", drain)
    batches = [[(0, 100 * i, 0, 100)] for i in range(5)]

    def launch(i, device_bytes, stream) -> None:
        events.append(f"launch {i}")

    def after() -> None:
        events.append(f"after {fake.copies} copies")
        if fails:
            raise RuntimeError("a file changed")

    run = lambda: mapped_staging.run_registered(  # noqa: E731
        batches, 100, lambda f, off: blob.ctypes.data + off, launch, after_copies=after
    )
    if fails:
        with pytest.raises(RuntimeError, match="a file changed"):
            run()
    else:
        run()
    assert events == [*(f"launch {i}" for i in range(5)), "after 5 copies", "drain"]


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
        from quantem.stem4d.io.cpu_decode import decode_chunk

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


@pytest.mark.parametrize("staging_name", ["pread", "mapped", "registered"])
@pytest.mark.parametrize("batch_bytes", [1, 3000, 1 << 20])
def test_decode_source_to_device_moves_every_chunk(tmp_path, fake_cuda, monkeypatch,
                                                   staging_name, batch_bytes):  # fmt: skip
    """The whole HDF5 pipeline (planning, offsets, both stagings) with host stand-ins."""
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.stem4d.io.arina import load_arina, open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

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
    elif staging_name == "registered":
        # one registration per shard, kept after the load
        assert len(fake.register_calls) == len(fake.registered) == 5
        assert not fake.unregister_calls and stats.registered_bytes > 0
        assert sorted(fake.cache.paths()) == sorted(source.shard_paths)
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
    if staging_name == "registered":  # the second load registered nothing
        assert len(fake.register_calls) == 5 and not fake.unregister_calls
        assert fake.cache.release() > 0 and not fake.registered


def test_mapped_staging_falls_back_to_pread_when_registration_is_refused(
    tmp_path, fake_cuda, monkeypatch
):
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.stem4d.io.arina import load_arina, open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

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


def host_verify_on_device(data, starts, extents, lengths, expected, flags, stream=None):
    """Stands in for ``xxh3.verify_on_device``: xxhash of the same device byte ranges,
    with the kernel's flags (long ranges only; short ones left to the host)."""
    import xxhash

    from quantem.stem4d.cuda import xxh3

    data = np.asarray(data)
    for k, (start, size) in enumerate(zip(np.asarray(starts), np.asarray(extents))):
        start, size = int(start), int(size)
        assert start >= 0 and start + size <= data.size, "a chunk outside the staged bytes"
        if size <= xxh3.MIDSIZE_MAX:
            flags[k] = xxh3.FLAG_HOST
            continue
        got = xxhash.xxh3_64_intdigest(data[start : start + size].tobytes())
        flags[k] = xxh3.FLAG_MISMATCH if got != int(np.asarray(expected)[k]) else xxh3.FLAG_OK


def _flip_chunk_byte(source, frame: int, at: int = 0) -> None:
    """Flip one bit of frame ``frame``'s raw chunk in its shard, after indexing."""
    path = source.shard_paths[int(source.index.frame_shard[frame])]
    nbytes = int(source.index.frame_nbytes[frame])
    where = int(source.index.frame_offset[frame]) + (at % nbytes)
    with open(path, "r+b") as f:
        f.seek(where)
        byte = f.read(1)[0]
        f.seek(where)
        f.write(bytes([byte ^ 0x04]))


@pytest.mark.parametrize("staging_name", ["pread", "mapped", "registered"])
@pytest.mark.parametrize("batch_bytes", [1, 3000, 1 << 20])
def test_verify_source_names_the_first_changed_chunk(
    tmp_path, fake_cuda, monkeypatch, staging_name, batch_bytes
):
    """verify_source on the HDF5 pipeline (stand-ins for CuPy, the decoder and the XXH3
    kernel): an unchanged acquisition loads as the cpu backend does; a bit flipped in
    one chunk after indexing raises SourceIntegrityError naming its shard and frame,
    also where a later chunk changed too; a short chunk (hashed on the host) as well."""
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle, xxh3
    from quantem.stem4d.errors import SourceIntegrityError
    from quantem.stem4d.io.arina import load_arina, open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    fake_cuda()
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    hashed = []

    def spy(data, starts, extents, lengths, expected, flags, stream=None):
        hashed.append(len(np.asarray(starts)))
        host_verify_on_device(data, starts, extents, lengths, expected, flags, stream)

    monkeypatch.setattr(xxh3, "verify_on_device", spy)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(5, 7), detector_shape=(24, 20),
        frames_per_shard=8, processes=1, dose=3000.0,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    expected = load_arina(master, index_dir=index_dir, apply_mask=False).data.reshape(35, 24, 20)
    source = open_arina(master, index_dir=index_dir)
    nbytes = np.asarray(source.index.frame_nbytes)
    assert (nbytes > xxh3.MIDSIZE_MAX).all()  # every chunk goes through the "kernel"

    def load(**kwargs):
        return hdf5_pipeline.decode_source_to_device(
            open_arina(master, index_dir=index_dir), staging=staging_name,
            batch_bytes=batch_bytes, threads=2, verify_source=True, **kwargs,
        )  # fmt: skip

    out, stats = load()
    assert stats.staging == staging_name
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert sum(hashed) == 35  # one hash per chunk, batched per staging batch
    assert len(hashed) == stats.batches
    hashed.clear()
    hdf5_pipeline.decode_source_to_device(source, staging=staging_name, batch_bytes=batch_bytes)
    assert not hashed  # off: no hashing at all

    _flip_chunk_byte(source, 29, at=300)  # shard 3 (8 frames a shard), its frame 5
    _flip_chunk_byte(source, 33, at=100)  # a later change is not the one named
    with pytest.raises(SourceIntegrityError) as info:
        load()
    err = info.value
    assert err.fields == {"frame": 29, "shard_frame": 5}
    assert err.path == source.shard_paths[3]
    with pytest.raises(SourceIntegrityError) as info:  # the consume path checks too
        load(consume=lambda a, b, frames: None)
    assert info.value.fields["frame"] == 29

    # A chunk's header changed, in the first frame: reported as changed, not as corrupt.
    _flip_chunk_byte(source, 0, at=0)
    with pytest.raises(SourceIntegrityError) as info:
        load()
    assert info.value.fields == {"frame": 0, "shard_frame": 0}


@pytest.mark.parametrize("staging_name", ["pread", "mapped", "registered"])
def test_verify_source_hashes_short_chunks_on_the_host(tmp_path, fake_cuda, monkeypatch,
                                                       staging_name):  # fmt: skip
    """Chunks of 240 bytes or fewer (empty frames), which the kernel leaves to the host,
    are hashed from the staged bytes; a flip in one is named like any other."""
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle, xxh3
    from quantem.stem4d.errors import SourceIntegrityError
    from quantem.stem4d.io.arina import load_arina, open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    fake_cuda()
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    monkeypatch.setattr(xxh3, "verify_on_device", host_verify_on_device)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(4, 6), detector_shape=(16, 16),
        frames_per_shard=5, processes=1, dose=0.5,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    expected = load_arina(master, index_dir=index_dir, apply_mask=False).data.reshape(24, 16, 16)
    source = open_arina(master, index_dir=index_dir)
    small = np.flatnonzero(np.asarray(source.index.frame_nbytes) <= xxh3.MIDSIZE_MAX)
    assert small.size and small[-1] > 0
    out, _ = hdf5_pipeline.decode_source_to_device(
        source, staging=staging_name, batch_bytes=700, threads=2, verify_source=True
    )
    np.testing.assert_array_equal(np.asarray(out), expected)
    frame = int(small[-1])
    _flip_chunk_byte(source, frame, at=int(source.index.frame_nbytes[frame]) - 1)
    with pytest.raises(SourceIntegrityError) as info:
        hdf5_pipeline.decode_source_to_device(
            open_arina(master, index_dir=index_dir), staging=staging_name, batch_bytes=700,
            threads=2, verify_source=True,
        )  # fmt: skip
    assert info.value.fields["frame"] == frame


@pytest.mark.parametrize("why", ["changed", "not_resident", "budget", "refused"])
def test_registered_staging_falls_back_to_pread_and_keeps_nothing_stale(
    tmp_path, fake_cuda, monkeypatch, why
):
    """Registered staging gives way to pread (same products, the reason recorded) when a
    shard changed during the load, is not wholly in the page cache, would exceed the
    budget, or the driver refuses; no stale registration is served afterwards."""
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.stem4d.io import page_cache
    from quantem.stem4d.io.arina import load_arina, open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    fake = fake_cuda(fail_register_at=1 if why == "refused" else None)
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(4, 6), detector_shape=(16, 16),
        frames_per_shard=5, processes=1,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    expected = load_arina(master, index_dir=index_dir, apply_mask=False).data.reshape(24, 16, 16)
    reason = {
        "changed": "changed during the load",
        "not_resident": "not in the page cache",
        "budget": "budget",
        "refused": "stand-in",
    }[why]
    if why == "changed":
        monkeypatch.setattr(
            registered_files.RegisteredFiles, "still_current", lambda self, entry, fd: False
        )
    elif why == "not_resident":
        monkeypatch.setattr(page_cache.ReadOnlyMapping, "resident_pages", lambda self: 0)
    elif why == "budget":
        fake.cache.set_budget(4096)
    out, stats = hdf5_pipeline.decode_source_to_device(
        open_arina(master, index_dir=index_dir), staging="registered", batch_bytes=700, threads=2
    )
    assert stats.staging == "pread" and reason in stats.fallback, stats.fallback
    np.testing.assert_array_equal(np.asarray(out), expected)
    if why == "refused":  # the shards registered before the refusal are valid and kept
        assert len(fake.cache.paths()) == len(fake.registered) == len(fake.register_calls) - 1
    else:
        assert fake.cache.paths() == [] and not fake.registered
    if why in ("not_resident", "budget"):
        assert not fake.register_calls  # refused before registering anything


def test_registered_staging_registers_from_the_second_load_when_asked(
    tmp_path, fake_cuda, monkeypatch
):
    """Registering from load 2: the first load of files in a process stages by pread and
    registers nothing; the second registers them; the third copies from the kept
    registrations; same products."""
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.stem4d.io.arina import load_arina, open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    fake = fake_cuda()
    fake.cache.set_register_from(2)
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(4, 6), detector_shape=(16, 16),
        frames_per_shard=5, processes=1,
    )  # fmt: skip
    index_dir = tmp_path / "index"
    expected = load_arina(master, index_dir=index_dir, apply_mask=False).data.reshape(24, 16, 16)
    seen = []
    for _ in range(3):
        out, stats = hdf5_pipeline.decode_source_to_device(
            open_arina(master, index_dir=index_dir), batch_bytes=700, threads=2
        )
        np.testing.assert_array_equal(np.asarray(out), expected)
        seen.append((stats.staging, stats.registered_bytes > 0, len(fake.register_calls)))
        if len(seen) == 1:
            assert "load 1 of the unchanged file" in stats.fallback, stats.fallback
            assert "registered from load 2" in stats.fallback
        # every lease given back (once the copies were done), none held after the load
        assert all(entry.leases == 0 for entry in fake.cache._entries.values())
    n = len(fake.cache.paths())
    assert n == 5  # every shard
    assert seen == [("pread", False, 0), ("registered", True, n), ("registered", False, n)]


def test_registered_staging_refuses_a_shard_shorter_than_its_index(
    tmp_path, fake_cuda, monkeypatch
):
    from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle
    from quantem.stem4d.errors import ArinaFormatError
    from quantem.stem4d.io.arina import open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    fake_cuda()
    monkeypatch.setattr(lz4_bitshuffle, "ChunkDecoder", HostChunkDecoder)
    master = write_synthetic_arina(
        tmp_path / "acq", "s", scan_shape=(4, 6), detector_shape=(16, 16),
        frames_per_shard=5, processes=1,
    )  # fmt: skip
    source = open_arina(master, index_dir=tmp_path / "index")
    shard = source.shard_paths[2]
    os.truncate(shard, os.path.getsize(shard) - 100)  # after indexing
    with pytest.raises(ArinaFormatError, match="file ends before the expected data") as info:
        hdf5_pipeline.decode_source_to_device(source, staging="registered", threads=2)
    assert info.value.path == shard


@pytest.mark.parametrize("kind", ["pread", "registered"])
@pytest.mark.parametrize("batch_bytes", [1, 5000, 1 << 20])
def test_qem_stage_blocks_moves_every_block(tmp_path, fake_cuda, monkeypatch, kind, batch_bytes):
    """``.qem`` staging (pread or registered) hands each batch's blocks to ``launch`` at
    the offsets it names, verified (stand-in XXH3 kernel; short extents on the host); a
    second registered load registers nothing; a flipped byte is reported."""
    from quantem.stem4d.acquisition import Acquisition
    from quantem.stem4d.cuda import qem_pipeline, xxh3
    from quantem.stem4d.io.qem.reader import QemFile
    from quantem.stem4d.io.qem.writer import save_qem

    fake = fake_cuda()
    monkeypatch.setattr(xxh3, "verify_on_device", host_verify_on_device)
    monkeypatch.setattr(qem_pipeline, "DEFAULT_STAGING", kind)
    rng = np.random.default_rng(5)
    data = rng.poisson(2.0, size=(6, 5, 12, 10)).astype(np.uint16)
    data[0, :2] = 0  # empty frames: short blocks, hashed on the host
    mask = np.zeros((12, 10), dtype=np.uint32)
    path = save_qem(
        Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu"), tmp_path / "a.qem",
        block_frames=3,
    )  # fmt: skip
    blob = path.read_bytes()

    def stage():
        qem = QemFile(path, verify=False)
        try:
            index = qem.block_index
            ids = np.arange(qem.n_blocks)
            got = {}

            def launch(i, a, b, device_bytes, starts, stream):
                buf = bytes(np.asarray(device_bytes))
                for k, block in enumerate(ids[a:b].tolist()):
                    n = int(index["length"][block])
                    got[block] = buf[int(starts[k]) : int(starts[k]) + n]

            stats = qem_pipeline.stage_blocks(qem, ids, launch, batch_bytes=batch_bytes)
            for block in ids.tolist():
                at, n = int(index["offset"][block]), int(index["length"][block])
                assert got[block] == blob[at : at + n], block
            return stats, index
        finally:
            qem.close()

    stats, index = stage()
    assert stats.staging == kind and stats.fallback is None
    if kind == "registered":
        assert len(fake.register_calls) == 1 and stats.registered_bytes > 0
        again, _ = stage()
        assert again.staging == "registered" and again.registered_bytes == 0
        assert len(fake.register_calls) == 1
    else:
        assert not fake.register_calls
    big = int(np.argmax(index["length"]))
    with open(path, "r+b") as f:  # one payload byte flipped after writing
        f.seek(int(index["offset"][big]) + 3)
        byte = f.read(1)[0]
        f.seek(int(index["offset"][big]) + 3)
        f.write(bytes([byte ^ 0x10]))
    from quantem.stem4d.errors import QemFormatError

    with pytest.raises(QemFormatError, match="checksum") as info:
        stage()
    assert info.value.fields.get("block") == big
