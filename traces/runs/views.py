"""Run pages: the runs list, the run overview, the turn page, and the fragments they poll.

Thin function views (STYLE.md item 7): access goes through `traces.core.access` (404 for anything
outside the caller's teams), the contexts are `traces.runs.context`, the work is in `traces.runs.queries`, and templates auto-escape every trace
string. Views read projections only; nothing here parses raw event JSON.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from traces.branches import views as branch_views
from traces.collab import notes, sharing
from traces.core import access
from traces.dashboard import band, prices
from traces.dashboard import pages as dashboard_pages
from traces.experiments.views import dataset_panel_ctx
from traces.instructions.views import instruction_panel_ctx
from traces.models import (
    Action,
    Conversation,
    membership_of,
)
from traces.runs import labels, live, queries
from traces.runs.context import (
    agent_for,
    fidelity_ctx,
    live_run_ctx,
    map_start,
    run_ctx,
    turn_ctx,
)
from traces.runs.filters import RunFilter
from traces.scores import summaries as score_summaries
from traces.scores.views import score_panel_ctx
from traces.teams.views import current_team_id, memberships_of

RUNS_PER_PAGE = 50


@login_required
@require_GET
def legacy_run(request: HttpRequest, run_id: str, number: int | None = None) -> HttpResponse:
    """`/runs/<id>[/turns/<n>]`, the unscoped address of earlier versions: a redirect when exactly one
    run the caller can read has this id, 404 otherwise. Never "the newest": when two projects hold the
    id, which run a link meant is unknown, and guessing would let one project's key holder plant a run
    that opens instead of another project's."""
    qs = access.runs(request).filter(run_id=run_id)
    query = request.GET.copy()
    if slug := query.pop("project", [""])[-1]:  # old links named the project by slug
        qs = qs.filter(project__slug=slug)
    found = list(qs[:2])
    if len(found) != 1:
        raise Http404("No such run." if not found else "Several of your projects have a run with this id.")
    url = found[0].get_absolute_url() if number is None else found[0].turn_url(number)
    rest = query.urlencode()
    return redirect(f"{url}?{rest}" if rest else url)


# ---------------------------------------------------------------------------------------------------
# Runs


