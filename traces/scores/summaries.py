"""What the pages show of a run's scores: a short summary per score name (the runs list's column), and
every score of a run or of one turn (the run and turn pages). One grouped query per page."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Avg, Count, QuerySet

from traces.models import Project, Run, Score, ScoreConfig


@dataclass
class Summary:
    """One score name over a run's scores: `mean` of the numbers (booleans: the share of true), or
    the most given category; `n` scores in all."""

    name: str
    n: int = 0
    mean: float | None = None
    labels: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        if self.labels.keys() <= {"true", "false"} and self.labels:
            return f"{self.labels.get('true', 0)}/{self.n} yes"
        if self.labels:
            top = max(self.labels.items(), key=lambda kv: (kv[1], kv[0]))[0]
            return top if len(self.labels) == 1 else f"{top} ({self.labels[top]}/{self.n})"
        return "" if self.mean is None else f"{self.mean:.3g}"


def summaries(pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[Summary]]:
    """Per (project id, run id): its scores summed up by name, sorted by name."""
    pairs = set(pairs)
    if not pairs:
        return {}
    projects = {p for p, _ in pairs}
    run_ids = {r for _, r in pairs}
    rows = (
        Score.objects.filter(project_id__in=projects, run_id__in=run_ids)
        .values("project_id", "run_id", "name", "label")
        .annotate(n=Count("id"), mean=Avg("value"))
        .order_by()
    )
    out: dict[tuple[int, str], dict[str, Summary]] = {}
    for row in rows:
        key = (row["project_id"], row["run_id"])
        if key not in pairs:
            continue
        s = out.setdefault(key, {}).setdefault(row["name"], Summary(row["name"]))
        s.n += row["n"]
        if row["label"]:
            s.labels[row["label"]] = s.labels.get(row["label"], 0) + row["n"]
        elif row["mean"] is not None:
            s.mean = row["mean"]
    return {k: sorted(v.values(), key=lambda s: s.name) for k, v in out.items()}


def names(projects: QuerySet[Project]) -> list[str]:
    """The score config names of these projects (the runs list's sort choices), sorted."""
    return sorted(set(ScoreConfig.objects.filter(project__in=projects).values_list("name", flat=True)))


def attach(runs: list[Run]) -> None:
    """Give each run of a page `score_summaries` (one query for the page)."""
    found = summaries((r.project_id, r.run_id) for r in runs)
    for r in runs:
        r.score_summaries = found.get((r.project_id, r.run_id), [])  # type: ignore[attr-defined]


def run_scores(run: Run, **where: Any) -> list[Score]:
    """Every score of `run` (or of its part `where` names: `agent=…, turn_number=…`), oldest first."""
    return list(
        Score.objects.filter(project_id=run.project_id, run_id=run.run_id, **where)
        .select_related("config")
        .order_by("created_at", "id")
    )
