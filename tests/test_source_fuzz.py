"""Bounded fuzz campaigns for the frame-index sidecar and the HDF5 chunk path.

Like ``test_qem_corruption.py`` for ``.qem``: seeded random damage, each trial checked
against the guarantee (``docs/reliability.md``):

- sidecar: any byte of the JSON or the arrays flipped. A load either returns exactly the
  right frames (the damage is detected, the sidecar rebuilt, with a warning) or raises a
  quantem error; never wrong or reordered frames.
- chunks: any bit of a raw bitshuffle-LZ4 chunk flipped, the shard's mtime kept (bit
  rot). With ``verify_source=True`` every flip is a ``SourceIntegrityError`` naming the
  shard and frame; without it the format cannot tell, and the campaign counts how
  often wrong data would come back silently (the reason for ``verify_source``).

The default tier runs a few dozen trials; ``-m slow`` runs the full campaign.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from quantem.stem4d.errors import FrameIndexWarning, QuantemError, SourceIntegrityError
from quantem.stem4d.io.arina import load_arina, open_arina
from quantem.stem4d.io.synthetic import write_synthetic_arina

SCAN, DET = (3, 4), (12, 10)


@pytest.fixture(scope="module")
def acquisition(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    master = write_synthetic_arina(
        folder / "acq", scan_shape=SCAN, detector_shape=DET, frames_per_shard=5, processes=1
    )
    index_dir = folder / "index"
    with load_arina(master, index_dir=index_dir, apply_mask=False) as acq:
        expected = acq.data.copy()
    return master, index_dir, expected


def _sidecar_campaign(acquisition, trials: int, seed: int) -> dict[str, int]:
    master, index_dir, expected = acquisition
    json_path = next(index_dir.glob("*.json"))
    npz_path = next(index_dir.glob("*.npz"))
    pristine = {p: p.read_bytes() for p in (json_path, npz_path)}
    rng = np.random.default_rng(seed)
    outcomes = {"rebuilt": 0, "unaffected": 0, "error": 0}
    try:
        for _ in range(trials):
            for path, data in pristine.items():
                path.write_bytes(data)
            target = json_path if rng.random() < 0.5 else npz_path
            damaged = bytearray(pristine[target])
            at = int(rng.integers(len(damaged)))
            damaged[at] ^= 1 << int(rng.integers(8))
            target.write_bytes(bytes(damaged))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with load_arina(master, index_dir=index_dir, apply_mask=False) as acq:
                        np.testing.assert_array_equal(acq.data, expected)
                except QuantemError:
                    outcomes["error"] += 1
                    continue
            rebuilt = any(issubclass(w.category, FrameIndexWarning) for w in caught)
            outcomes["rebuilt" if rebuilt else "unaffected"] += 1
    finally:
        for path, data in pristine.items():
            path.write_bytes(data)
    return outcomes


def _chunk_campaign(acquisition, trials: int, seed: int) -> dict[str, int]:
    master, index_dir, expected = acquisition
    source = open_arina(master, index_dir=index_dir)
    rng = np.random.default_rng(seed)
    outcomes = {"refused": 0, "silent_wrong": 0, "decoder_error": 0, "same": 0}
    for _ in range(trials):
        frame = int(rng.integers(source.n_frames))
        shard = Path(source.shard_paths[int(source.index.frame_shard[frame])])
        start = int(source.index.frame_offset[frame])
        at = start + int(rng.integers(int(source.index.frame_nbytes[frame])))
        stat = shard.stat()
        pristine = shard.read_bytes()
        damaged = bytearray(pristine)
        damaged[at] ^= 1 << int(rng.integers(8))
        try:
            shard.write_bytes(bytes(damaged))
            os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as bit rot does
            with pytest.raises(SourceIntegrityError) as info:
                load_arina(master, index_dir=index_dir, verify_source=True)
            assert info.value.fields["frame"] == frame and info.value.path == str(shard)
            with pytest.raises(SourceIntegrityError):  # the default verifies (issue 39)
                load_arina(master, index_dir=index_dir)
            outcomes["refused"] += 1
            try:
                kept = {"apply_mask": False, "verify_source": False}  # what it would be without
                with load_arina(master, index_dir=index_dir, **kept) as acq:
                    same = np.array_equal(acq.data, expected)
                outcomes["same" if same else "silent_wrong"] += 1
            except QuantemError:
                outcomes["decoder_error"] += 1
        finally:
            shard.write_bytes(pristine)
            os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return outcomes


@pytest.mark.parametrize("seed", [0, 1])
def test_sidecar_damage_never_gives_wrong_frames(acquisition, seed):
    outcomes = _sidecar_campaign(acquisition, 20, seed)
    assert outcomes["rebuilt"] > 0, outcomes  # the campaign did hit the checked parts


@pytest.mark.parametrize("seed", [0, 1])
def test_every_chunk_bit_flip_is_refused_with_verify_source(acquisition, seed):
    outcomes = _chunk_campaign(acquisition, 15, seed)
    assert outcomes["refused"] == 15, outcomes


@pytest.mark.slow
def test_full_campaigns(acquisition):
    sidecar = _sidecar_campaign(acquisition, 400, 100)
    chunks = _chunk_campaign(acquisition, 300, 200)
    assert sidecar["rebuilt"] > 100, sidecar
    assert chunks["refused"] == 300, chunks
    assert chunks["silent_wrong"] > 0, chunks  # why verify_source exists
    print("sidecar", sidecar, "chunks", chunks)
