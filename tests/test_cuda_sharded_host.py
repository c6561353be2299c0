"""Sharded (multi-GPU) loads and products, run on the host against a CuPy stand-in.

The stand-in has several fake devices: ``cupy.cuda.Device(i)`` sets a per-thread current
device, every array records the device it was made on, device-to-device copies record
their source and target. The GPU decoders are replaced by CPU ones that read exactly the
frames (HDF5: the chunks of ``frame_range`` from the frame index) or blocks (``.qem``:
the block ids the staging was asked for) the sharded code requests, so the split, the
per-thread device contexts, the finishing of each GPU's rows and the combination of the
products are the real code. The GPU kernels themselves are tested in
``tests/hardware/test_cuda_sharded.py``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import types

import numpy as np
import pytest
from _cuda_host import host_zero_invalid_pixels

from quantem.stem4d.cuda import loaders, qem_pipeline, rans_decode, sharded, staging
from quantem.stem4d.io import synthetic

SCAN = (7, 5)
DETECTOR = (12, 10)


class FakeArray(np.ndarray):
    """A host array that remembers its device and answers ``.data`` like CuPy's."""

    device_id: int = -1

    def __array_finalize__(self, obj) -> None:
        self.device_id = getattr(obj, "device_id", _FAKE.current())

    @property
    def data(self):
        array = self
        fake = _FAKE

        def copy_from_device(source, nbytes) -> None:
            fake.copies.append((source.device, array.device_id, nbytes))
            ctypes.memmove(array.ctypes.data, source.ptr, nbytes)

        return types.SimpleNamespace(
            ptr=self.ctypes.data, device=self.device_id, copy_from_device=copy_from_device
        )


class FakeCupy(types.ModuleType):
    """``cupy`` with ``n_devices`` devices; unknown names fall through to numpy."""

    def __init__(self, n_devices: int) -> None:
        super().__init__("cupy")
        self.n_devices = n_devices
        self.local = threading.local()
        self.copies: list[tuple[int, int, int]] = []
        self.entered: list[tuple[str, int]] = []
        fake = self

        class Device:
            def __init__(self, id=None):
                self.id = fake.current() if id is None else int(id)
                if not 0 <= self.id < fake.n_devices:
                    raise RuntimeError(f"cudaErrorInvalidDevice: {self.id}")

            def __enter__(self):
                stack = fake.stack()
                stack.append(self.id)
                fake.entered.append((threading.current_thread().name, self.id))
                return self

            def __exit__(self, *exc):
                fake.stack().pop()

        runtime = types.SimpleNamespace(
            getDeviceCount=lambda: fake.n_devices,
            getDeviceProperties=lambda i: {"name": b"Fake GPU", "uuid": bytes([i]) * 16},
            deviceSynchronize=lambda: None,
        )
        self.cuda = types.SimpleNamespace(
            Device=Device, runtime=runtime, Stream=types.SimpleNamespace(null=_NullStream())
        )

    def stack(self) -> list[int]:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        return self.local.stack

    def current(self) -> int:
        stack = self.stack()
        return stack[-1] if stack else 0

    def _tag(self, array) -> FakeArray:
        out = np.asarray(array).view(FakeArray)
        out.device_id = self.current()
        return out

    def empty(self, shape, dtype=np.uint8):
        return self._tag(np.zeros(shape, dtype=dtype))

    zeros = empty

    def asarray(self, a, dtype=None):
        if isinstance(a, FakeArray) and dtype is None:
            return a
        return self._tag(np.array(a, dtype=dtype))

    def ascontiguousarray(self, a):
        if isinstance(a, FakeArray) and a.flags.c_contiguous:
            return a
        device = getattr(a, "device_id", self.current())
        out = np.ascontiguousarray(a).view(FakeArray)
        out.device_id = device
        return out

    def asnumpy(self, a):
        return np.array(a).view(np.ndarray)

    def __getattr__(self, name):
        return getattr(np, name)


class _NullStream:
    def synchronize(self) -> None:
        pass


class _FakeHolder:
    fake: FakeCupy | None = None

    def current(self) -> int:
        return self.fake.current() if self.fake is not None else -1

    @property
    def copies(self):
        return self.fake.copies


_FAKE = _FakeHolder()


