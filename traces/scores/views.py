"""Scores in the browser: scoring a run or a turn where you read it, deleting a score, the project's
scores page (its configs, the distribution of each, exports as CSV or JSONL) and managing configs.

Access through `traces.core.access`: anything outside the caller's teams is 404; viewers read;
members score (`Action.SCORE`); admins manage configs (`Action.MANAGE_SCORES`), each write audited
by `traces.scores.actions`. A score is deleted by its author or a team admin (`Score.can_delete`).
The review queues' and judges' pages are `traces/scores/views_queues.py` and `views_judges.py`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from traces.core import access, sqlread
from traces.models import (
    Action,
    Judge,
    JudgeRun,
    Membership,
    Project,
    ReviewQueue,
    Run,
    Score,
    ScoreConfig,
    membership_of,
)
from traces.scores import actions, charts, export, forms, judges, judging, summaries
from traces.scores.filters import ScoreFilter
from traces.scores.targets import ScoreError


def project_for(request: HttpRequest, project_id: int, action: str = Action.READ) -> Project:
    """The project if the caller may read it (404 otherwise), then `action` required (403 saying why)."""
    project = access.projects(request).filter(pk=project_id).select_related("team").first()
    if project is None:
        raise Http404("No such project.")
    access.require(request, project.team_id, action)
    return project


def back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    """To the form's `next` (a path of this site) or `default`."""
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=False):
        return HttpResponseRedirect(target)
    return HttpResponseRedirect(default)


def scores_url(project: Project | int) -> str:
    pk = project.pk if isinstance(project, Project) else project
    return reverse("traces:project_scores", kwargs={"project_id": pk})


# ---------------------------------------------------------------------------------------------------
# On the run and turn pages


_CONFIGS_WHERE = 'WHERE "traces_scoreconfig"."project_id" = %s ORDER BY "traces_scoreconfig"."name"'


def score_panel_ctx(
    run: Run, membership: Membership | None, *, agent: str = "", turn: int | None = None
) -> dict[str, Any]:
    """The scores of the run (or of one turn of `agent`) and, for members, the form's inputs."""
    where: dict[str, Any] = {} if turn is None else {"agent": agent, "turn_number": turn}
    every = sqlread.fetch(ScoreConfig, _CONFIGS_WHERE, [run.project_id])  # SQL written once
    configs = [c for c in every if not c.archived]
    can_score = membership is not None and membership.can(Action.SCORE)
    form_id = "turn-score" if turn is not None else "run-score"
    # A score has a config of its run's project (archived ones included): none, no scores to read.
    scores = summaries.run_scores(run, **where) if every else []
    for s in scores:
        s.deletable = s.can_delete(membership)  # type: ignore[attr-defined]
        s.editable = s.can_edit(membership)  # type: ignore[attr-defined]
        s.choices = forms.choices(s.config) if s.editable else []  # type: ignore[attr-defined]
    return {
        "scores": scores,
        "score_fields": forms.fields_for(configs, form_id) if can_score else [],
        "score_form_id": form_id,
        "can_score": can_score and bool(configs),
        "score_member": membership,
        "score_turn": turn,
        "score_configs_url": scores_url(run.project_id),
    }


@login_required
@require_POST
def score_create(request: HttpRequest, project_id: int, run_id: str) -> HttpResponse:
    """The run or turn page's form: one score per filled config, on the form's target."""
    run = access.find_run(request, project_id, run_id)
    if run is None:
        raise Http404("No such run.")
    access.require(request, run.project.team_id, Action.SCORE)
    turn = request.POST.get("turn") or ""
    default = run.turn_url(int(turn)) if turn.isdigit() else run.get_absolute_url()
    configs = {c.name: c for c in ScoreConfig.objects.filter(project_id=run.project_id, archived=False)}
    try:
        items, errors = forms.read_scores(configs, request.POST)
    except ScoreError as e:
        messages.error(request, f"Not scored: {e.field} {e.message}.")
        return back(request, default + "#scores")
    if not items and not errors:
        messages.error(request, "Not scored: give at least one value.")
        return back(request, default + "#scores")
    result = actions.do_write_scores(run.project, request.user, [*items, *errors], Score.Source.PERSON)
    refused = [r.error for r in result.results if r.error is not None]
    created = result.count("created")
    if created:
        messages.success(request, f"{created} score{'s' if created != 1 else ''} saved.")
    for err in refused:
        messages.error(request, f"Not scored: {err.field} {err.message}.")
    return back(request, default + "#scores")


