"""The run and turn pages' contexts, shared by the team's pages (`traces.runs.views`), shared pages
(`traces.collab.views`) and the conversation page (`traces.conversations.views`): what each page
shows of a run, read from its projections. The caller has checked access (`traces.core.access`)."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlencode

from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest

from runtime import facts
from traces.collab import notes
from traces.models import (
    PrimitiveEvent,
    Run,
    Turn,
)
from traces.runs import charts, queries, turn_page
from traces.teams.views import memberships_of

TURNS_PER_PAGE = 200
# Cognitive calls listed at once: a window (`?calls=`), so the page never lists a whole long run.
PRIMITIVES_SHOWN = 100


def agent_for(request: HttpRequest, run: Run) -> str:
    """The pool agent the page shows (`?agent=`), defaulting to the first; "" for a plain chat."""
    agents = list(run.agents or [])
    agent = request.GET.get("agent", "")
    if agent in agents:
        return agent
    return agents[0] if agents else ""


# ---------------------------------------------------------------------------------------------------
# Run overview


def timeline_ctx(request: HttpRequest, run: Run, agent: str, last_page: bool = False) -> dict[str, Any]:
    turns = Turn.objects.filter(run=run, agent=agent).order_by("number")
    paginator = Paginator(turns, TURNS_PER_PAGE)
    page = paginator.get_page(paginator.num_pages if last_page else request.GET.get("tp"))
    return {"run": run, "agent": agent, "turns": list(page.object_list), "turn_page": page}


def map_start(request: HttpRequest) -> int | None:
    try:
        return int(request.GET["from"]) - 1
    except (KeyError, ValueError):
        return None


def window_start(request: HttpRequest, name: str) -> int | None:
    """A list's window start from `?<name>=` (1-based in the URL), 0-based; None when absent or bad."""
    try:
        return max(0, int(request.GET[name]) - 1)
    except (KeyError, ValueError):
        return None


def list_starts(request: HttpRequest) -> tuple[int | None, int | None]:
    """(first pin lane, first cognitive call) to show: `?pins=` and `?calls=`."""
    return window_start(request, "pins"), window_start(request, "calls")


def events_ctx(
    run: Run, agent: str, last_turn: int, pin_start: int | None = None, call_start: int | None = None
) -> dict[str, Any]:
    """The pin lanes and the cognitive events: the run page shows them, its live fragment refreshes them.
    Both are windows of a long run (`pin_start`, `call_start`), so the page's cost does not grow with it."""
    start = call_start or 0
    primitives = list(
        PrimitiveEvent.objects.filter(run=run).order_by("timestamp", "id")[
            start : start + PRIMITIVES_SHOWN + 1
        ]
    )
    shown = primitives[:PRIMITIVES_SHOWN]
    return {
        "pins": charts.pin_chart(run, agent, last_turn, start=pin_start),
        "primitives": [(ev, queries.primitive_summary(ev)) for ev in shown],
        "primitives_cut": len(primitives) > PRIMITIVES_SHOWN or start > 0,
        "calls_first": start + 1,
        "calls_last": start + len(shown),
        "calls_earlier": max(1, start - PRIMITIVES_SHOWN + 1) if start > 0 else None,
        "calls_later": start + PRIMITIVES_SHOWN + 1 if len(primitives) > PRIMITIVES_SHOWN else None,
    }


def run_ctx(request: HttpRequest, run: Run, agent: str) -> dict[str, Any]:
    """The run overview's context (the team's page and a shared page alike, traces.collab.sharing)."""
    ctx = overview_parts(request, run, agent)
    ctx.update(
        {
            "fmap": charts.fidelity_map(run, agent, start=map_start(request)),
            **notes.run_notes_ctx(run),
            # The live fragment shows the windows this page shows (and the agent's).
            "live_query": urlencode(
                {
                    k: v
                    for k, v in (("agent", agent), *((n, request.GET.get(n)) for n in ("pins", "calls")))
                    if v
                }
            ),
        }
    )
    return ctx


#: Bumped when the cached overview parts' shape changes, so parts of an older shape are not read.
OVERVIEW_CACHE_VERSION = 1

OVERVIEW_CACHE_SECONDS = 3600


