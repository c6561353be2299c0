"""The immutable evidence history: a folder of content-addressed report records.

Layout and formats are specified in ``docs/history-format.md`` and mirrored by
:mod:`harness.history.layout`. ``records/`` is the evidence; the SQLite index,
the journal witness aside, and every rendered file are derived from it and can be
regenerated with :func:`harness.history.rebuild.rebuild_history`.
"""
