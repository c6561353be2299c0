"""Conformance suites for code that plugs into ``quantem.stem4d`` (test-only: needs pytest).

:mod:`.loader_contract` holds the tests every loader passes; a third-party loader
subclasses :class:`~quantem.stem4d.testing.loader_contract.LoaderContract` in its own
test suite. Nothing in the library imports this package.
"""