@login_required
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    # The header's team switcher: the current team's runs, or every team's ("All teams").
    scope = access.runs(request)
    if (team_id := current_team_id(request)) is not None:
        scope = scope.filter(project__team_id=team_id)
    # The API's filter, lenient here: a bad value is left out and the others still filter.
    run_filter = RunFilter(request.GET, queryset=scope)
    filters = run_filter.values
    qs = run_filter.qs.select_related("project__team")
    if not qs.query.order_by:  # newest first, unless sorted by a score (`sort`, issue 36)
        qs = qs.order_by("-started_at", "-id")
    page = Paginator(qs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("fragment", None)
    rows = list(page.object_list)
    # A conversation's run between two turns is live although its last event says "completed", as on
    # its run page (Run.is_updating): the rows' conversations come in one query, not one per row.
    live.attach_conversations(rows)
    prices.attach_run_costs(rows)  # issue 37: the Cost column (kept by each run's state)
    score_summaries.attach(rows)  # the Scores column (issue 36): one query for the page
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
        # The empty list's upload hint: a callable, so its query runs only when the list is empty.
        ctx["can_upload"] = access.projects(request, Action.UPLOAD).exists
        return live.not_modified(request, tag) or live.tagged(
            render(request, "traces/_runs_table.html", ctx), tag
        )
    ctx["choices"] = choices = queries.filter_choices(access.runs(request), access.projects(request))
    ctx["score_names"] = choices.score_names  # the sort's choices (issue 36)
    ctx["has_any_run"] = page.paginator.count > 0 or scope.exists()
    # Viewers read runs but may not upload or start runs: no button that leads to a refusal. From the
    # projects just read and the caller's memberships (read once per request for the header).
    memberships = memberships_of(request)
    ctx["can_upload"] = access.allowed_in_any(memberships, choices.projects, Action.UPLOAD)
    ctx["can_start_runs"] = access.allowed_in_any(memberships, choices.projects, Action.CONVERSE)
    return render(request, "traces/runs.html", ctx)


@login_required
@require_GET
def run(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    run = access.find_run(request, project_id, run_id)
    if run is None:
        return _waiting_for_run(request, project_id, run_id)
    agent = agent_for(request, run)
    ctx = run_ctx(request, run, agent)
    membership = membership_of(request.user, run.project.team_id)
    ctx.update(notes.note_perm_ctx(membership))
    ctx["may_label"] = membership is not None and membership.can(Action.LABEL)
    ctx.update(sharing.share_panel_ctx(request, run, membership))
    ctx.update(score_panel_ctx(run, membership))  # scores (issue 36)
    # Compactions and lost instructions: trace text, so on the team's page only (a share link's page
    # shows the fidelity map, which marks every drop).
    ctx["changes"] = queries.context_changes(run, agent)
    ctx.update(instruction_panel_ctx(run, agent, membership, ctx["changes"]))  # their model checks (issue 35)
    ctx["cost"] = prices.run_cost(run)  # issue 37: the run's cost by model, all agents
    ctx.update(branch_views.branch_links_ctx(run, agent))  # issue 38: branched from / branches made
    if "tp" not in request.GET:  # the live fragment shows the timeline's last page, as this page does
        ctx["live_etag"] = live.run_tag(run, "run", agent)
    # The map's own version: run.js fetches it again after a change of the live fragment, and the
    # answer is a 304 unless the run (or the window asked for) changed.
    ctx["fmap_etag"] = live.run_tag(run, "fmap", agent, map_start(request))
    return render(request, "traces/run.html", ctx)


def _poll(
    request: HttpRequest, project_id: int, run_id: str, *params: Any
) -> tuple[str, str, HttpResponse | None]:
    """A polled fragment's agent, tag and, when the page already shows that version, its 304: from the
    one query of `live.poll_run` (404 for outsiders, as `access.get_run`). The caller reads the full
    run only when it has to render."""
    light = live.poll_run(request.user, project_id, run_id)
    if light is None:
        raise Http404("No such run.")
    agent = agent_for(request, light)
    tag = live.run_tag(light, *params[:1], agent, *params[1:])
    return agent, tag, live.not_modified(request, tag)


@login_required
@require_POST
def run_labels(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The run page's "Edit name and tags" form (members and up; audited): `reset` shows the trace's."""
    run = access.get_run(request, project_id, run_id)
    access.require(request, run.project.team_id, Action.LABEL)
    if request.POST.get("reset"):
        name, tags = None, None
    else:
        name, tags = request.POST.get("name", ""), labels.parse_tags_text(request.POST.get("tags", ""))
    try:
        changed = labels.do_set_labels(run, request.user, name=name, tags=tags)
    except labels.LabelError as exc:
        messages.error(request, f"Not saved: {exc}")
    else:
        messages.success(request, "Name and tags saved." if changed else "Nothing changed.")
    return redirect(run.get_absolute_url())


def _waiting_ctx(conv: Conversation) -> tuple[dict[str, Any], str]:
    """The waiting page's context and its live fragment's tag (the conversation's state)."""
    tag = live.etag("run-waiting", conv.pk, conv.status, conv.updated_at.isoformat(), conv.cursor)
    return {"conv": conv, "project": conv.project, "run_id": conv.run_id, "live_etag": tag}, tag


def _waiting_for_run(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The page of a run a conversation will write, before its first event is stored: "Waiting for the
    first event…", polling `run_live` until the run arrives (the page then reloads into the run). A run
    no conversation of a readable project will write is a 404, as before."""
    conv = access.find_conversation(request, project_id, run_id)
    if conv is None:
        raise Http404("No such run.")
    ctx, _tag = _waiting_ctx(conv)
    return render(request, "traces/run_waiting.html", ctx)


@login_required
@require_GET
def run_live(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The header stats and the timeline's last page, for pages polling a live run; before the run's
    first event, the waiting page's fragment (its conversation's state)."""
    try:
        agent, tag, unchanged = _poll(request, project_id, run_id, "run")
    except Http404:  # no run (yet): the conversation that will write it, else a 404 still
        conv = access.find_conversation(request, project_id, run_id)
        if conv is None:
            raise
        ctx, tag = _waiting_ctx(conv)
        return live.not_modified(request, tag) or live.tagged(
            render(request, "traces/_run_waiting.html", ctx), tag
        )
    if unchanged:
        return unchanged
    run = access.get_run(request, project_id, run_id)
    return live.tagged(render(request, "traces/_run_live.html", live_run_ctx(request, run, agent)), tag)


@login_required
@require_GET
def run_fidelity(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The fidelity map for another window of steps (the range control fetches this), and the map a
    page of a live run fetches again after its live fragment changed (`static/js/run.js`): tagged by
    the run's version and the window, so it is drawn again only when the run changed (304 else)."""
    agent, tag, unchanged = _poll(request, project_id, run_id, "fmap", map_start(request))
    if unchanged:
        return unchanged
    run = access.get_run(request, project_id, run_id)
    return live.tagged(render(request, "traces/_fidelity_map.html", fidelity_ctx(request, run, agent)), tag)


@login_required
@require_GET
def run_band(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """What filled the context over the run (issue 37), the fragment the overview loads after it is
    shown: tagged by the run's version and the agent, so asking again is a 304 until the run changed."""
    agent, tag, unchanged = _poll(request, project_id, run_id, "band")
    if unchanged:
        return unchanged
    run = access.get_run(request, project_id, run_id)
    return live.tagged(HttpResponse(band.fragment_html(run, agent)), tag)


@login_required
@require_GET
def turn(request: HttpRequest, project_id: int, run_id: str, number: int) -> HttpResponse:
    run = access.get_run(request, project_id, run_id)
    agent = agent_for(request, run)
    ctx = turn_ctx(request, run, agent, number)
    # Scores (issue 36), for the caller's role that the note forms read (turn_ctx's `note_member`).
    ctx.update(score_panel_ctx(run, ctx.get("note_member"), agent=agent, turn=number))
    ctx.update(dataset_panel_ctx(run, ctx.get("note_member"), number))  # issue 38: "Add to dataset"
    dashboard_pages.add_turn_costs(ctx)  # issue 37: the turn's and each step's cost
    ctx["live_etag"] = live.run_tag(run, "turn", agent, number)
    # Re-running a step from an edited context (issue 38): the branches, the form of `?rerun=<step>`.
    ctx.update(branch_views.turn_branch_ctx(run, agent, number, ctx, request.GET.get("rerun", "")))
    return render(request, "traces/turn.html", ctx)


@login_required
@require_GET
def turn_live(request: HttpRequest, project_id: int, run_id: str, number: int) -> HttpResponse:
    """The steps of a turn, for a turn page polling a live run."""
    agent, tag, unchanged = _poll(request, project_id, run_id, "turn", number)
    if unchanged:
        return unchanged
    run = access.get_run(request, project_id, run_id)
    # live_parts: the active pins come along, for turn.js to put in the sidebar (#turn-pins).
    ctx = {**turn_ctx(request, run, agent, number), "live_parts": True}
    dashboard_pages.add_turn_costs(ctx)
    return live.tagged(render(request, "traces/_turn_steps.html", ctx), tag)
