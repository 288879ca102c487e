"""The project dashboard, a project's prices, and sessions (pages).

Thin function views: access through `traces.core.access` (404 outside the caller's teams, 403 with
the reason for a role too weak to change prices), numbers from `figures` (rollups only) and
`sessions`, drawing from `charts` and the templates under `templates/dashboard/`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from runtime.pricing import DEFAULT_PRICES, PRICES_CHECKED, UNPRICED_PRESETS
from traces.core import access
from traces.dashboard import actions, charts, figures, rollups, sessions
from traces.dashboard.filters import resolve
from traces.dashboard.forms import PriceForm
from traces.dashboard.prices import project_table
from traces.models import Action, DailyRollup, ModelPrice, Project, Run
from traces.teams.views import current_team_id

SESSIONS_PER_PAGE = 50


def _project(request: HttpRequest, project_id: int) -> Project:
    project = access.projects(request).filter(pk=project_id).select_related("team").first()
    if project is None:
        raise Http404("No such project.")
    return project


@login_required
@require_GET
def dashboard_index(request: HttpRequest) -> HttpResponse:
    """`/dashboard`: the dashboard of the first project of the current team (or of any team)."""
    projects = access.projects(request)
    if (team_id := current_team_id(request)) is not None:
        projects = projects.filter(team_id=team_id)
    project = projects.order_by("team__name", "slug").first()
    if project is None:
        return render(request, "dashboard/no_project.html")
    return redirect("traces:dashboard", project_id=project.pk)


@login_required
@require_GET
def dashboard(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's first page: runs, failures, latency, tokens and cost per day, compactions, pins
    and recalls over a range and filters; each chart links to the runs behind it."""
    project = _project(request, project_id)
    pending = rollups.refresh_project(project.pk)  # small marked days now; big ones by the beat task
    f, form = resolve(request.GET)
    figs = figures.figures(project.pk, f)

    def url(day: dt.date | None, extra: dict[str, str]) -> str:
        return f.runs_url(project.slug, day, **extra)

    others = access.projects(request).select_related("team").order_by("team__name", "slug")
    return render(
        request,
        "dashboard/dashboard.html",
        {
            "project": project,
            "projects": list(others[:200]),
            "figs": figs,
            "f": f,
            "form": form,
            "charts": charts.dashboard_charts(figs, url),
            "runs_url": f.runs_url(project.slug),
            "pending": pending,
            "can_price": access.can(request, project.team_id, Action.MANAGE_PROJECTS),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def prices(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's price table: the dated defaults and the project's own prices; admins set and
    remove prices here (audit-logged)."""
    project = _project(request, project_id)
    may_edit = access.can(request, project.team_id, Action.MANAGE_PROJECTS)
    form = PriceForm(request.POST or None, initial={"model": request.GET.get("model", "")})
    if request.method == "POST":
        access.require(request, project.team_id, Action.MANAGE_PROJECTS)
        if form.is_valid():
            data = form.cleaned_data
            actions.do_set_price(
                project,
                request.user,
                data["model"],
                data["input_per_million"],
                data["output_per_million"],
                data["cached_input_per_million"],
            )
            messages.success(
                request, f"Price of {data['model']} saved; the dashboard's costs are being updated."
            )
            return redirect("traces:prices", project_id=project.pk)
    table = project_table(project.pk)
    seen: set[str] = set()
    for by_model in DailyRollup.objects.filter(project=project).values_list("by_model", flat=True):
        seen.update(by_model or {})
    unpriced = sorted(m for m in seen if m and table.price(m) is None)
    return render(
        request,
        "dashboard/prices.html",
        {
            "project": project,
            "own": ModelPrice.objects.filter(project=project).select_related("updated_by"),
            "defaults": sorted(DEFAULT_PRICES.items()),
            "unpriced_presets": sorted(UNPRICED_PRESETS.items()),
            "unpriced_seen": unpriced,
            "checked": PRICES_CHECKED,
            "form": form,
            "may_edit": may_edit,
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
@require_POST
def price_delete(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    access.require(request, project.team_id, Action.MANAGE_PROJECTS)
    model = request.POST.get("model", "")
    if actions.do_delete_price(project, request.user, model):
        messages.success(request, f"The project's price of {model} is removed.")
    return redirect("traces:prices", project_id=project.pk)


@login_required
@require_GET
def session_list(request: HttpRequest) -> HttpResponse:
    """Every session of the caller's projects (of the current team), newest activity first, from the
    sessions' rollup rows (small marked days are rolled up first, as the dashboard does)."""
    scope = access.projects(request)
    if (team_id := current_team_id(request)) is not None:
        scope = scope.filter(team_id=team_id)
    slug = request.GET.get("project", "").strip()
    if slug:
        scope = scope.filter(slug=slug)
    pending = rollups.refresh_projects(scope)
    page = Paginator(sessions.sessions_of(scope), SESSIONS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "dashboard/sessions.html",
        {
            "page": page,
            "rows": sessions.rows(list(page.object_list)),
            "project_slug": slug,
            "pending": pending,
        },
    )


@login_required
@require_GET
def session(request: HttpRequest, project_id: int, key: str) -> HttpResponse:
    """One session: its runs, and the turns of all of them as one transcript."""
    project = _project(request, project_id)
    runs = list(sessions.session_runs(project.pk, key).select_related("project__team"))
    if not runs:
        raise Http404("No such session.")
    try:
        offset = max(int(request.GET.get("from", 0)), 0)
    except ValueError:
        offset = 0
    turns, total = sessions.transcript(runs, offset)
    ctx: dict[str, Any] = {
        "project": project,
        "key": key,
        "label": key.split(":", 1)[1],
        "is_bundle": key.startswith(sessions.BUNDLE),
        "runs": runs,
        "turns": turns,
        "total": total,
        "offset": offset,
        "next_offset": offset + len(turns) if offset + len(turns) < total else None,
        "prev_offset": max(offset - sessions.TURNS_PER_PAGE, 0) if offset else None,
        "sessions_url": reverse("traces:sessions") + f"?project={project.slug}",
        "failed": sum(r.status == Run.Status.FAILED for r in runs),
    }
    return render(request, "dashboard/session.html", ctx)
