"""Holm's step-down correction (Holm 1979), which controls the family-wise error rate.

With m p-values sorted ascending p(1) <= ... <= p(m), the adjusted value of p(k) is
``max_{j <= k} min(1, (m - j + 1) * p(j))``; a hypothesis is rejected at alpha when its
adjusted value is <= alpha. That equals the sequential rule (reject while
p(k) <= alpha / (m - k + 1), stop at the first that is not) and is never less
powerful than Bonferroni.
"""

from __future__ import annotations

from collections.abc import Sequence


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given.

    Raises
    ------
    ValueError
        When a p-value is not within [0, 1].
    """
    for p in p_values:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must lie in [0, 1], not {p!r}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