@pytest.fixture
def fake_gpus(monkeypatch):
    """Install a CuPy stand-in with ``n`` devices and CPU stand-ins for the decoders."""

    def install(n: int) -> FakeCupy:
        fake = FakeCupy(n)
        _FAKE.fake = fake
        monkeypatch.setitem(sys.modules, "cupy", fake)
        monkeypatch.setattr(sharded, "DENSE_KERNELS", "quantem.stem4d.detector.cpu_kernels")
        monkeypatch.setattr(staging, "prestart_threads", lambda *a, **k: None)
        monkeypatch.setattr(loaders, "decode_source_to_device", _cpu_decode_source)
        monkeypatch.setattr(qem_pipeline, "stage_blocks", _cpu_stage_blocks)
        monkeypatch.setattr(rans_decode, "QemBlockDecoder", _CpuBlockDecoder)
        monkeypatch.setattr(loaders, "zero_invalid_pixels", host_zero_invalid_pixels)
        return fake

    yield install
    _FAKE.fake = None


def _cpu_decode_source(
    source, *, out=None, consume=None, frame_range=None, verify_source=False, finish=None, **_
):
    """``decode_source_to_device`` on the CPU: the chunks of ``frame_range`` only, read
    through the frame index and decoded by the CPU codec, batches of 3 frames; with
    ``verify_source`` each chunk is checked against the index's XXH3-64 (the pipeline's own
    check is tested in test_staging_host.py; here what reaches it)."""
    import cupy
    import xxhash

    from quantem.stem4d.cuda.hdf5_pipeline import PipelineStats
    from quantem.stem4d.io.arina import chunk_mismatch_error, expected_chunk_hashes
    from quantem.stem4d.io.cpu_decode import decode_chunk_bytes

    first, last = frame_range if frame_range is not None else (0, int(source.n_frames))
    index = source.index
    expected = expected_chunk_hashes(source) if verify_source else None
    frames = []
    nbytes = 0
    for f in range(first, last):
        shard = int(index.frame_shard[f])
        with open(source.shard_paths[shard], "rb") as fh:
            chunk = os.pread(fh.fileno(), int(index.frame_nbytes[f]), int(index.frame_offset[f]))
        if expected is not None and xxhash.xxh3_64_intdigest(chunk) != int(expected[f]):
            raise chunk_mismatch_error(source, f)
        nbytes += len(chunk)
        frames.append(decode_chunk_bytes(chunk, source.detector_shape, source.dtype))
    decoded = cupy.asarray(np.stack(frames))
    stats = PipelineStats(compressed_bytes=nbytes, batches=1, staging="pread")
    if consume is None:
        if finish is not None:  # after the last batch, as the pipeline calls it
            finish(decoded)
        return decoded, stats
    for a in range(0, decoded.shape[0], 3):
        consume(a, min(a + 3, decoded.shape[0]), decoded[a : a + 3])
    return None, stats


_staged = threading.local()


def _cpu_stage_blocks(qem, block_ids, launch, **_):
    """``stage_blocks`` on the CPU: remembers which blocks each launch covers."""
    ids = np.asarray(block_ids, dtype=np.int64)
    _staged.ids = ids
    launch(0, 0, ids.size, None, np.zeros(ids.size, dtype=np.int64), None)
    return staging.StageStats(batches=1, copied_bytes=int(ids.size))


class _CpuBlockDecoder:
    """The rANS decoder on the CPU (the blocks of the current staging call)."""

    def __init__(self, qem) -> None:
        self.qem = qem

    def decode_dense(self, payload, table, out, status, stream=None) -> None:
        decoded = self.qem.decode_blocks(_staged.ids)
        bf = int(self.qem.block_frames)
        for k, start in enumerate(np.asarray(table.out_frame).tolist()):
            n = min(bf, decoded.shape[0] - k * bf, out.shape[0] - start)
            out[start : start + n] = decoded[k * bf : k * bf + n]


@pytest.fixture(scope="module")
def arina(tmp_path_factory):
    path = tmp_path_factory.mktemp("arina")
    master = synthetic.write_synthetic_arina(
        path,
        scan_shape=SCAN,
        detector_shape=DETECTOR,
        dtype="uint16",
        seed=4,
        dose=3000.0,
        frames_per_shard=4,
        dead_pixels=[(1, 2), (5, 7)],
        processes=1,
        progress=False,
    )
    return master


@pytest.fixture(scope="module")
def qem_path(arina, tmp_path_factory):
    from quantem.stem4d import io

    out = tmp_path_factory.mktemp("qem") / "a.qem"
    io.save(arina, out, block_frames=3)
    return out


