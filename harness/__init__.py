"""harness: benchmark-and-evidence tooling for quantem, around an immutable results store.

harness imports quantem's public API; quantem never imports harness.
"""

__version__ = "0.1.0"
