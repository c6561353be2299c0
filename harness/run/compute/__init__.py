"""The compute kind (``harness run compute WORKLOAD``): stage timings of a detector product.

:mod:`.kind` (rounds, summaries, report body), :mod:`.config` (``ComputeConfig`` and
its checks), :mod:`.outputs` (output hashes, determinism, the output-change verdict),
:mod:`.workloads` (the ``WORKLOADS`` registry and the shared load and prepare stages),
one module of stages per workload (:mod:`.virtual`, :mod:`.dpc`, :mod:`.parallax`,
:mod:`.ssb`), :mod:`.products` and :mod:`.validate` (what the stages' outputs are
checked against).
"""
