"""The io-scale kind (``harness run io-scale``): how fast an acquisition loads, per format and cache state.

:mod:`.kind` (the order of steps, the report body), :mod:`.config` (``IoScaleConfig``
and every refusal of a bad configuration), :mod:`.steps` (the per-acquisition steps,
each given a ``TrialContext``), :mod:`.conversion` (the disposable QEM, the timed
conversion), :mod:`.qem_reference` (reference headers), :mod:`.fresh_process` and
:mod:`.fresh_child` (the first load in a new process), :mod:`.profile`
(``--profile-reload``).
"""