def overview_parts(request: HttpRequest, run: Run, agent: str) -> dict[str, Any]:
    """The overview's timeline page, pin chart and cognitive calls (`timeline_ctx`, `events_ctx`):
    from the cache when the run is not updating and this page (agent, windows) was viewed since the run
    last changed, else six queries (seven with `Run.tokens_estimated`, kept with them).

    What is cached is the run's own rows and the chart drawn from them: no notes, links, forms or
    anything about the reader (links are drawn from `run` at render time, so a share link's page gets
    its own). The caller checked access; the key holds the run's primary key and `updated_at` (which
    ingestion and `rebuild_projections` set on every change), so no other run, project, team or share
    link is answered from it, and a changed run is read again. A shared page is redacted after this
    (`traces.collab.sharing.redact` works on copies)."""
    pin_start, call_start = list_starts(request)
    cacheable = not run.is_updating
    key = ""
    if cacheable:
        stamp = run.updated_at.isoformat() if run.updated_at else ""
        parts = f"{run.pk}:{stamp}:{agent}:{request.GET.get('tp')}:{pin_start}:{call_start}"
        key = f"arcana:overview:{OVERVIEW_CACHE_VERSION}:{hashlib.sha256(parts.encode()).hexdigest()}"
        cached = cache.get(key)
        if isinstance(cached, dict) and cached.get("run_pk") == run.pk:
            count, number, turns = cached["timeline"]
            if cached.get("tokens_estimated") is not None:  # the header's "≈" (`Run.tokens_estimated`)
                run.__dict__["_tokens_estimated"] = cached["tokens_estimated"]
            page = Page(turns, number, Paginator(range(count), TURNS_PER_PAGE))
            # `overview_key`: the lists drawn from these parts are cached under it too (run_page_tags).
            return {
                "run": run,
                "agent": agent,
                "turns": turns,
                "turn_page": page,
                **cached["events"],
                "overview_key": key,
            }
    ctx = timeline_ctx(request, run, agent)
    page = ctx["turn_page"]
    events = events_ctx(run, agent, page.paginator.count, pin_start, call_start)
    ctx.update(events)
    if key:
        timeline = (page.paginator.count, page.number, ctx["turns"])
        # The header asks it of our runtime's runs only (a scan of the run's decisions' reports).
        estimated = run.tokens_estimated if run.source == Run.Source.RUNTIME else None
        cache.set(
            key,
            {"run_pk": run.pk, "timeline": timeline, "events": events, "tokens_estimated": estimated},
            OVERVIEW_CACHE_SECONDS,
        )
    return {**ctx, "overview_key": key}


def live_run_ctx(request: HttpRequest, run: Run, agent: str) -> dict[str, Any]:
    """The run page's live fragment: header stats, the timeline's last page, and (as `live_parts`, which
    `static/js/run.js` moves to their places on the page) the pin lanes and the cognitive events. The
    fidelity map is not refreshed: it costs the most to draw and has a window of its own."""
    ctx = timeline_ctx(request, run, agent, last_page=True)
    ctx.update(
        events_ctx(run, agent, ctx["turn_page"].paginator.count, *list_starts(request)), live_parts=True
    )
    return ctx


def fidelity_ctx(request: HttpRequest, run: Run, agent: str) -> dict[str, Any]:
    return {"run": run, "agent": agent, "fmap": charts.fidelity_map(run, agent, start=map_start(request))}


# ---------------------------------------------------------------------------------------------------
# Turn


def turn_ctx(request: HttpRequest, run: Run, agent: str, number: int) -> dict[str, Any]:
    """The turn page's context: the parts from the run's projections (`traces.runs.turn_page`, cached
    while the run does not change), then what depends on the reader: the notes and the note forms."""
    parts = turn_page.turn_parts(run, agent, number)
    if parts is None:
        raise Http404("No such turn.")
    step_views = [
        {
            "step": sp.step,
            "decision": sp.decision,
            "table": sp.table,
            "changes": sp.changes,
            "changes_html": sp.changes_html,
            "primitives": sp.primitives,
            "snapshot": sp.snapshot,
            "comp": sp.composition,  # issue 37: what filled the context
            # The step's drawn parts are cached with the turn's (templates/traces/_turn_step_*.html).
            "part_key": parts.key,
        }
        for sp in parts.steps
    ]
    return {
        "run": run,
        "agent": agent,
        "turn": parts.turn,
        "agent_tabs": agent_tabs(run, number),
        "steps": step_views,
        "active_pins": parts.active_pins,
        **lingering_ctx(run, agent, number),
        "loose_primitives": parts.loose_primitives,
        "prev_turn": parts.prev_turn,
        "next_turn": parts.next_turn,
        # Review notes: on the turn, and on each step (put on its step view); who may write them.
        **notes.turn_notes_ctx(run, agent, number, step_views),
        # The caller's membership from the list the header's team switcher reads too (one query).
        **notes.note_perm_ctx(
            next((m for m in memberships_of(request) if m.team_id == run.project.team_id), None)
        ),
    }


def lingering_ctx(run: Run, agent: str, number: int) -> dict[str, Any]:
    """An arcana-agent 1.2 run's pins no longer active at turn `number` that its working set still
    rendered (an `until_turn` pin one call longer: `runtime.facts.lingering_pins`), and why, in the
    CLI's words (`ARCANA_PIN_RENDERING`): the turn page shows their pinned rows and says so."""
    if run.source != Run.Source.ARCANA:
        return {"lingering_pins": []}
    pins = run.pins.filter(agent=agent, created_turn__lt=number).order_by(
        "created_turn", "created_step", "id"
    )
    return {
        "lingering_pins": facts.lingering_pins(pins, number),
        "arcana_pin_rendering": facts.ARCANA_PIN_RENDERING,
    }


def agent_tabs(run: Run, number: int) -> list[tuple[str, str]]:
    """A pool's agent tabs on turn `number`: each agent's own turn `number`, or its run overview when
    it has no such turn (agents of a pool take different numbers of turns). One query, pools only."""
    agents = list(run.agents or [])
    if not agents:
        return []
    having = set(Turn.objects.filter(run=run, number=number).values_list("agent", flat=True))
    return [
        (a, (run.turn_url(number) if a in having else run.get_absolute_url()) + "?" + urlencode({"agent": a}))
        for a in agents
    ]
