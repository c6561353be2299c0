"""The io-scale runner: cold and cached load trials with verified cache state.

Modules, one concept each: :mod:`~harness.run.cache` (eviction and residency),
:mod:`~harness.run.proc_io` (physical IO counters), :mod:`~harness.run.timers`
(wall timers with a GPU barrier), :mod:`~harness.run.provenance` (what code ran),
:mod:`~harness.run.environment` (where it ran), :mod:`~harness.run.manifest` (what data),
:mod:`~harness.run.trials` (one timed load and its label), :mod:`~harness.run.summary`
(statistics), :mod:`~harness.run.io_scale` (orchestration), :mod:`~harness.run.demo`.
"""
