"""The files of an ARINA acquisition as a selection manifest pins them.

``harness manifest make`` records, for each ``data_NNNNNN`` link of a master, the size
and SHA-256 of the file it names and the XXH3-64 of each frame's raw chunk
(:func:`source_shard_entries`). Before measuring, a run hashes each file once and
compares (:func:`harness.run.manifest.check_source_files`): the ARINA format has no
checksum, and a frame index built from an already damaged shard would trust the
damage. When a file differs, :func:`describe_change` finds the first frame whose chunk
changed, so the error names the shard, the link and the frame.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from harness.run.provenance import sha256_file
from quantem.stem4d.errors import QuantemError
from quantem.stem4d.io import arina_layout as layout
from quantem.stem4d.io.arina import ShardLink, open_arina

#: Big-endian uint64, 16 hex digits per frame, in frame order.
CHUNK_HASH_DTYPE = ">u8"


def _frame_chunk_hashes(master: Path) -> tuple[list[ShardLink], list[int], np.ndarray]:
    """The links, frames per shard and every frame's chunk XXH3-64, from the files now
    (a fresh frame index in a folder of its own, never the user's cached one)."""
    from quantem.stem4d.io.arina import read_shard_links

    links = read_shard_links(master)
    with tempfile.TemporaryDirectory(prefix="harness-source-") as index_dir:
        source = open_arina(master, index_dir=index_dir, fresh_index=True)
        hashes = source.index.chunk_xxh3
    assert hashes is not None  # a fresh index records them
    return links, list(source.shard_frames), np.asarray(hashes, dtype=np.uint64)


def source_shard_entries(master: str | os.PathLike) -> list[dict]:
    """One manifest ``source_shards`` entry per link of ``master``, in frame order."""
    links, shard_frames, hashes = _frame_chunk_hashes(Path(master))
    entries, first = [], 0
    for link, n in zip(links, shard_frames, strict=True):
        path = Path(link.path)
        entries.append(
            {
                "link": link.name,
                "size": path.stat().st_size,
                "sha256": sha256_file(path),
                "chunk_xxh3_64": hashes[first : first + n].astype(CHUNK_HASH_DTYPE).tobytes().hex(),
            }
        )
        first += n
    return entries


def describe_change(master: Path, link: ShardLink, entry: dict) -> str:
    """Where the file of ``link`` differs from its manifest ``entry``: the first frame
    whose raw chunk changed, or why no frame can be named."""
    recorded_hex = entry.get("chunk_xxh3_64")
    if recorded_hex is None:
        return "the manifest has no chunk checksums to find the frame by"
    recorded = np.frombuffer(bytes.fromhex(recorded_hex), dtype=CHUNK_HASH_DTYPE)
    try:
        links, shard_frames, hashes = _frame_chunk_hashes(master)
    except QuantemError as exc:
        return f"the acquisition no longer opens: {exc}"
    k = [other.name for other in links].index(link.name)
    first = int(sum(shard_frames[:k]))
    now = hashes[first : first + shard_frames[k]]
    if len(now) != len(recorded):
        return f"it holds {len(now)} frames, the manifest {len(recorded)}"
    changed = np.flatnonzero(now != recorded.astype(np.uint64))
    if not len(changed):
        return "no frame's raw chunk changed (the damage is outside the frames' chunks)"
    j = int(changed[0])
    more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
    return (
        f"the raw chunk of frame {first + j} (frame {j} of the shard){more} changed since "
        "the manifest was made"
    )


def link_label(link: ShardLink) -> str:
    return f"{layout.DATA_GROUP}/{link.name}"
