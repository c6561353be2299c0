"""``harness recheck``: a stored report's flagged cells measured again, as a new record.

:mod:`.measure` (the order of work and the measurement, alone or paired),
:mod:`.guards` (the refusals before anything is measured), :mod:`.record` (the new
record).
"""
