"""Dashboard pages: runs, run overview, turn, uploads, and the fragments the pages poll.

Thin function views (STYLE.md item 7): access goes through `_get_run_for_user` (404 for anything
outside the caller's teams), the work is in `traces.runs.queries`, and templates auto-escape every trace
string. Views read projections only; nothing here parses raw event JSON.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from traces.collab import notes, sharing
from traces.core.authentication import SignedInRequest
from traces.models import (
    Action,
    Membership,
    PrimitiveEvent,
    Project,
    Run,
    Turn,
    membership_of,
    projects_for_user,
)
from traces.runs import charts, live, queries, turn_page
from traces.teams.views import current_team_id, memberships_of

RUNS_PER_PAGE = 50
TURNS_PER_PAGE = 200
# Cognitive calls listed at once: a window (`?calls=`), so the page never lists a whole long run.
PRIMITIVES_SHOWN = 100


def _get_run_for_user(request: HttpRequest, project_id: int, run_id: str) -> Run:
    """The run `run_id` of project `project_id` if the caller is in its team, or 404 (never 403: an
    outsider must not learn that the run exists). A run is addressed by both (DESIGN.md §9)."""
    run = (
        queries.runs_for_user(request.user)
        .filter(project_id=project_id, run_id=run_id)
        .select_related("project__team")
        .first()
    )
    if run is None:
        raise Http404("No such run.")
    return run


@login_required
@require_GET
def legacy_run(request: HttpRequest, run_id: str, number: int | None = None) -> HttpResponse:
    """`/runs/<id>[/turns/<n>]`, the unscoped address of earlier versions: a redirect when exactly one
    run the caller can read has this id, 404 otherwise. Never "the newest": when two projects hold the
    id, which run a link meant is unknown, and guessing would let one project's key holder plant a run
    that opens instead of another project's."""
    qs = queries.runs_for_user(request.user).filter(run_id=run_id)
    query = request.GET.copy()
    if slug := query.pop("project", [""])[-1]:  # old links named the project by slug
        qs = qs.filter(project__slug=slug)
    found = list(qs[:2])
    if len(found) != 1:
        raise Http404("No such run." if not found else "Several of your projects have a run with this id.")
    url = found[0].get_absolute_url() if number is None else found[0].turn_url(number)
    rest = query.urlencode()
    return redirect(f"{url}?{rest}" if rest else url)


def _agent_for(request: HttpRequest, run: Run) -> str:
    """The pool agent the page shows (`?agent=`), defaulting to the first; "" for a plain chat."""
    agents = list(run.agents or [])
    agent = request.GET.get("agent", "")
    if agent in agents:
        return agent
    return agents[0] if agents else ""


# ---------------------------------------------------------------------------------------------------
# Runs