def _cpu(path, **options):
    from quantem.stem4d import io

    return io.load(path, **options)


@pytest.mark.parametrize("n_rows,n_parts", [(7, 1), (7, 2), (7, 3), (7, 7), (512, 2), (5, 4)])
def test_split_covers_every_row_once_in_contiguous_blocks(n_rows, n_parts):
    blocks = sharded.split_rows(n_rows, n_parts)
    assert len(blocks) == n_parts
    covered = [r for a, b in blocks for r in range(a, b)]
    assert covered == list(range(n_rows))
    sizes = [b - a for a, b in blocks]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_split_refuses_more_parts_than_rows():
    with pytest.raises(ValueError, match="cannot split 2 scan rows over 3 GPUs"):
        sharded.split_rows(2, 3)


@pytest.mark.parametrize(
    "devices,match",
    [
        ([5], r"GPU 5 does not exist; this host has 1 CUDA device \(ids 0-0\)"),
        ([0, 0], "GPU 0 is listed twice"),
        ([], "the list is empty"),
        ("first", "devices must be 'all'"),
        (1, "devices must be 'all' or a list"),
        ([0.5], "is not a GPU id"),
        ([True], "is not a GPU id"),
    ],
)
def test_bad_device_lists_are_named(devices, match):
    with pytest.raises(ValueError, match=match):
        sharded.parse_devices(devices, 1)
    assert sharded.parse_devices("all", 3) == [0, 1, 2]


def test_load_with_a_missing_device_names_it(fake_gpus, arina, monkeypatch):
    from quantem.stem4d import io

    fake_gpus(1)
    monkeypatch.setattr(io, "require_backend", lambda backend: backend)
    with pytest.raises(ValueError, match="GPU 5 does not exist; this host has 1 CUDA device"):
        io.load(arina, backend="cuda", devices=[5])
    with pytest.raises(ValueError, match=r"either device= .* or devices="):
        io.load(arina, backend="cuda", device=0, devices=[0])
    with pytest.raises(ValueError, match="backend 'cpu' takes none"):
        io.load(arina, backend="cpu", devices=[0])


def _check_blocks(acq, expected, devices, fake):
    data = acq.data
    assert isinstance(data, sharded.ShardedData)
    assert data.devices == tuple(devices)
    assert [b.rows for b in data] == sharded.split_rows(expected.shape[0], len(devices))
    for block in data:
        assert block.data.device_id == block.device  # decoded inside its device context
        host = np.asarray(block.data).view(np.ndarray)
        part = expected[block.rows[0] : block.rows[1]]
        assert host.dtype == part.dtype and host.shape == part.shape
        assert host.tobytes() == part.tobytes()
    assert data.gather().tobytes() == expected.tobytes()
    assert data.nbytes == expected.nbytes
    on_home = data.gather(device=devices[-1])
    assert on_home.device_id == devices[-1]
    assert np.asarray(on_home).tobytes() == expected.tobytes()
    # Every GPU ran in its own thread, each inside its own device context.
    threads = {name for name, device in fake.entered if device in devices[1:]}
    assert len(devices) == 1 or threads - {threading.current_thread().name}


@pytest.mark.parametrize("devices", [[0], [0, 1], [2, 0, 1], [3, 1, 0, 2]])
@pytest.mark.parametrize(
    "options", [{}, {"dtype": "u8"}, {"det_bin": 2}, {"apply_mask": True, "dtype": "u32"}]
)
def test_hdf5_blocks_equal_the_cpu_load_byte_for_byte(fake_gpus, arina, devices, options):
    fake = fake_gpus(4)
    expected = _cpu(arina, **options)
    acq = sharded.load(arina, devices=devices, **options)
    _check_blocks(acq, expected.data, devices, fake)
    for key in ("clipped_pixels", "bin_saturated_pixels", "det_bin_dropped", "detector_shape"):
        assert acq.metadata[key] == expected.metadata[key], key
    np.testing.assert_array_equal(acq.validity, expected.validity)
    stats = acq.metadata["load_stats"]
    assert [d["device"] for d in stats["devices"]] == devices
    assert sum(d["compressed_bytes"] for d in stats["devices"]) == stats["compressed_bytes"]
    assert abs(sum(d["bytes_share"] for d in stats["devices"]) - 1.0) < 1e-12
    assert all(d["name"] == "Fake GPU" and d["uuid"].startswith("GPU-") for d in stats["devices"])


