"""Read helpers for the dashboard pages: the filter choices and the view models the templates draw.

Everything here reads projections (`Run`, `Turn`, `Step`, `ContextDecision`, `Pin`, `PrimitiveEvent`,
`Upload`); nothing parses raw event JSON. Each builder issues a fixed number of queries whatever the
size of the run, so pages stay bounded (the view tests pin the counts).

The fidelity map and pin lanes are laid out by `traces.runs.charts`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from django.db.models import Q, QuerySet

from runtime.facts import is_pinned_row, primitive_outcome, rendered_pins
from traces.core import prepared
from traces.core.runcache import by_run_state
from traces.models import (
    ContextDecision,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    ScoreConfig,
    Turn,
)
from traces.runs.charts import outcome_class, outcome_label


@dataclass
class FilterChoices:
    projects: list[Project]
    models: list[str]
    agents: list[str]
    tags: list[str] = field(default_factory=list)
    score_names: list[str] = field(default_factory=list)  # the sort's choices (issue 36)


def filter_choices(runs: QuerySet[Run], projects_qs: QuerySet[Project]) -> FilterChoices:
    """Values offered by the filter selects for these runs (those of `projects_qs`, the caller's) and
    projects: the projects (one query), the tags (one bounded query: a run's tags change with its labels,
    which leave its `updated_at` alone) and the models, agents and score names (`score_names`), kept
    while the projects' runs and score configs are unchanged (`_choices_stamp`: one query)."""
    projects = list(projects_qs.select_related("team").order_by("team__name", "slug"))
    # The tags the form suggests: those of the newest runs that have any (a bounded read, not a scan).
    tags: set[str] = set()
    for label_tags, trace_tags in (
        runs.exclude(tags=[], label_tags__isnull=True)
        .order_by("-started_at")
        .values_list("label_tags", "tags")[:500]
    ):
        tags.update(label_tags if label_tags is not None else trace_tags or [])
    ids = sorted(p.pk for p in projects)
    key = ""
    if ids:
        text = f"{ids}:{_choices_stamp(ids)}"
        key = f"arcana:choices:{CHOICES_CACHE_VERSION}:{hashlib.sha256(text.encode()).hexdigest()}"
        cached = cache.get(key)
        if isinstance(cached, tuple) and len(cached) == 3:
            models, agents, names = cached
            return FilterChoices(projects, models, agents, sorted(tags)[:200], names)
    models = list(runs.exclude(model="").order_by("model").values_list("model", flat=True).distinct()[:100])
    agents = list(
        Turn.objects.filter(run__in=runs)
        .exclude(agent="")
        .order_by("agent")
        .values_list("agent", flat=True)
        .distinct()[:100]
    )
    names = sorted(set(ScoreConfig.objects.filter(project_id__in=ids).values_list("name", flat=True)))
    if key:
        cache.set(key, (models, agents, names), CHOICES_CACHE_SECONDS)
    return FilterChoices(projects, models, agents, sorted(tags)[:200], names)


#: Bumped when the kept choices' shape changes.
CHOICES_CACHE_VERSION = 1
CHOICES_CACHE_SECONDS = 3600


def _choices_stamp(project_ids: list[int]) -> tuple[Any, ...]:
    """What moves whenever the projects' models, agents or score names may have changed: their runs'
    count, newest `updated_at` (ingestion and `rebuild_projections` set it on every change) and highest
    id, and their score configs' count and highest id. One query, its SQL written once per length."""
    marks = ", ".join(["%s"] * len(project_ids))
    sql = (
        f'SELECT (SELECT COUNT(*) FROM "traces_run" WHERE "project_id" IN ({marks})),'  # noqa: S608
        f' (SELECT MAX("updated_at") FROM "traces_run" WHERE "project_id" IN ({marks})),'
        f' (SELECT MAX("id") FROM "traces_run" WHERE "project_id" IN ({marks})),'
        f' (SELECT COUNT(*) FROM "traces_scoreconfig" WHERE "project_id" IN ({marks})),'
        f' (SELECT MAX("id") FROM "traces_scoreconfig" WHERE "project_id" IN ({marks}))'
    )
    with prepared.cursor() as cursor:
        cursor.execute(sql, project_ids * 5)
        row = cursor.fetchone()
    return tuple(str(v) for v in row)


def is_pin_decision(d: Mapping[str, Any]) -> bool:
    return is_pinned_row(d)


def primitive_summary(ev: PrimitiveEvent) -> str:
    """The call's one line, in the wording the CLI prints too (`runtime.facts.primitive_outcome`)."""
    return primitive_outcome(ev.primitive, ev.args, ev.result).line


@dataclass(slots=True)
class DecisionRow:
    """One row of a step's decision table, with its cells pre-formatted (tables run to hundreds of
    rows per step, and plain attribute lookups keep the template fast)."""

    d: Mapping[str, Any]
    cls: str
    is_pin: bool
    pin: Pin | None
    changed: str  # "", "new", or "was <outcome>" compared with the previous step
    index: Any = None
    role: str = ""
    outcome: str = ""
    fidelity: str = ""
    tokens_before: Any = None  # the message's token counts as written, None when missing
    tokens_after: Any = None
    relevance: str = ""
    reason: str = ""

    @property
    def tokens(self) -> str:
        """ "before→after", "?" for a missing count."""
        before, after = self.tokens_before, self.tokens_after
        return f"{'?' if before is None else before}→{'?' if after is None else after}"


@dataclass
class StepChanges:
    changed: list[tuple[Mapping[str, Any], str, str]]  # (decision, before, after)
    new_messages: int
    gone_messages: int
    pins_added: list[str]
    pins_gone: list[str]
    previous_label: str
    total_changed: int = 0  # len(changed) before the page kept only the first ones it lists

    @property
    def empty(self) -> bool:
        return not (
            self.changed or self.new_messages or self.gone_messages or self.pins_added or self.pins_gone
        )


def _decision_key(
    d: Mapping[str, Any], pin_k: int, rendered: Sequence[Pin], is_pin: bool | None = None
) -> tuple[int, Any]:
    if is_pin_decision(d) if is_pin is None else is_pin:
        pin_id = d.get("pin_id") or (rendered[pin_k - 1].pin_id if pin_k <= len(rendered) else f"#{pin_k}")
        return (1, pin_id)
    return (0, d.get("index"))


def keyed_decisions(
    mds: Sequence[Mapping[str, Any]], pins: Sequence[Pin] = (), turn: int = 0
) -> dict[tuple[int, Any], Mapping[str, Any]]:
    """Decisions keyed by message index, or by pin id for pinned blocks (resolved as in the map)."""
    rendered = rendered_pins(pins, turn) if pins else []
    out: dict[tuple[int, Any], Mapping[str, Any]] = {}
    pin_k = 0
    for d in mds or []:
        is_pin = is_pin_decision(d)
        if is_pin:
            pin_k += 1
        out[_decision_key(d, pin_k, rendered, is_pin)] = d
    return out


def decision_rows(
    mds: Sequence[Mapping[str, Any]],
    previous: Sequence[Mapping[str, Any]] | None,
    pins: Sequence[Pin],
    turn: int,
) -> list[DecisionRow]:
    """The decision table of one step, with [PIN] rows resolved to their pin and changes flagged.

    `pins` are all the agent's pins. Ingestion stores pinned rows at their real index with their pin
    (`runtime.facts.pinned_blocks`); rows stored before that resolve through `rendered_pins`."""
    prev = keyed_decisions(previous, pins, turn - 1) if previous is not None else None
    pins_by_id = {p.pin_id: p for p in pins}
    active_pins = rendered_pins(pins, turn)
    rows = []
    pin_k = 0
    for d in mds or []:
        is_pin = is_pin_decision(d)
        if is_pin:
            pin_k += 1
        key = _decision_key(d, pin_k, active_pins, is_pin)
        pin = pins_by_id.get(key[1]) if is_pin else None
        cls = outcome_class(d)
        changed = ""
        if prev is not None:
            before = prev.get(key)
            if before is None:
                changed = "new"
            elif outcome_class(before) != cls:
                changed = f"was {outcome_label(before)}"
        rel = d.get("relevance_score")
        before, after = d.get("token_count_before"), d.get("token_count_after")
        rows.append(
            DecisionRow(
                d=d,
                cls=cls,
                is_pin=is_pin,
                pin=pin,
                changed=changed,
                index=d.get("index"),
                role=d.get("role") or "?",
                outcome=d.get("outcome") or "?",
                fidelity="L0" if is_pin else (d.get("fidelity") or cls),
                tokens_before=before,
                tokens_after=after,
                relevance=f"{rel:.2f}" if isinstance(rel, int | float) else "—",
                reason=(d.get("reason") or "—") + _grown_note(cls, before, after),
            )
        )
    return rows


#: Said of a row sent at a lower fidelity whose token count went up.
GROWN_NOTE = (
    " — marked compressed, yet its tokens grew: the stub or marker of this level costs more than the "
    "short message it stands for"
)


def _grown_note(cls: str, before: Any, after: Any) -> str:
    """An explanation for a row marked compressed (L1–L3) whose tokens grew, else ""."""
    grew = isinstance(before, int | float) and isinstance(after, int | float) and after > before
    return GROWN_NOTE if grew and cls in ("L1", "L2", "L3") else ""


def step_changes(
    mds: Sequence[Mapping[str, Any]],
    previous: Sequence[Mapping[str, Any]] | None,
    previous_label: str,
    pins: Sequence[Pin] = (),
    turn: int = 0,
    previous_turn: int = 0,
) -> StepChanges | None:
    """What changed for the model between the previous step and this one (None for the first step)."""
    if previous is None:
        return None
    now, before = keyed_decisions(mds, pins, turn), keyed_decisions(previous, pins, previous_turn)
    changed = []
    for key, d in now.items():
        old = before.get(key)
        if key[0] == 0 and old is not None and outcome_class(old) != outcome_class(d):
            changed.append((d, outcome_label(old), outcome_label(d)))
    new_messages = sum(1 for k in now if k[0] == 0 and k not in before)
    gone_messages = sum(1 for k in before if k[0] == 0 and k not in now)
    pins_now = {k[1] for k in now if k[0] == 1}
    pins_before = {k[1] for k in before if k[0] == 1}
    return StepChanges(
        changed=changed,
        new_messages=new_messages,
        gone_messages=gone_messages,
        pins_added=sorted(str(p) for p in pins_now - pins_before),
        pins_gone=sorted(str(p) for p in pins_before - pins_now),
        previous_label=previous_label,
        total_changed=len(changed),
    )


#: At most this many compactions are listed on the run page (the fidelity map shows every step).
COMPACTIONS_SHOWN = 100


@dataclass(frozen=True)
class ContextChanges:
    """Where a run's context lost or condensed content, from its decisions' reports (reconstructed
    ones carry them: `runtime.reconstruct`): each compaction with its step, and each instruction no
    longer seen, at the first step that no longer saw it."""

    compactions: list[dict[str, Any]]
    lost: list[dict[str, Any]]
    more: bool


def context_changes(run: Run, agent: str) -> ContextChanges:
    """One query, bounded: the decisions of `agent` in `run` whose report names a compaction or a lost
    instruction; none while the run has not changed since it was asked (`traces.core.runcache`)."""
    return by_run_state("changes:1", run, (agent,), lambda: _context_changes(run, agent))


def _context_changes(run: Run, agent: str) -> ContextChanges:
    rows = list(
        ContextDecision.objects.filter(run=run, agent=agent)
        .filter(Q(report__has_key="compaction") | Q(report__has_key="lost_instructions"))
        .order_by("turn_number", "step_number")
        .values_list("turn_number", "step_number", "report")[: COMPACTIONS_SHOWN + 1]
    )
    compactions: list[dict[str, Any]] = []
    lost: list[dict[str, Any]] = []
    for turn, step, report in rows[:COMPACTIONS_SHOWN]:
        report = report if isinstance(report, dict) else {}
        c = report.get("compaction")
        if isinstance(c, dict):
            compactions.append(
                {
                    "turn": turn,
                    "step": step,
                    "dropped": len(c.get("dropped") or []),
                    "shortened": len(c.get("shortened") or []),
                    "summarized": len(c.get("summarized") or []),
                    "tokens_before": c.get("tokens_before"),
                    "tokens_after": c.get("tokens_after"),
                    "trigger": c.get("trigger") or "",
                    "system_prompt_changed": bool(c.get("system_prompt_changed")),
                }
            )
        for item in report.get("lost_instructions") or []:
            if isinstance(item, dict):
                lost.append(
                    {
                        "turn": turn,
                        "step": step,
                        "text": item.get("text") or "",
                        "source": item.get("source") or "",
                    }
                )
    return ContextChanges(compactions, lost, len(rows) > COMPACTIONS_SHOWN)
