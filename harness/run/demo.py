"""``harness run io-scale --demo``: the whole workflow on a small synthetic suite.

Writes two small synthetic ARINA acquisitions (uint8 and uint16) and their
selection manifest into a temporary folder, runs io-scale on the best available
backend, registers the report into the history and prints the summary. Sized to
finish in well under a minute on two cores without a GPU, while still exercising
real eviction when the temporary folder is on a block-backed filesystem.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.run.environment import filesystem_type
from harness.run.manifest import dump_manifest, manifest_entry
from quantem.stem4d.io.synthetic import write_synthetic_arina

#: (id, scan shape, detector shape, dtype, dose) of the demo acquisitions.
DEMO_ACQUISITIONS = (
    ("demo-u8", (24, 24), (96, 96), "uint8", 2000.0),
    ("demo-u16", (24, 24), (96, 96), "uint16", 20000.0),
)
#: Several data shards per acquisition, as real ARINA data has.
DEMO_FRAMES_PER_SHARD = 256
DEMO_REPS = 3
DEMO_STORAGE_ID = "demo-temporary-folder"


@dataclass(frozen=True)
class DemoSuite:
    """A written demo suite: data ROOT and its manifest."""

    root: Path
    manifest: Path


def write_demo_suite(
    folder: Path,
    acquisitions=DEMO_ACQUISITIONS,
    *,
    seed: int = 0,
    frames_per_shard: int = DEMO_FRAMES_PER_SHARD,
) -> DemoSuite:
    """Write the demo acquisitions under ``folder/data`` and ``folder/manifest.json``."""
    root = folder / "data"
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, (name, scan, det, dtype, dose) in enumerate(acquisitions):
        master = write_synthetic_arina(
            root / name,
            name=name,
            scan_shape=scan,
            detector_shape=det,
            dtype=dtype,
            dose=dose,
            seed=seed + i,
            frames_per_shard=frames_per_shard,
        )
        entries.append(manifest_entry(name, master, root, scan, det, dtype))
    manifest = folder / "manifest.json"
    manifest.write_bytes(dump_manifest(entries, description="harness run io-scale --demo suite"))
    return DemoSuite(root=root, manifest=manifest)


def demo_parent() -> Path | None:
    """Where the demo's temporary folder goes: the system default unless that is tmpfs
    (eviction cannot work there), in which case /var/tmp when it is block-backed."""
    default = Path(tempfile.gettempdir())
    if filesystem_type(default) not in ("tmpfs", "ramfs"):
        return None
    var_tmp = Path("/var/tmp")
    if var_tmp.is_dir() and filesystem_type(var_tmp) not in ("tmpfs", "ramfs"):
        return var_tmp
    return None


@contextlib.contextmanager
def demo_folder():
    """A temporary folder for the demo suite, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="harness-demo-", dir=demo_parent()))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
