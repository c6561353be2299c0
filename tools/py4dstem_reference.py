"""Frozen py4DSTEM reference outputs for the SrTiO3 fixtures (independent implementation).

py4DSTEM 0.14 needs numpy < 2, which the project's environment does not allow, so it runs
in its own virtual environment::

    python -m venv /tmp/p4venv && /tmp/p4venv/bin/pip install py4DSTEM==0.14.18
    PYTHONPATH=$PWD python tools/py4dstem_reference.py /tmp/p4venv/bin/python

The project side loads the fixtures with quantem (so both see the same counts), hands
them to the worker (this script with ``--worker``, run by the other interpreter), and
writes ``tests/data/srtio3/py4dstem_reference.npz`` and ``.json`` (fitted values and the
versions of every package on both sides). ``tests/test_compute_py4dstem.py`` compares
quantem against them with the tolerances documented in ``docs/compute.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "srtio3"


def worker(inputs: str, output: str) -> None:
    import importlib.metadata as md

    import py4DSTEM

    data = np.load(inputs)
    truth = json.loads((FIXTURES / "srtio3_truth.json").read_text())
    out: dict = {}
    fitted: dict = {}
    for name in ("focus", "defocus"):
        info = truth["datasets"][name]
        cube = py4DSTEM.DataCube(data=data[name].astype(np.float32))
        cube.calibration.set_R_pixel_size(info["scan_step_angstrom"])
        cube.calibration.set_R_pixel_units("A")
        cube.calibration.set_Q_pixel_size(info["mrad_per_pixel"])
        cube.calibration.set_Q_pixel_units("mrad")
        if name == "focus":
            dpc = py4DSTEM.process.phase.DPC(
                datacube=cube, energy=truth["energy_ev"], verbose=False
            )
            dpc.preprocess(plot_center_of_mass=False, plot_rotation=False, fit_function="constant")
            dpc.reconstruct(progress_bar=False, gaussian_filter=False, butterworth_filter=False)
            out["dpc_phase"] = np.asarray(dpc.object_phase)
            fitted["dpc_rotation_deg"] = float(np.degrees(dpc._rotation_best_rad))
            fitted["dpc_transpose"] = bool(dpc._rotation_best_transpose)
        else:
            par = py4DSTEM.process.phase.Parallax(
                datacube=cube, energy=truth["energy_ev"], verbose=False, object_padding_px=(8, 8)
            )
            par.preprocess(plot_average_bf=False, edge_blend=4.0, threshold_intensity=0.8)
            par.reconstruct(
                progress_bar=False,
                plot_aligned_bf=False,
                plot_convergence=False,
                max_alignment_bin=2,
                num_iter_at_min_bin=4,
                cross_correlation_upsample_factor=16,
            )
            par.aberration_fit(plot_CTF_comparison=False, plot_BF_shifts_comparison=False)
            out["parallax_shifts_px"] = np.asarray(par._xy_shifts)
            out["parallax_probe_angles_rad"] = np.asarray(par._probe_angles)
            fitted["parallax_C1_angstrom"] = float(par.aberrations_C1)
            fitted["parallax_C12a_angstrom"] = float(par.aberrations_C12a)
            fitted["parallax_C12b_angstrom"] = float(par.aberrations_C12b)
            fitted["parallax_rotation_deg"] = float(np.degrees(par.rotation_Q_to_R_rads))
            fitted["parallax_transpose"] = bool(par.transpose)
    versions = {"python": sys.version.split()[0]}
    for package in ("py4DSTEM", "numpy", "scipy"):
        versions[package] = md.version(package)
    np.savez_compressed(output, **out)
    Path(output).with_suffix(".json").write_text(
        json.dumps({"fitted": fitted, "versions": versions})
    )


def main(venv_python: str) -> None:
    import importlib.metadata as md

    from quantem.stem4d.io import load

    truth = json.loads((FIXTURES / "srtio3_truth.json").read_text())
    arrays = {}
    for name in ("focus", "defocus"):
        with load(FIXTURES / truth["datasets"][name]["files"]["high"]) as acq:
            arrays[name] = np.array(acq.data)
    with tempfile.TemporaryDirectory() as tmp:
        inputs, output = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(inputs, **arrays)
        subprocess.run([venv_python, __file__, "--worker", str(inputs), str(output)], check=True)
        result = np.load(output)
        np.savez_compressed(FIXTURES / "py4dstem_reference.npz", **{k: result[k] for k in result})
        meta = json.loads(output.with_suffix(".json").read_text())
    meta["inputs"] = {name: truth["datasets"][name]["files"]["high"] for name in arrays}
    meta["project_versions"] = {
        "quantem-harness": md.version("quantem-harness"),
        "numpy": np.__version__,
    }
    (FIXTURES / "py4dstem_reference.json").write_text(
        json.dumps(meta, indent=2, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/p4venv/bin/python")
