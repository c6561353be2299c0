"""Error types of harness; the CLI turns them into exit codes (see ``harness.cli``)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1  # execution, correctness or source-stability failure
EXIT_REVIEW = 2  # slowdown to review, or incomparable baseline
EXIT_USAGE = 64  # command-line usage error (EX_USAGE)


class HarnessError(Exception):
    """Base class of harness errors; ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_FAILURE


class UsageError(HarnessError, ValueError):
    """The command line or its arguments are wrong."""

    exit_code = EXIT_USAGE


class ManifestError(HarnessError, ValueError):
    """A selection manifest is invalid or does not match the data."""


class ReportValidationError(HarnessError, ValueError):
    """A report does not validate against its schema."""


class HistoryError(HarnessError):
    """A history folder is inconsistent or cannot be written."""


class SourceStabilityError(HarnessError):
    """The measured source code changed during a run."""


class IncomparableError(HarnessError):
    """Baseline and candidate cannot be compared."""

    exit_code = EXIT_REVIEW


class NativeError(HarnessError):
    """The native reader (native/, qem-native-load) cannot be built, found or run."""
