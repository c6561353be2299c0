"""Alembic migrations of a PostgreSQL history's evidence schema (``evidence_records``,
``evidence_journal``, ``evidence_calibrations``, their insert-only and key-checking
triggers and the functions those run), a chain of its own beside the index chain of
``harness/history/migrations`` (issue 15).

A chain of its own, with its own version table (``evidence_alembic_version``), because
the index chain is shared with every folder's SQLite ``index.sqlite``: a revision there
for a server-only table would make every folder's index migrate, and an older harness
refuse it, for nothing. This chain is never run on SQLite, and the index's
``alembic_version`` on a server stays exactly what an older harness expects.

Revision ``evidence_vN``: ``evidence_v1`` is the schema of the first ``init-db``
(records and journal), ``evidence_v2`` adds the calibrations. A database set up by
``init-db`` before this chain existed is recognised (its tables checked) and stamped
with one of them, never re-created (:func:`harness.history.postgres.prepare_evidence_schema`).
Each revision keeps its server rules as ``RULES`` (idempotent statements: CREATE OR
REPLACE FUNCTION, DROP TRIGGER IF EXISTS then CREATE TRIGGER), which ``init-db`` runs
again when a rule has gone missing. A developer adds a revision with ``alembic -c
harness/history/migrations/evidence/alembic.ini revision -m "..." --rev-id evidence_vN``
and names it in :mod:`harness.history.migrate` (``EVIDENCE_REVISIONS``).
"""
