"""The benchmark runner: the frame every kind runs in, the kinds, and the rechecks.

Packages, one concept each (docs/architecture.md has the map; the ``run-layers``
import-linter contract in pyproject.toml their order): :mod:`~harness.run.io_scale`
and :mod:`~harness.run.compute` (the two kinds), :mod:`~harness.run.floors` (measured
floors), :mod:`~harness.run.paired` (paired rechecks: the baseline's code and this
one's, measured alternately) and :mod:`~harness.run.recheck` (``harness recheck``).
Beside them, the frame: :mod:`~harness.run.runner` (provenance, manifest, output-dir
claim, baseline, workspace, report) and its parts, among them
:mod:`~harness.run.backends`, :mod:`~harness.run.loop`, :mod:`~harness.run.trials`,
:mod:`~harness.run.reporting`, :mod:`~harness.run.workspace`,
:mod:`~harness.run.provenance`, :mod:`~harness.run.contention`. The worker of a paired
recheck is :mod:`~harness.run.paired_worker`: it runs inside the baseline's code tree,
so its module path is a contract with older trees and it stays where it is.
"""
