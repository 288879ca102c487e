"""The dashboard's numbers for a project, a range of days and filters — read from `DailyRollup` only
(at most one row per day and dimension; DESIGN.md §10), never from events or the range's runs.

`figures(project_id, f)` gives one `DayFigures` per day of the range (days without runs included, as
zeros), the totals over the range, the cost per step model and per pool agent, and the filters' choices.
Percentiles over several days merge the days' histograms (`histograms`), so they are exact to one
bucket (~12%), not averages of daily percentiles.

Other features add sections with `register_section` (the scores work: score averages per config) —
each gets the project and the filter and returns what its template draws, or None.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from traces.dashboard import histograms, scored
from traces.dashboard.filters import DashboardFilter
from traces.models import ALL_AGENTS, DailyRollup

_SUMS = (
    "runs", "failed", "running", "steps", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd",
    "unpriced_tokens", "compactions", "runs_compacted", "lost_instructions", "runs_lost", "pins", "recalls",
    "runs_pinned", "runs_recalled",
)  # fmt: skip


@dataclass
class DayFigures:
    """The sums of some rollup rows (a day, or the whole range) and their merged histograms."""

    day: dt.date | None = None
    runs: int = 0
    failed: int = 0
    running: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_tokens: int = 0
    compactions: int = 0
    runs_compacted: int = 0
    lost_instructions: int = 0
    runs_lost: int = 0
    pins: int = 0
    recalls: int = 0
    runs_pinned: int = 0
    runs_recalled: int = 0
    run_ms: dict[str, int] = field(default_factory=dict)
    step_ms: dict[str, int] = field(default_factory=dict)

    def add(self, row: dict[str, Any]) -> None:
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + (row[name] or 0))
        histograms.merge_into(self.run_ms, row["run_ms"])
        histograms.merge_into(self.step_ms, row["step_ms"])

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def priced_tokens(self) -> int:
        return self.tokens - self.unpriced_tokens

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.runs if self.runs else None

    @property
    def compactions_per_run(self) -> float | None:
        return self.compactions / self.runs if self.runs else None

    @property
    def lost_per_run(self) -> float | None:
        return self.lost_instructions / self.runs if self.runs else None

    def percentile(self, which: str, q: float) -> float | None:
        return histograms.percentile(self.run_ms if which == "run" else self.step_ms, q)

    @property
    def run_p50(self) -> float | None:
        return self.percentile("run", 0.5)

    @property
    def run_p95(self) -> float | None:
        return self.percentile("run", 0.95)

    @property
    def step_p50(self) -> float | None:
        return self.percentile("step", 0.5)

    @property
    def step_p95(self) -> float | None:
        return self.percentile("step", 0.95)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"day": self.day.isoformat() if self.day else None}
        out.update({name: getattr(self, name) for name in _SUMS})
        out["cost_usd"] = round(self.cost_usd, 8)
        for name in (
            "failure_rate",
            "compactions_per_run",
            "lost_per_run",
            "run_p50",
            "run_p95",
            "step_p50",
            "step_p95",
        ):
            out[name] = getattr(self, name)
        out["run_p50_ms"], out["run_p95_ms"] = out.pop("run_p50"), out.pop("run_p95")
        out["step_p50_ms"], out["step_p95_ms"] = out.pop("step_p50"), out.pop("step_p95")
        return out


@dataclass
class Breakdown:
    """Tokens and cost of one step model or one pool agent over the range."""

    name: str
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    unpriced_tokens: int = 0
    runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Figures:
    filter: DashboardFilter
    days: list[DayFigures]
    total: DayFigures
    by_model: list[Breakdown]
    by_agent: list[Breakdown]
    choices: dict[str, list[str]]
    computed_at: dt.datetime | None
    sections: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "filter": self.filter.query(),
            "total": self.total.to_dict(),
            "days": [d.to_dict() for d in self.days],
            "by_model": [b.to_dict() for b in self.by_model],
            "by_agent": [b.to_dict() for b in self.by_agent],
            "computed_at": self.computed_at.isoformat() if self.computed_at else None,
        }


#: Sections other features add to the dashboard: f(project_id, filter) -> {"title", "template", ...}.
SECTIONS: list[Callable[[int, DashboardFilter], dict[str, Any] | None]] = []


def register_section(provider: Callable[[int, DashboardFilter], dict[str, Any] | None]) -> None:
    """Add a section (drawn after the charts with its own `template`); the hook for score averages."""
    if provider not in SECTIONS:
        SECTIONS.append(provider)


_FIELDS = ("day", "run_ms", "step_ms", "by_model", "computed_at", *_SUMS)


def _scope(project_id: int, f: DashboardFilter) -> Q:
    q = Q(project_id=project_id, day__gte=f.first, day__lte=f.last)
    if f.model:
        q &= Q(model=f.model)
    if f.source:
        q &= Q(source=f.source)
    return q


def figures(project_id: int, f: DashboardFilter) -> Figures:
    """The dashboard of a project for `f`: two reads of the rollup table (the rows of the filter, and
    the pool agents' rows for the cost per agent) and one of its dimensions (the choices); filtered by
    score, the matching runs' own rollup rows instead (`scored`)."""
    by_day = {d: DayFigures(day=d) for d in f.days}
    total = DayFigures()
    models: dict[str, Breakdown] = {}
    computed: dt.datetime | None = None
    if f.score:  # the matching runs' own rollup rows, summed per day (`scored`)
        rows, agent_rows = scored.rows(project_id, f)
    else:
        rows = list(
            DailyRollup.objects.filter(_scope(project_id, f), agent=f.agent or ALL_AGENTS)
            .values(*_FIELDS)
            .order_by()
        )
        agent_qs = DailyRollup.objects.filter(_scope(project_id, f)).exclude(agent=ALL_AGENTS)
        if f.agent:
            agent_qs = agent_qs.filter(agent=f.agent)
        agent_rows = list(agent_qs.values("agent", *_SUMS).order_by())
    for row in rows:
        by_day[row["day"]].add(row)
        total.add(row)
        if row["computed_at"] is not None:
            computed = max(computed, row["computed_at"]) if computed else row["computed_at"]
        for model, (steps, p, c, k, cost) in (row["by_model"] or {}).items():
            b = models.setdefault(model, Breakdown(model))
            b.steps, b.prompt_tokens, b.completion_tokens = (
                b.steps + steps,
                b.prompt_tokens + p,
                b.completion_tokens + c,
            )
            b.cached_tokens += k
            if cost is None:
                b.unpriced_tokens += p + c
            else:
                b.cost_usd = (b.cost_usd or 0.0) + cost
    agents: dict[str, Breakdown] = {}
    for row in agent_rows:
        b = agents.setdefault(row["agent"], Breakdown(row["agent"]))
        b.runs += row["runs"]
        b.steps += row["steps"]
        b.prompt_tokens += row["prompt_tokens"]
        b.completion_tokens += row["completion_tokens"]
        b.cached_tokens += row["cached_tokens"]
        b.unpriced_tokens += row["unpriced_tokens"]
        if row["prompt_tokens"] + row["completion_tokens"] > row["unpriced_tokens"] or row["cost_usd"]:
            b.cost_usd = (b.cost_usd or 0.0) + row["cost_usd"]
    dims = (
        DailyRollup.objects.filter(project_id=project_id).values_list("source", "model", "agent").distinct()
    )
    choices: dict[str, set[str]] = {"source": set(), "model": set(), "agent": set()}
    for source, model, agent in dims.order_by():
        choices["source"].add(source)
        if model:
            choices["model"].add(model)
        if agent != ALL_AGENTS:
            choices["agent"].add(agent)
    out = Figures(
        filter=f,
        days=[by_day[d] for d in f.days],
        total=total,
        by_model=sorted(models.values(), key=lambda b: (-(b.cost_usd or 0), -b.prompt_tokens, b.name)),
        by_agent=sorted(agents.values(), key=lambda b: (-(b.cost_usd or 0), b.name)),
        choices={k: sorted(v) for k, v in choices.items()},
        computed_at=computed,
    )
    out.sections = [s for s in (provider(project_id, f) for provider in SECTIONS) if s]
    return out