@pytest.mark.parametrize("devices", [[0], [1, 0], [0, 1, 2]])
@pytest.mark.parametrize("options", [{}, {"det_bin": 2, "dtype": "u8"}])
def test_qem_dense_blocks_equal_the_cpu_load_byte_for_byte(fake_gpus, qem_path, devices, options):
    fake = fake_gpus(3)
    expected = _cpu(qem_path, **options)
    acq = sharded.load(qem_path, devices=devices, **options)
    _check_blocks(acq, expected.data, devices, fake)
    assert acq.metadata["compressed_bytes"] == expected.metadata["compressed_bytes"]
    assert acq.metadata["clipped_pixels"] == expected.metadata["clipped_pixels"]


def _products(session):
    com = session.center_of_mass()
    return {
        "bf": np.asarray(session.bf(radius=3.0, center=(6.0, 5.0))),
        "adf": np.asarray(session.adf(inner=3.0, outer=5.0, center=(6.0, 5.0))),
        "mean_dp_exact": session.mean_dp_exact(),
        "mean_dp": session.mean_dp(),
        "com_row": np.asarray(com.row),
        "com_col": np.asarray(com.col),
        "frame": np.asarray(session.frame((4, 3))),
        "frame_last": np.asarray(session.frame(-1)),
        "disk": session.bright_field_disk(),
    }


@pytest.mark.parametrize("path_fixture", ["arina", "qem_path"])
def test_products_equal_the_one_device_products_exactly(fake_gpus, request, path_fixture):
    from quantem.stem4d.detector import prepare

    path = request.getfixturevalue(path_fixture)
    fake = fake_gpus(3)
    one = _products(prepare(sharded.load(path, devices=[0])))
    reference = _products(prepare(_cpu(path)))
    for devices in ([0, 1], [2, 1, 0]):
        fake.copies.clear()
        acq = sharded.load(path, devices=devices)
        many = _products(prepare(acq))
        for name, value in one.items():
            if name == "disk":
                assert many[name] == value
                continue
            assert many[name].dtype == value.dtype, name
            assert many[name].tobytes() == value.tobytes(), name  # bit for bit
            assert value.tobytes() == np.asarray(reference[name]).tobytes(), name
        # The per-row results of other GPUs were copied onto the home device.
        assert any(src != dst and dst == devices[0] for src, dst, _ in fake.copies)
        session = prepare(acq)
        assert session.masked_sum(np.ones(DETECTOR, bool)).device_id == devices[0]


def test_sharded_data_refuses_blocks_that_do_not_tile(fake_gpus):
    fake_gpus(2)
    block = sharded.ScanBlock(0, (0, 3), data=np.zeros((3, 2, 2, 2), np.uint16))
    gap = sharded.ScanBlock(1, (4, 6), data=np.zeros((2, 2, 2, 2), np.uint16))
    with pytest.raises(ValueError, match="expected to start at 3"):
        sharded.ShardedData([block, gap], (6, 2), (2, 2), np.uint16)
    with pytest.raises(ValueError, match="cover 3 of 6 rows"):
        sharded.ShardedData([block], (6, 2), (2, 2), np.uint16)


def test_an_error_on_one_gpu_waits_for_the_others_and_names_it(fake_gpus):
    fake_gpus(3)
    done = []

    def work(item):
        if item == "bad":
            raise ValueError("GPU 1 failed")
        done.append(item)
        return item

    with pytest.raises(ValueError, match="GPU 1 failed"):
        sharded.run_per_device([(0, "a"), (1, "bad"), (2, "c")], work)
    assert sorted(done) == ["a", "c"]
    assert sharded.run_per_device([(1, "x"), (0, "y")], lambda v: v * 2) == ["xx", "yy"]


def test_default_devices_none_keeps_the_one_gpu_loader(monkeypatch, arina):
    from quantem.stem4d import io
    from quantem.stem4d.cuda import loaders as cuda_loaders

    calls = []
    monkeypatch.setattr(io, "require_backend", lambda backend: backend)
    monkeypatch.setattr(cuda_loaders, "load_hdf5", lambda path, **o: calls.append(o) or "one")
    monkeypatch.setattr(sharded, "load", lambda *a, **k: pytest.fail("sharded path taken"))
    assert io._load(arina, "cuda", {"device": 1}) == "one"
    assert io._load(arina, "cuda", {"devices": None}) == "one"
    assert calls == [{"device": 1}, {}]


