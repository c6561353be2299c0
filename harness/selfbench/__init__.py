"""``harness run self``: the harness's own scale as a benchmark kind (docs/self-benchmark.md).

:mod:`.stages` times registration, index query, full render, verify and PostgreSQL
registration on a history of N synthetic records; :mod:`.power` draws the verdict's
false-positive and detection rates; :mod:`.kind` runs them and writes the report
(``evidence_schema/self-report.v1.json``). It sits above ``harness.run``, ``harness.render``
and ``harness.verdict`` because it measures all three.
"""
