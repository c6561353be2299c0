"""CPU decode speed: .qem (numba, all cores) vs the CPU HDF5 load of the same data.

Writes one synthetic ARINA acquisition (bitshuffle-LZ4 HDF5), converts it to .qem,
checks both decode to the same array, then times full loads back to back, alternating
formats, with the page cache warm (both files are read once first) and numba compiled.
The HDF5 side is ``quantem.stem4d.io.arina.load_arina`` (the CPU backend) when it exists,
otherwise h5py + hdf5plugin (said in the output). Usage::

    python benchmarks/qem_decode.py [--scan 64 64] [--det 192 192] [--dose 40000] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import git_revision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.reader import load_qem
from quantem.stem4d.io.qem.writer import save_qem
from quantem.stem4d.io.synthetic import SyntheticModel, make_frames, write_synthetic_arina


def hdf5_loader():
    """The CPU HDF5 load function and its label."""
    try:
        from quantem.stem4d.io.arina import load_arina
    except ModuleNotFoundError:
        load_arina = None
    if load_arina is not None:
        return (lambda path: load_arina(path).data), "quantem.stem4d.io.arina.load_arina (cpu)"

    import h5py
    import hdf5plugin  # noqa: F401  (registers the bitshuffle filter)

    def load(path: Path) -> np.ndarray:
        with h5py.File(path, "r") as master:
            group = master["/entry/data"]
            names = sorted(k for k in group if k.startswith("data_"))
            parts = [group[name][()] for name in names]
        return np.concatenate(parts)

    return load, "h5py + hdf5plugin (quantem.stem4d.io.arina not available)"


def read_file(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(64 << 20):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", type=int, nargs=2, default=(64, 64))
    parser.add_argument("--det", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--dose", type=float, default=40000.0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workdir", default=None, help="where to write the files (temporary)")
    args = parser.parse_args(argv)
    scan, det = tuple(args.scan), tuple(args.det)
    import numba

    revision = git_revision()
    load_hdf5, hdf5_label = hdf5_loader()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        tmp = Path(tmp)
        master = write_synthetic_arina(tmp, scan_shape=scan, detector_shape=det, dose=args.dose)
        qem_path = tmp / "synthetic.qem"
        try:
            from quantem.stem4d.io.arina import open_arina  # noqa: F401

            save_qem(master, qem_path)
            source = "converted from the HDF5 file"
        except ModuleNotFoundError:
            n = scan[0] * scan[1]
            frames = make_frames(0, n, scan_shape=scan, detector_shape=det, dose=args.dose)
            mask = SyntheticModel(scan, det, "uint16", args.dose).pixel_mask
            save_qem(
                Acquisition(frames.reshape(*scan, *det), {"pixel_mask": mask}, mask == 0, "cpu"),
                qem_path,
            )
            source = "encoded from make_frames (the same counts the HDF5 file holds)"
        hdf5_bytes = sum(p.stat().st_size for p in tmp.glob("*.h5"))
        qem_bytes = qem_path.stat().st_size
        for path in [*tmp.glob("*.h5"), qem_path]:
            read_file(path)  # warm the page cache
        reference = np.asarray(load_hdf5(master)).reshape(-1, *det)
        decoded = load_qem(qem_path).data.reshape(-1, *det)
        assert np.array_equal(reference, decoded), "formats disagree"
        nbytes = reference.size * 2
        del reference, decoded
        times: dict[str, list[float]] = {"hdf5": [], "qem": [], "qem_noverify": []}
        cpu: dict[str, list[float]] = {name: [] for name in times}
        for _ in range(args.reps):
            for name in times:
                started, cpu_started = time.perf_counter(), time.process_time()
                if name == "hdf5":
                    data = load_hdf5(master)
                else:
                    data = load_qem(qem_path, verify=name == "qem").data
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - cpu_started)
                del data
    print(
        f"rev {revision}; shape {scan + det} uint16, dose {args.dose:g} counts/frame; "
        f"{os.cpu_count()} cores, numba threads {numba.get_num_threads()}; page cache warm"
    )
    print(f"HDF5: {hdf5_label}; {hdf5_bytes} bytes.  .qem: {source}; {qem_bytes} bytes")
    print()
    print("| load | median s | min s | decoded GB/s (median) | CPU s (median, all threads) |")
    print("|---|---:|---:|---:|---:|")
    labels = {
        "hdf5": "HDF5 bitshuffle-LZ4, CPU",
        "qem": ".qem, CPU numba, checksums verified",
        "qem_noverify": ".qem, CPU numba, verify=False",
    }
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {labels[name]} | {median:.3f} | {min(values):.3f} | {nbytes / median / 1e9:.3f} "
            f"| {statistics.median(cpu[name]):.3f} |"
        )
    ratio = statistics.median(times["hdf5"]) / statistics.median(times["qem"])
    print()
    print(f".qem (verified) is {ratio:.2f}x the speed of the HDF5 load (>1 = faster)")
    print(f"load average during the run: {os.getloadavg()[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
