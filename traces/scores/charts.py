"""The distribution of each score config's values in a project, for the project's scores page: an
HTML bar table (a caption, a row per value or bin, the count and a bar whose width is a `pct-N`
class — the Content-Security-Policy allows no inline style). One grouped query for every config."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet

from traces.models import Score, ScoreConfig

BINS = 10


@dataclass
class Bar:
    label: str
    count: int
    share: float = 0.0  # of the config's largest bar, 0-1 (the bar's width)
    of_total: float = 0.0  # of the config's scores, 0-1


@dataclass
class Distribution:
    config: ScoreConfig
    total: int = 0
    mean: float | None = None
    bars: list[Bar] = field(default_factory=list)


def _numeric_bars(config: ScoreConfig, counts: dict[float, int]) -> list[Bar]:
    if config.is_integer_range:
        assert config.min_value is not None and config.max_value is not None
        values = range(int(config.min_value), int(config.max_value) + 1)
        return [Bar(str(v), counts.get(float(v), 0)) for v in values]
    if not counts:
        return []
    lo = config.min_value if config.min_value is not None else min(counts)
    hi = config.max_value if config.max_value is not None else max(counts)
    if hi <= lo:
        return [Bar(f"{lo:g}", sum(counts.values()))]
    width = (hi - lo) / BINS
    bins = [0] * BINS
    for value, n in counts.items():
        bins[min(BINS - 1, max(0, int((value - lo) / width)))] += n
    return [Bar(f"{lo + i * width:.3g}–{lo + (i + 1) * width:.3g}", n) for i, n in enumerate(bins)]


def distributions(configs: Iterable[ScoreConfig], scores: QuerySet[Score]) -> list[Distribution]:
    """Each config's distribution over `scores` (a project's, maybe filtered)."""
    configs = list(configs)
    rows = scores.values("name", "label", "value").annotate(n=Count("id")).order_by()
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    out = []
    for config in configs:
        found = by_name.get(config.name, [])
        d = Distribution(config, total=sum(r["n"] for r in found))
        numbers = [(r["value"], r["n"]) for r in found if r["value"] is not None]
        if numbers and d.total:
            d.mean = sum(v * n for v, n in numbers) / sum(n for _, n in numbers)
        if config.kind == ScoreConfig.Kind.BOOLEAN:
            labels = {r["label"]: r["n"] for r in found}
            d.bars = [Bar("yes", labels.get("true", 0)), Bar("no", labels.get("false", 0))]
        elif config.kind == ScoreConfig.Kind.CATEGORICAL:
            labels = {r["label"]: r["n"] for r in found}
            d.bars = [Bar(c, labels.get(c, 0)) for c in config.categories]
        else:
            counts: dict[float, int] = {}
            for v, n in numbers:
                counts[v] = counts.get(v, 0) + n
            d.bars = _numeric_bars(config, counts)
        top = max((b.count for b in d.bars), default=0)
        for b in d.bars:
            b.share = b.count / top if top else 0.0
            b.of_total = b.count / d.total if d.total else 0.0
        out.append(d)
    return out