@login_required
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    filters = queries.RunFilters.from_query(request.GET)
    # The header's team switcher: the current team's runs, or every team's ("All teams").
    scope = queries.runs_for_user(request.user)
    if (team_id := current_team_id(request)) is not None:
        scope = scope.filter(project__team_id=team_id)
    qs = filters.apply(scope).select_related("project__team").order_by("-started_at", "-id")
    page = Paginator(qs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("fragment", None)
    rows = list(page.object_list)
    # A conversation's run between two turns is live although its last event says "completed", as on
    # its run page (Run.is_updating): the rows' conversations come in one query, not one per row.
    live.attach_conversations(rows)
    ctx: dict[str, Any] = {
        "page": page,
        "runs": rows,
        "filters": filters,
        "query": query.urlencode(),
        "any_live": any(r.is_updating for r in rows),
    }
    # The list's version: what its rows show of each run, and how many runs match (traces/runs/live.py).
    ctx["live_etag"] = tag = live.etag(
        "runs",
        ctx["query"],
        [(live.run_token(r), live.conversation_token(r), r.is_updating) for r in rows],
        page.paginator.count,
    )
    if request.GET.get("fragment") == "list":
        return live.not_modified(request, tag) or live.tagged(
            render(request, "traces/_runs_table.html", ctx), tag
        )
    ctx["choices"] = queries.filter_choices(request.user)
    ctx["has_any_run"] = page.paginator.count > 0 or scope.exists()
    ctx["can_start_runs"] = projects_for_user(request.user, Action.CONVERSE).exists()
    return render(request, "traces/runs.html", ctx)


# ---------------------------------------------------------------------------------------------------
# Run overview


def _timeline_ctx(request: HttpRequest, run: Run, agent: str, last_page: bool = False) -> dict[str, Any]:
    turns = Turn.objects.filter(run=run, agent=agent).order_by("number")
    paginator = Paginator(turns, TURNS_PER_PAGE)
    page = paginator.get_page(paginator.num_pages if last_page else request.GET.get("tp"))
    return {"run": run, "agent": agent, "turns": list(page.object_list), "turn_page": page}


def _map_start(request: HttpRequest) -> int | None:
    try:
        return int(request.GET["from"]) - 1
    except (KeyError, ValueError):
        return None


def _window_start(request: HttpRequest, name: str) -> int | None:
    """A list's window start from `?<name>=` (1-based in the URL), 0-based; None when absent or bad."""
    try:
        return max(0, int(request.GET[name]) - 1)
    except (KeyError, ValueError):
        return None


def _list_starts(request: HttpRequest) -> tuple[int | None, int | None]:
    """(first pin lane, first cognitive call) to show: `?pins=` and `?calls=`."""
    return _window_start(request, "pins"), _window_start(request, "calls")


def _events_ctx(
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
    ctx = _overview_parts(request, run, agent)
    ctx.update(
        {
            "fmap": charts.fidelity_map(run, agent, start=_map_start(request)),
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


def _overview_parts(request: HttpRequest, run: Run, agent: str) -> dict[str, Any]:
    """The overview's timeline page, pin chart and cognitive calls (`_timeline_ctx`, `_events_ctx`):
    from the cache when the run is not updating and this page (agent, windows) was viewed since the run
    last changed, else six queries (seven with `Run.tokens_estimated`, kept with them).

    What is cached is the run's own rows and the chart drawn from them: no notes, links, forms or
    anything about the reader (links are drawn from `run` at render time, so a share link's page gets
    its own). The caller checked access; the key holds the run's primary key and `updated_at` (which
    ingestion and `rebuild_projections` set on every change), so no other run, project, team or share
    link is answered from it, and a changed run is read again. A shared page is redacted after this
    (`traces.collab.sharing.redact` works on copies)."""
    pin_start, call_start = _list_starts(request)
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
    ctx = _timeline_ctx(request, run, agent)
    page = ctx["turn_page"]
    events = _events_ctx(run, agent, page.paginator.count, pin_start, call_start)
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
    ctx = _timeline_ctx(request, run, agent, last_page=True)
    ctx.update(
        _events_ctx(run, agent, ctx["turn_page"].paginator.count, *_list_starts(request)), live_parts=True
    )
    return ctx


def fidelity_ctx(request: HttpRequest, run: Run, agent: str) -> dict[str, Any]:
    return {"run": run, "agent": agent, "fmap": charts.fidelity_map(run, agent, start=_map_start(request))}


@login_required
@require_GET
def run(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    run = _get_run_for_user(request, project_id, run_id)
    agent = _agent_for(request, run)
    ctx = run_ctx(request, run, agent)
    membership = membership_of(request.user, run.project.team_id)
    ctx.update(notes.note_perm_ctx(membership))
    ctx.update(sharing.share_panel_ctx(request, run, membership))
    if "tp" not in request.GET:  # the live fragment shows the timeline's last page, as this page does
        ctx["live_etag"] = live.run_tag(run, "run", agent)
    # The map's own version: run.js fetches it again after a change of the live fragment, and the
    # answer is a 304 unless the run (or the window asked for) changed.
    ctx["fmap_etag"] = live.run_tag(run, "fmap", agent, _map_start(request))
    return render(request, "traces/run.html", ctx)


def _poll(
    request: HttpRequest, project_id: int, run_id: str, *params: Any
) -> tuple[str, str, HttpResponse | None]:
    """A polled fragment's agent, tag and, when the page already shows that version, its 304: from the
    one query of `live.poll_run` (404 for outsiders, as `_get_run_for_user`). The caller reads the full
    run only when it has to render."""
    light = live.poll_run(request.user, project_id, run_id)
    if light is None:
        raise Http404("No such run.")
    agent = _agent_for(request, light)
    tag = live.run_tag(light, *params[:1], agent, *params[1:])
    return agent, tag, live.not_modified(request, tag)


@login_required
@require_GET
def run_live(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The header stats and the timeline's last page, for pages polling a live run."""
    agent, tag, unchanged = _poll(request, project_id, run_id, "run")
    if unchanged:
        return unchanged
    run = _get_run_for_user(request, project_id, run_id)
    return live.tagged(render(request, "traces/_run_live.html", live_run_ctx(request, run, agent)), tag)


@login_required
@require_GET
def run_fidelity(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The fidelity map for another window of steps (the range control fetches this), and the map a
    page of a live run fetches again after its live fragment changed (`static/js/run.js`): tagged by
    the run's version and the window, so it is drawn again only when the run changed (304 else)."""
    agent, tag, unchanged = _poll(request, project_id, run_id, "fmap", _map_start(request))
    if unchanged:
        return unchanged
    run = _get_run_for_user(request, project_id, run_id)
    return live.tagged(render(request, "traces/_fidelity_map.html", fidelity_ctx(request, run, agent)), tag)


# ---------------------------------------------------------------------------------------------------
# Turn


def _turn_ctx(request: HttpRequest, run: Run, agent: str, number: int) -> dict[str, Any]:
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
            # The step's drawn parts are cached with the turn's (templates/traces/_turn_step_*.html).
            "part_key": parts.key,
        }
        for sp in parts.steps
    ]
    return {
        "run": run,
        "agent": agent,
        "turn": parts.turn,
        "agent_tabs": _agent_tabs(run, number),
        "steps": step_views,
        "active_pins": parts.active_pins,
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


def _agent_tabs(run: Run, number: int) -> list[tuple[str, str]]:
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


@login_required
@require_GET
def turn(request: HttpRequest, project_id: int, run_id: str, number: int) -> HttpResponse:
    run = _get_run_for_user(request, project_id, run_id)
    agent = _agent_for(request, run)
    ctx = _turn_ctx(request, run, agent, number)
    ctx["live_etag"] = live.run_tag(run, "turn", agent, number)
    return render(request, "traces/turn.html", ctx)


@login_required
@require_GET
def turn_live(request: HttpRequest, project_id: int, run_id: str, number: int) -> HttpResponse:
    """The steps of a turn, for a turn page polling a live run."""
    agent, tag, unchanged = _poll(request, project_id, run_id, "turn", number)
    if unchanged:
        return unchanged
    run = _get_run_for_user(request, project_id, run_id)
    # live_parts: the active pins come along, for turn.js to put in the sidebar (#turn-pins).
    ctx = {**_turn_ctx(request, run, agent, number), "live_parts": True}
    return live.tagged(render(request, "traces/_turn_steps.html", ctx), tag)


# ---------------------------------------------------------------------------------------------------
# Uploads


@login_required
@require_GET
def uploads(request: SignedInRequest) -> HttpResponse:
    items = list(queries.uploads_for_user(request.user).select_related("project__team", "created_by")[:50])
    ctx: dict[str, Any] = {"uploads": items}
    if request.GET.get("fragment") == "list":
        return render(request, "traces/_uploads_list.html", ctx)
    # Viewers read; only roles that can write get the upload form (one membership row must match both).
    ctx["projects"] = list(
        Project.objects.filter(
            team__memberships__user=request.user,
            team__memberships__role__in=[r for r in Membership.Role.values if r != Membership.Role.VIEWER],
        )
        .select_related("team")
        .order_by("team__name", "slug")
    )
    return render(request, "traces/uploads.html", ctx)
