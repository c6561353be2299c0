"""Tests that kill survivors of the mutmut run over the ARINA reader
(tests/mutation/arina-survivors.md names each mutant a test here kills)."""

from __future__ import annotations

import itertools
import os
import struct
import threading
import types

import bitshuffle
import numpy as np
import pytest

from quantem.stem4d.errors import ArinaFormatError, ChunkDecodeError, SourceIntegrityError
from quantem.stem4d.io import arina, cpu_decode, library_decode
from quantem.stem4d.io.arina import load_arina, open_arina
from quantem.stem4d.io.chunk_errors import (
    DECODE_OK,
    ERR_BLOCK_HEADER_TRUNCATED,
    ERR_BLOCK_LENGTH,
    ERR_BLOCK_SIZE,
    ERR_CHUNK_TOO_SHORT,
    ERR_LZ4_MALFORMED,
    ERR_LZ4_OUTPUT_SIZE,
    ERR_TAIL_TRUNCATED,
    ERR_TRAILING_BYTES,
    ERROR_MESSAGES,
)
from quantem.stem4d.io.synthetic import write_arina_frames, write_synthetic_arina

SCAN, DET = (3, 4), (16, 12)


@pytest.fixture
def master(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=SCAN, detector_shape=DET, frames_per_shard=5, processes=1
    )


