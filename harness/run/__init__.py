"""The benchmark runner: the frame every kind runs in, and the io-scale and compute kinds.

One module, one job (docs/architecture.md has the map):
:mod:`~harness.run.runner` (the frame: provenance, manifest, output-dir claim,
baseline, workspace, report), :mod:`~harness.run.io_scale` (the io-scale kind),
:mod:`~harness.run.io_scale_config` (its configuration and checks) and
:mod:`~harness.run.io_steps` (its per-acquisition steps), :mod:`~harness.run.compute`
(the compute kind; ``compute_*``: its configuration, outputs, workload registry and one
module of stages per workload), :mod:`~harness.run.recheck` (``harness recheck``;
``recheck_guards``, ``recheck_record``), :mod:`~harness.run.paired` (paired rechecks;
``paired_code``, ``paired_trials``, ``paired_worker``; whether a recheck pairs:
:mod:`~harness.run.pairing`), :mod:`~harness.run.loop`
(interleaved rounds of cells), :mod:`~harness.run.backends` (what a backend means),
:mod:`~harness.run.checks` (failure log, product checks), :mod:`~harness.run.conversion`
(the disposable QEM, the timed conversion, reference headers),
:mod:`~harness.run.reporting` (judging and writing the report),
:mod:`~harness.run.workspace` (temporary area, interrupt latch, progress),
:mod:`~harness.run.memory`; below them :mod:`~harness.run.trials` (one timed load and
its label), :mod:`~harness.run.cache`, :mod:`~harness.run.proc_io`,
:mod:`~harness.run.timers`, :mod:`~harness.run.provenance`,
:mod:`~harness.run.environment`, :mod:`~harness.run.manifest`,
:mod:`~harness.run.host_lock`, :mod:`~harness.run.contention` (with
:mod:`~harness.run.contention_gpu`), and
:mod:`~harness.run.summary`, :mod:`~harness.run.demo`.
"""
