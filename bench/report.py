"""Figures and tables for the benchmarks' output."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median: the order statistics
    (k, n + 1 - k) with the largest k whose binomial coverage is still ``confidence``.
    (NaN, NaN) when there are too few values for that coverage (fewer than 6 at 95%)."""
    ordered = sorted(values)
    n = len(ordered)
    k = 0
    for candidate in range(1, n // 2 + 1):
        # P(candidate <= Binomial(n, 1/2) <= n - candidate): the interval's coverage.
        coverage = sum(math.comb(n, i) for i in range(candidate, n - candidate + 1)) / 2**n
        if coverage < confidence:
            break
        k = candidate
    if k == 0:
        return math.nan, math.nan
    return ordered[k - 1], ordered[n - k]


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value * 100:+.1f}%"


def pct_with_ci(values: Sequence[float]) -> str:
    """The median as a percentage, with its 95% confidence interval."""
    low, high = median_ci(values)
    return f"{pct(median(values))} (95% CI {pct(low)} to {pct(high)})"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "") -> str:
    """A plain-text table: first column left-aligned, the figures right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        parts = [str(first).ljust(widths[0])] + [
            str(c).rjust(w) for c, w in zip(rest, widths[1:], strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    out = [title, rule] if title else [rule]
    out += [line(headers), rule, *(line(row) for row in rows), rule]
    return "\n".join(out)


def latency_row(label: str, samples_ms: Sequence[float]) -> list[str]:
    return [
        label,
        str(len(samples_ms)),
        fmt(percentile(samples_ms, 50)),
        fmt(percentile(samples_ms, 95)),
        fmt(percentile(samples_ms, 99)),
        fmt(max(samples_ms) if samples_ms else math.nan),
    ]


LATENCY_HEADERS = ["what (milliseconds)", "n", "p50", "p95", "p99", "max"]


def verdict(value: float, limit: float, *, inclusive: bool = False) -> str:
    """PASS below ``limit`` (or at it, when the target reads "at most")."""
    if math.isnan(value):
        return "n/a "
    return "PASS" if value < limit or (inclusive and value == limit) else "MISS"