def _compute_products(acq):
    from quantem.stem4d.dpc import dpc
    from quantem.stem4d.virtual import Annulus, Disk, open_frames, virtual_images

    images = virtual_images(acq, {"bf": Disk(3.0), "adf": Annulus(3.0, 5.0)})
    result = dpc(acq, rotation_deg=10.0)
    stack = open_frames(acq).pixel_stack(np.array([6, 7, 2]), np.array([5, 4, 9]))
    return {
        "virtual_bf": np.asarray(images["bf"]),
        "virtual_adf": np.asarray(images["adf"]),
        "dpc_com_row": np.asarray(result.com_row),
        "dpc_phase": np.asarray(result.phase),
        "pixel_stack": np.asarray(stack),
    }


@pytest.mark.parametrize("path_fixture", ["arina", "qem_path"])
def test_compute_products_equal_the_one_device_products_exactly(fake_gpus, request, path_fixture):
    """Virtual detectors, DPC and the parallax pixel stack over a sharded acquisition."""
    path = request.getfixturevalue(path_fixture)
    fake_gpus(3)
    one = _compute_products(sharded.load(path, devices=[0]))
    dense = _compute_products(_cpu(path))
    many = _compute_products(sharded.load(path, devices=[2, 0, 1]))
    for name, value in one.items():
        assert many[name].dtype == value.dtype, name
        assert many[name].tobytes() == value.tobytes(), name
        assert value.tobytes() == dense[name].tobytes(), name


def test_compute_refuses_a_scan_region_of_a_sharded_acquisition(fake_gpus, arina):
    from quantem.stem4d.errors import ComputeError
    from quantem.stem4d.virtual import open_frames

    fake_gpus(2)
    with pytest.raises(ComputeError, match="scan region of a sharded acquisition"):
        open_frames(sharded.load(arina, devices=[0, 1]), scan_region=(0, 2, 0, 2))


def test_verify_source_reaches_every_gpu_and_names_the_changed_frame(fake_gpus, tmp_path):
    """``verify_source`` is passed to every GPU's block: a chunk changed after the index
    was built fails the load (on the GPU holding it), naming shard and frame; unchanged
    chunks load as the CPU does."""
    from quantem.stem4d import io
    from quantem.stem4d.errors import SourceIntegrityError
    from quantem.stem4d.io.arina import open_arina

    master = synthetic.write_synthetic_arina(
        tmp_path / "acq", scan_shape=SCAN, detector_shape=DETECTOR, dtype="uint16", seed=5,
        dose=3000.0, frames_per_shard=4, processes=1, progress=False,
    )  # fmt: skip
    fake_gpus(2)
    source = open_arina(master)  # first observation: the checksums are recorded
    expected = io.load(master, apply_mask=False)
    acq = sharded.load(master, devices=[0, 1], verify_source=True, apply_mask=False)
    np.testing.assert_array_equal(acq.data.gather(), expected.data)
    frame = int(source.n_frames) - 2  # in the last GPU's rows
    shard = int(source.index.frame_shard[frame])
    offset = int(source.index.frame_offset[frame]) + int(source.index.frame_nbytes[frame]) // 2
    with open(source.shard_paths[shard], "r+b") as fh:
        byte = os.pread(fh.fileno(), 1, offset)
        os.pwrite(fh.fileno(), bytes([byte[0] ^ 0x10]), offset)
    with pytest.raises(SourceIntegrityError) as info:
        sharded.load(master, devices=[0, 1], verify_source=True, apply_mask=False)
    assert info.value.fields["frame"] == frame
    assert str(source.shard_paths[shard]) in str(info.value)


@pytest.mark.parametrize("path_fixture", ["arina", "qem_path"])
def test_the_parsed_load_options_reach_every_gpu(fake_gpus, request, path_fixture):
    """io.load hands the sharded loader one parsed LoadOptions (load_options=)."""
    from quantem.stem4d import io

    fake = fake_gpus(2)
    path = request.getfixturevalue(path_fixture)
    expected = _cpu(path, dtype="u8", det_bin=2)
    parsed = io.parse_options({"dtype": "u8", "det_bin": 2})
    assert set(parsed) == {"load_options"}
    acq = sharded.load(path, devices=[1, 0], **parsed)
    _check_blocks(acq, expected.data, [1, 0], fake)
    assert acq.metadata["load_options"] == expected.metadata["load_options"]
