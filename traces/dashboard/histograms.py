"""Latency histograms that merge: log-scale buckets of milliseconds, 20 per decade (each ~12% wide).

A day's rollup keeps the histogram of its run durations and of its step latencies, so that the p50 /
p95 of any range of days is the percentile of the summed histograms — exact to one bucket — where
percentiles of days could not be combined. Stored as JSON `{"<bucket>": count}`.

    >>> h = add({}, 250); h = add(h, 300); percentile(h, 0.5) == upper(bucket(250))
    True
"""

from __future__ import annotations

import math
from collections.abc import Iterable

PER_DECADE = 20


def bucket(ms: float) -> int:
    """The bucket of `ms`: 0 below 1 ms, else k with 10^((k-1)/20) <= ms < 10^(k/20)."""
    if ms < 1:
        return 0
    return int(math.floor(PER_DECADE * math.log10(ms))) + 1


def upper(k: int) -> float:
    """The upper bound of bucket `k` in ms (what a percentile in it reads as)."""
    return 1.0 if k <= 0 else 10 ** (k / PER_DECADE)


def add(hist: dict[str, int], ms: float, count: int = 1) -> dict[str, int]:
    key = str(bucket(ms))
    hist[key] = hist.get(key, 0) + count
    return hist


def merge(hists: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for h in hists:
        for k, n in (h or {}).items():
            out[k] = out.get(k, 0) + int(n)
    return out


def merge_into(into: dict[str, int], hist: dict[str, int] | None) -> None:
    """Add `hist` to `into`, in place."""
    for k, n in (hist or {}).items():
        into[k] = into.get(k, 0) + int(n)


def percentile(hist: dict[str, int], q: float) -> float | None:
    """The `q` quantile (0..1) of a histogram, as its bucket's upper bound; None when empty."""
    items = sorted((int(k), int(n)) for k, n in (hist or {}).items() if int(n) > 0)
    total = sum(n for _, n in items)
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for k, n in items:
        seen += n
        if seen >= rank:
            return upper(k)
    return upper(items[-1][0])


def count(hist: dict[str, int]) -> int:
    return sum(int(n) for n in (hist or {}).values())