def _flip(source, frame: int) -> None:
    shard = source.shard_paths[int(source.index.frame_shard[frame])]
    offset = int(source.index.frame_offset[frame]) + int(source.index.frame_nbytes[frame]) // 2
    with open(shard, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def test_a_changed_chunk_says_what_changed_in_full(master):
    source = open_arina(master)
    _flip(source, 11)
    with pytest.raises(SourceIntegrityError) as info:
        load_arina(master, verify_source=True)
    assert info.value.path == os.fspath(source.shard_paths[2])
    assert info.value.detail == (
        "chunk changed since the frame index was built (its XXH3-64 differs from the one "
        "recorded at the first observation)"
    )
    assert info.value.fields == {"frame": 11, "shard_frame": 1}


def _chunk(frame: np.ndarray, block_elements: int) -> bytes:
    """Encoded by the bitshuffle package directly (not quantem's writer)."""
    header = struct.pack(">QI", frame.nbytes, block_elements * frame.itemsize)
    return header + bitshuffle.compress_lz4(np.ascontiguousarray(frame), block_elements).tobytes()


def _codes(chunks: list[bytes], frame_bytes: int, elem_size: int):
    buffer = np.frombuffer(b"".join(chunks), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)
    errors, _ = library_decode.check_chunks(buffer, offsets, frame_bytes, elem_size)
    reference = [
        cpu_decode.scan_chunk(buffer, int(a), int(b), frame_bytes, elem_size)
        for a, b in itertools.pairwise(offsets)
    ]
    return errors, reference


def test_library_checks_give_the_walks_codes_chunk_by_chunk():
    """One call over chunks of several block sizes, valid and broken, each in its place:
    every chunk gets the numba walk's code (its own header, block table and tail)."""
    frame = (np.arange(72, dtype=np.uint16) * 37 % 1000).astype(np.uint16)
    sixty_four, one_block = _chunk(frame, 64), _chunk(frame, 72)
    eight = _chunk(frame, 8)  # nine blocks
    overrun = eight[:12] + struct.pack(">I", 10_000) + eight[16:]
    one_over = one_block[:12] + struct.pack(">I", len(one_block) - 15) + one_block[16:]
    cases = [
        (sixty_four, DECODE_OK),  # a full block and a last one of exactly 8 elements
        (eight, DECODE_OK),
        (one_block, DECODE_OK),
        (sixty_four[:7], ERR_CHUNK_TOO_SHORT),  # not at offset 0
        (sixty_four[:12], ERR_BLOCK_HEADER_TRUNCATED),  # the header alone
        (sixty_four[:8] + struct.pack(">I", 12) + sixty_four[12:], ERR_BLOCK_SIZE),  # 6 elements
        (overrun, ERR_BLOCK_LENGTH),  # nine blocks, the first one's length past the end
        (one_block + b"\0\0", ERR_TRAILING_BYTES),
        (one_block[:16], ERR_BLOCK_LENGTH),  # a length field with nothing after it
        (one_block[:14], ERR_BLOCK_HEADER_TRUNCATED),  # ends inside the length field
        (one_over, ERR_BLOCK_LENGTH),  # the block's length one byte past the end
    ]
    errors, reference = _codes([chunk for chunk, _ in cases], frame.nbytes, 2)
    assert errors.dtype == np.int32
    assert errors.tolist() == reference == [code for _, code in cases]
    # The chunk with most blocks fails in its first: the walk stops early, and the
    # one-block chunk's tail is still checked.
    errors, reference = _codes([overrun, one_block + b"\0\0"], frame.nbytes, 2)
    assert errors.tolist() == reference == [ERR_BLOCK_LENGTH, ERR_TRAILING_BYTES]


def test_a_last_block_of_exactly_eight_elements_decodes():
    frame = (np.arange(72, dtype=np.uint16) * 37 % 1000).astype(np.uint16)
    got = cpu_decode.decode_chunk_bytes(_chunk(frame, 64), (1, 72), "uint16", engine="library")
    np.testing.assert_array_equal(got[0], frame)


def test_library_checks_find_a_cut_raw_tail():
    """75 elements in blocks of 72: 3 raw elements (6 bytes) end the chunk."""
    frame = (np.arange(75, dtype=np.uint16) * 37 % 1000).astype(np.uint16)
    whole = _chunk(frame, 72)
    errors, reference = _codes([whole, whole[:-2], whole + b"\0"], frame.nbytes, 2)
    assert errors.tolist() == reference == [DECODE_OK, ERR_TAIL_TRUNCATED, ERR_TRAILING_BYTES]


def _buffer(chunks: list[bytes]):
    buffer = np.frombuffer(b"".join(chunks), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)
    return buffer, offsets


def test_library_decode_refuses_a_short_output_and_a_missing_library(monkeypatch):
    frame = (np.arange(72, dtype=np.uint16) * 37 % 1000).astype(np.uint16)
    buffer, offsets = _buffer([_chunk(frame, 72)] * 3)
    errors = np.zeros(3, dtype=np.int32)
    out = np.zeros(3 * frame.nbytes - 1, dtype=np.uint8)
    with pytest.raises(ValueError) as info:
        library_decode.decode_chunks(buffer, offsets, out, frame.nbytes, 2, errors)
    assert str(info.value) == "out holds 431 bytes, 3 frames need 432"
    monkeypatch.setattr(library_decode, "library_function", lambda: None)
    with pytest.raises(RuntimeError) as info:
        library_decode.decode_chunks(buffer, offsets, out, frame.nbytes, 2, errors)
    assert str(info.value) == "no bitshuffle library exports bshuf_decompress_lz4"


def test_library_decode_stops_at_the_int_size_limit(monkeypatch):
    """LZ4_decompress_safe takes int sizes: a frame or chunk over the limit is refused,
    one at the limit decodes (the limit lowered here so small data reach it)."""
    rng = np.random.default_rng(5)
    dense = rng.integers(0, 2**16, size=72, dtype=np.uint16)  # incompressible: chunk > frame
    sparse = (np.arange(72, dtype=np.uint16) * 37 % 1000).astype(np.uint16)
    chunks = [_chunk(sparse, 72), _chunk(dense, 72)]
    buffer, offsets = _buffer(chunks)
    assert len(chunks[1]) > dense.nbytes > len(chunks[0])

    def decode(limit: int) -> tuple[list[int], np.ndarray]:
        monkeypatch.setattr(library_decode, "_INT32_MAX", limit)
        errors = np.full(2, -1, dtype=np.int32)
        out = np.zeros(2 * dense.nbytes, dtype=np.uint8)
        library_decode.decode_chunks(buffer, offsets, out, dense.nbytes, 2, errors)
        return errors.tolist(), out.view(np.uint16)

    errors, out = decode(len(chunks[1]))  # every size at or under the limit
    assert errors == [DECODE_OK, DECODE_OK]
    np.testing.assert_array_equal(out, np.concatenate([sparse, dense]))
    assert decode(len(chunks[1]) - 1)[0] == [DECODE_OK, ERR_LZ4_MALFORMED]  # the chunk
    assert decode(dense.nbytes)[0] == [DECODE_OK, ERR_LZ4_MALFORMED]  # a frame at the limit
    assert decode(dense.nbytes - 1)[0] == [ERR_LZ4_MALFORMED] * 2  # the frame


def test_an_unloadable_candidate_library_is_skipped_and_the_lookup_done_once(monkeypatch):
    real = library_decode.bitshuffle_library_candidates()
    assert real, "neither hdf5plugin nor bitshuffle provides the C decoder"
    looked = []

    def candidates():
        looked.append(1)
        return ["/nonexistent/libh5bshuf.so", *real]

    monkeypatch.setattr(library_decode, "bitshuffle_library_candidates", candidates)
    monkeypatch.setattr(library_decode, "_FUNCTION", None)
    monkeypatch.setattr(library_decode, "_LOOKED", False)
    function = library_decode.library_function()
    assert function is not None
    assert library_decode.library_function() is function and len(looked) == 1
    assert library_decode.bitshuffle_block_functions() is not None


@pytest.mark.parametrize(("suffix", "name"), [(".dll", "h5bshuf.dll"), (".so", "libh5bshuf.so")])
def test_hdf5plugin_library_names_per_platform(monkeypatch, suffix, name):
    """hdf5plugin ships ``h5bshuf.dll`` on Windows, ``libh5bshuf.so``/``.dylib`` elsewhere."""
    hdf5plugin = pytest.importorskip("hdf5plugin")
    config = types.SimpleNamespace(build_config=types.SimpleNamespace(filter_file_extension=suffix))
    monkeypatch.setattr(hdf5plugin, "get_config", lambda: config)
    first = library_decode.bitshuffle_library_candidates()[0]
    assert first == os.path.join(hdf5plugin.PLUGIN_PATH, name)


def test_decode_threads_follow_numba_num_threads_else_the_affinity(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    for value, expected in [("3", 3), (" 5 ", 5), ("1", 1), ("0", cores), ("x", cores)]:
        monkeypatch.setenv("NUMBA_NUM_THREADS", value)
        assert library_decode.default_threads() == expected, value
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    assert library_decode.default_threads() == cores
    monkeypatch.delattr(os, "sched_getaffinity")  # as on macOS and Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert library_decode.default_threads() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert library_decode.default_threads() == 1


def test_the_direct_load_decodes_with_the_engine_it_names(master, monkeypatch):
    calls = {"library": 0, "numba": 0}
    library_chunks, numba_chunks = library_decode.decode_chunks, cpu_decode.decode_chunks

    def spy(name, function):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(library_decode, "decode_chunks", spy("library", library_chunks))
    monkeypatch.setattr(cpu_decode, "decode_chunks", spy("numba", numba_chunks))
    with load_arina(master, engine="numba") as acq:
        reference = acq.data.copy()
    assert calls == {"library": 0, "numba": 1}  # 12 frames: one piece
    with load_arina(master) as acq:  # auto: the library, numba left alone
        np.testing.assert_array_equal(acq.data, reference)
    assert calls == {"library": 1, "numba": 1}  # one piece of up to 512 frames
    with pytest.raises(ValueError, match="engine must be 'auto', 'library', 'bitshuffle'"):
        load_arina(master, engine="lz4")


def test_one_core_decodes_on_one_thread(monkeypatch):
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert library_decode.default_threads() == 1


@pytest.mark.parametrize("engine", ["library", "numba"])
def test_a_later_larger_piece_gets_a_larger_staging_buffer(tmp_path, monkeypatch, engine):
    """One thread, pieces of 2 frames: 2 empty frames (tiny chunks), then an empty one
    and one of noise (a piece whose first chunk fits the first piece's buffer)."""
    rng = np.random.default_rng(3)
    frames = np.zeros((2, 2, 32, 32), dtype=np.uint16)
    frames[1, 1] = rng.integers(0, 2**16, size=(32, 32), dtype=np.uint16)
    master = write_arina_frames(tmp_path, "grow", frames)
    monkeypatch.setattr(cpu_decode, "FRAMES_PER_TASK", 2)
    monkeypatch.setattr(library_decode, "FRAMES_PER_TASK", 2)
    with load_arina(master, threads=1, engine=engine, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data, frames)


def test_a_shard_cut_after_opening_is_named_by_the_reading_thread(master):
    source = open_arina(master)
    shard = source.shard_paths[1]
    os.truncate(shard, int(source.index.frame_offset[6]) + 5)
    out = np.empty(source.n_frames * source.frame_bytes, dtype=np.uint8)
    with pytest.raises(ArinaFormatError) as info:
        arina._read_and_decode_into(source, out, 1, "library")
    assert info.value.path == shard
    assert info.value.detail.startswith("file is truncated: a chunk at byte ")


def test_pieces_are_decoded_on_the_threads_asked(master, monkeypatch):
    """12 frames in pieces of 5: one thread decodes all three pieces itself; more
    threads (up to one a piece) decode them in the pool, never in the calling thread."""
    threads_seen = []
    library_chunks = library_decode.decode_chunks

    def spy(*args, **kwargs):
        threads_seen.append(threading.get_ident())
        return library_chunks(*args, **kwargs)

    monkeypatch.setattr(library_decode, "decode_chunks", spy)
    monkeypatch.setattr(library_decode, "FRAMES_PER_TASK", 5)
    with load_arina(master, threads=1, engine="library") as acq:
        reference = acq.data.copy()
    assert threads_seen == [threading.get_ident()] * 3
    threads_seen.clear()
    with load_arina(master, threads=8, engine="library") as acq:
        np.testing.assert_array_equal(acq.data, reference)
    assert len(threads_seen) == 3 and threading.get_ident() not in threads_seen


@pytest.mark.skipif(not cpu_decode.BITSHUFFLE_C_AVAILABLE, reason="no bitshuffle block functions")
def test_the_bitshuffle_engine_reaches_its_c_decoder(master, monkeypatch):
    calls = []
    decode_c = cpu_decode._decode_chunks_c

    def spy(*args):
        calls.append(args[3])  # frame_bytes
        return decode_c(*args)

    monkeypatch.setattr(cpu_decode, "_decode_chunks_c", spy)
    with load_arina(master, engine="bitshuffle") as acq:
        assert acq.data.shape == (*SCAN, *DET)
    assert calls == [DET[0] * DET[1] * 2]


def test_a_chunk_the_c_decoder_rejects_is_named_by_the_walks_check(master):
    """The library engine's C decoder says only that a chunk failed; the error names the
    check the numba walk finds (here: a block that decodes to the wrong size)."""
    source = open_arina(master)
    buffer, offsets = arina.read_compressed(source, 6, 7)
    chunk = buffer[: offsets[1]].copy()
    for position, bit in itertools.product(range(12, chunk.size), (1, 0x80)):
        damaged = chunk.copy()
        damaged[position] ^= bit
        code = cpu_decode.scan_chunk(damaged, 0, damaged.size, source.frame_bytes, 2)
        if code == ERR_LZ4_OUTPUT_SIZE:
            break
    else:
        pytest.fail("no single bit flip gives a block of the wrong size")
    shard = source.shard_paths[1]
    with open(shard, "r+b") as f:
        f.seek(int(source.index.frame_offset[6]))
        f.write(damaged.tobytes())
    with pytest.raises(ChunkDecodeError) as info:
        load_arina(master, engine="library", verify_source=False)
    assert info.value.detail == ERROR_MESSAGES[ERR_LZ4_OUTPUT_SIZE]
    assert info.value.path == shard and info.value.fields["frame"] == 6


def test_a_block_running_past_its_chunk_is_named_with_that_chunk_alone(master):
    """The failed frame's chunk is read again on its own: with the next frames' chunks
    after it, a block one byte past its end would seem to fit."""
    source = open_arina(master)
    start, size = int(source.index.frame_offset[6]), int(source.index.frame_nbytes[6])
    shard = source.shard_paths[1]
    with open(shard, "r+b") as f:
        f.seek(start + 12)
        f.write(struct.pack(">I", size - 16 + 1))  # the frame's one block, 1 byte over
    with pytest.raises(ChunkDecodeError) as info:
        load_arina(master, engine="library", verify_source=False)
    assert info.value.detail == ERROR_MESSAGES[ERR_BLOCK_LENGTH]
    assert info.value.path == shard and info.value.fields["frame"] == 6