@login_required
@require_POST
def score_edit(request: HttpRequest, score_id: int) -> HttpResponse:
    """The author changes their score's value or comment (the notes' rule: `Score.can_edit`)."""
    score = (
        Score.objects.filter(pk=score_id, project__in=access.projects(request))
        .select_related("project__team", "config")
        .first()
    )
    if score is None:
        raise Http404("No such score.")
    if not score.can_edit(membership_of(request.user, score.project.team_id)):
        raise PermissionDenied("Only the score's author can edit it.")
    data = {k: request.POST[k] for k in ("value", "comment") if k in request.POST}
    try:
        if actions.do_edit_score(score, request.user, data):
            messages.success(request, f"Score {score.name} changed.")
    except ScoreError as e:
        messages.error(request, f"Score not changed: {e.field} {e.message}.")
    except Score.DoesNotExist:
        raise Http404("No such score.") from None
    run = Run(project_id=score.project_id, run_id=score.run_id)
    return back(request, run.get_absolute_url() + "#scores")


@login_required
@require_POST
def score_delete(request: HttpRequest, score_id: int) -> HttpResponse:
    score = (
        Score.objects.filter(pk=score_id, project__in=access.projects(request))
        .select_related("project__team")
        .first()
    )
    if score is None:
        raise Http404("No such score.")
    if not score.can_delete(membership_of(request.user, score.project.team_id)):
        raise PermissionDenied("Only the score's author or a team admin can delete it.")
    actions.do_delete_score(score, request.user)
    messages.success(request, f"Score {score.name} deleted.")
    run = Run(project_id=score.project_id, run_id=score.run_id)
    return back(request, run.get_absolute_url() + "#scores")


# ---------------------------------------------------------------------------------------------------
# The project's scores page


@login_required
@require_GET
def project_scores(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for(request, project_id)
    membership = membership_of(request.user, project.team_id)
    configs = list(ScoreConfig.objects.filter(project=project))
    scores = ScoreFilter(request.GET, queryset=Score.objects.filter(project=project))
    scores.is_valid()  # lenient: a bad value is left out (the export and the API refuse it)
    ctx = {
        "project": project,
        "configs": configs,
        "distributions": charts.distributions(configs, scores.qs),
        "query": request.GET.urlencode(),
        "can_manage": membership is not None and membership.can(Action.MANAGE_SCORES),
        "can_score": membership is not None and membership.can(Action.SCORE),
        "kinds": ScoreConfig.Kind.choices,
        "queues": list(ReviewQueue.objects.filter(project=project).prefetch_related("configs")),
        "judge_runs": list(JudgeRun.objects.filter(project=project).select_related("judge")[:20]),
        "judges": list(Judge.objects.filter(project=project).select_related("config")),
        "judge_models": judges.models_offered(),
        "judge_variables": judging.VARIABLES,
        "recent": list(Score.objects.filter(project=project).order_by("-created_at", "-id")[:20]),
    }
    return render(request, "traces/scores/project.html", ctx)


@login_required
@require_GET
def scores_export(request: HttpRequest, project_id: int) -> HttpResponseBase:
    """`?format=csv|jsonl` and `GET /api/v1/scores`'s filters (a bad value is a 400 here)."""
    project = project_for(request, project_id)
    fmt = request.GET.get("format", "csv")
    if fmt not in export.FORMATS:
        return HttpResponse("format: csv or jsonl", status=400, content_type="text/plain")
    scores = ScoreFilter(
        request.GET, queryset=Score.objects.filter(project=project).order_by("created_at", "id")
    )
    if not scores.is_valid():
        return HttpResponse(f"bad filter: {scores.errors.as_text()}", status=400, content_type="text/plain")
    return export.response(scores.qs, fmt, f"scores-{project.slug}")


@login_required
@require_POST
def config_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for(request, project_id, Action.MANAGE_SCORES)
    try:
        fields = actions.check_config(project, request.POST)
    except ScoreError as e:
        messages.error(request, f"Score config not created: {e.field} {e.message}.")
        return HttpResponseRedirect(scores_url(project) + "#configs")
    config = actions.do_create_config(project, request.user, fields)
    messages.success(request, f"Score config {config.name} ({config.describe()}) created.")
    return HttpResponseRedirect(scores_url(project) + "#configs")


@login_required
@require_POST
def config_change(request: HttpRequest, project_id: int, config_id: int) -> HttpResponse:
    project = project_for(request, project_id, Action.MANAGE_SCORES)
    config = ScoreConfig.objects.filter(project=project, pk=config_id).select_related("project__team").first()
    if config is None:
        raise Http404("No such score config.")
    description = str(request.POST.get("description", config.description))[:500]
    archived = request.POST.get("archived") == "1"
    if actions.do_change_config(config, request.user, description.strip(), archived):
        messages.success(request, f"Score config {config.name} {'archived' if archived else 'saved'}.")
    return HttpResponseRedirect(scores_url(project) + "#configs")
