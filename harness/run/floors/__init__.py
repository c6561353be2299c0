"""Measured floors: what the hardware allows for a path, to set a timing against.

:mod:`.cells` (io-scale's ``--floors`` cells and report section), :mod:`.reads` (cold
read, warm read sweep), :mod:`.cuda` (host-to-device and device-to-device copies),
:mod:`.read_once` (the compute kind's one pass over resident data).
"""
