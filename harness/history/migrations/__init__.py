"""Alembic migrations of the history index (``records``, ``trials``, ``summaries``,
``index_meta``), one linear chain for both dialects: the SQLite index of a history
folder and the index tables of a PostgreSQL history (issue 15).

Revision ``index_vN`` is index schema version N (``INDEX_SCHEMA_VERSION`` in
:mod:`harness.history.index_db`, also kept in ``index_meta`` so that an older harness
refuses a newer index). ``index_v2`` is the schema as it was before Alembic: an index
of that version is stamped ``index_v2`` and upgraded in place; a version-1 index has
no migration and is rebuilt from the records. :mod:`harness.history.migrate` runs
them; a developer adds one with ``alembic -c harness/history/migrations/alembic.ini
revision -m "..." --rev-id index_vN`` and bumps ``INDEX_SCHEMA_VERSION``.

The evidence tables of a PostgreSQL history are not in this chain: they have one of
their own in :mod:`harness.history.migrations.evidence` (its own scripts and version
table), so that nothing server-only ever reaches a folder's index.
"""
