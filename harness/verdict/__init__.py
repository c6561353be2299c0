"""Per-cell verdicts that say how sure they are (issue 11; docs/verdicts.md).

One module per job:

- :mod:`harness.verdict.holm`: Holm's step-down correction over the cells of a comparison.
- :mod:`harness.verdict.resampling`: seeded bootstrap of the ratio of medians.
- :mod:`harness.verdict.calibration`: the calibrated null of a host (A/A ratio
  distributions, noise floor, minimum detectable change, false-positive rates).
- :mod:`harness.verdict.calibration_report`: the calibration report document, its
  schema and its place in a history.
- :mod:`harness.verdict.cells`: the five words (``slower``, ``possibly_slower``,
  ``faster``, ``unchanged``, ``undecided``) decided per cell.
- :mod:`harness.verdict.present`: text (rich), Markdown and JSON renderings.
- :mod:`harness.verdict.changes`: change points over a history (E-Divisive means).
"""

#: How many batches of K rounds a recheck may take before it stops undecided
#: (``--recheck-looks``; docs/verdicts.md, "Sequential").
DEFAULT_RECHECK_LOOKS = 8
