"""h5py reads and the loop-based load-option reference, shared by the tests (they live
in the shipped loader contract, so third-party loaders check against the same truth)."""

from __future__ import annotations

from quantem.stem4d.testing.loader_contract import h5py_frames, reference_options

__all__ = ["h5py_frames", "reference_options"]
