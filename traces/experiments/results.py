"""An experiment's figures (per item and overall) and two experiments compared item by item."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from traces.models import Experiment, ExperimentItem

FIGURES = ("tokens", "cost", "compactions", "recalls", "pins", "steps", "errors")


def items_of(exp: Experiment) -> list[ExperimentItem]:
    return list(ExperimentItem.objects.filter(experiment=exp).select_related("item", "experiment"))


def summary(exp: Experiment, items: list[ExperimentItem] | None = None) -> dict[str, Any]:
    """Overall: item counts by state, sums of the figures, each score's mean (numeric, boolean as
    the share of true) or most given value (categorical), the judge errors."""
    items = items_of(exp) if items is None else items
    states: dict[str, int] = {s: 0 for s in ExperimentItem.State.values}
    sums: dict[str, float] = {f: 0 for f in FIGURES}
    priced = False
    scores: dict[str, list[Any]] = {}
    judge_errors = 0
    for it in items:
        states[it.state] = states.get(it.state, 0) + 1
        for f in FIGURES:
            value = it.stats.get(f)
            if isinstance(value, int | float):
                sums[f] += value
                priced = priced or f == "cost"
        for name, value in it.scores.items():
            scores.setdefault(name, []).append(value)
        judge_errors += len(it.judge_errors)
    return {
        "items": len(items),
        "states": states,
        "totals": {f: (round(sums[f], 6) if f == "cost" else int(sums[f])) for f in FIGURES}
        | {"cost": round(sums["cost"], 6) if priced else None},
        "scores": {name: _aggregate(values) for name, values in sorted(scores.items())},
        "judge_errors": judge_errors,
    }


def _aggregate(values: list[Any]) -> dict[str, Any]:
    if all(isinstance(v, bool) for v in values):
        return {"count": len(values), "mean": round(sum(values) / len(values), 3)}
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) == len(values):
        return {"count": len(values), "mean": round(sum(numbers) / len(numbers), 3)}
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v)] = counts.get(str(v), 0) + 1
    return {"count": len(values), "most": max(counts, key=lambda k: counts[k])}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return float(value) if isinstance(value, int | float) else None


@dataclass
class Pair:
    """One dataset item in both experiments (either side may lack it)."""

    key: str
    a: ExperimentItem | None
    b: ExperimentItem | None
    changes: list[str] = field(default_factory=list)
    weight: float = 0.0
    compare_url: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "item_key": self.key,
            "a": self.a.to_dict() if self.a else None,
            "b": self.b.to_dict() if self.b else None,
            "changes": self.changes,
            "compare_url": self.compare_url or None,
        }


def compare(a: Experiment, b: Experiment) -> list[Pair]:
    """The items of two experiments paired by their dataset item's key, the ones that differ in what
    matters first: an error on one side only, then a score change, then a token change (the larger
    first); each pair links to the compare page of its two runs."""
    left = {it.item.key: it for it in items_of(a)}
    right = {it.item.key: it for it in items_of(b)}
    order = list(left) + [k for k in right if k not in left]
    pairs = [_pair(k, left.get(k), right.get(k)) for k in order]
    positions = {k: i for i, k in enumerate(order)}
    pairs.sort(key=lambda p: (-p.weight, positions[p.key]))
    return pairs


def _pair(key: str, x: ExperimentItem | None, y: ExperimentItem | None) -> Pair:
    pair = Pair(key, x, y)
    if x is None or y is None:
        pair.changes.append("only in " + ("B" if x is None else "A"))
        pair.weight = 4000
        return pair
    pair.compare_url = (
        reverse("traces:compare")
        + "?"
        + urlencode(
            {"a": f"{x.experiment.project_id}:{x.run_id}", "b": f"{y.experiment.project_id}:{y.run_id}"}
        )
    )
    failed_x = x.state == ExperimentItem.State.FAILED
    failed_y = y.state == ExperimentItem.State.FAILED
    if failed_x != failed_y:
        pair.changes.append("error in " + ("A" if failed_x else "B"))
        pair.weight += 3000
    for name in sorted(set(x.scores) | set(y.scores)):
        vx, vy = x.scores.get(name), y.scores.get(name)
        if vx != vy:
            nx, ny = _number(vx), _number(vy)
            delta = (ny - nx) if nx is not None and ny is not None else None
            shown = f"{delta:+g}" if delta is not None else f"{vx} → {vy}"
            pair.changes.append(f"{name} {shown}")
            pair.weight += 1000 + (abs(delta) if delta is not None else 1)
    tx, ty = x.tokens, y.tokens
    if tx != ty:
        change = (ty - tx) / max(tx, 1)
        if abs(change) >= 0.1:
            pair.changes.append(f"tokens {ty - tx:+,} ({change:+.0%})")
        pair.weight += min(abs(change), 10)
    return pair
