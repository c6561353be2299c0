"""The ``.qem`` container: a checksummed, randomly accessible rANS format for counts.

The byte layout is specified in ``docs/qem-format.md`` and mirrored in
:mod:`quantem.stem4d.io.qem.format`; :mod:`~quantem.stem4d.io.qem.model` builds the entropy model,
:mod:`~quantem.stem4d.io.qem.rans` holds the numba codec, :mod:`~quantem.stem4d.io.qem.writer` and
:mod:`~quantem.stem4d.io.qem.reader` write and read files.
"""
