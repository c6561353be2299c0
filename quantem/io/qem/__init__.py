"""The ``.qem`` container: a checksummed, randomly accessible rANS format for counts.

The byte layout is specified in ``docs/qem-format.md`` and mirrored in
:mod:`quantem.io.qem.format`; :mod:`~quantem.io.qem.model` builds the entropy model,
:mod:`~quantem.io.qem.rans` holds the numba codec, :mod:`~quantem.io.qem.writer` and
:mod:`~quantem.io.qem.reader` write and read files.
"""
