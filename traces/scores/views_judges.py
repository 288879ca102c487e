"""Model judges in the browser: make a judge, run it over a runs filter (capped in runs and tokens),
follow a judge run (its progress, its errors — an unparseable answer is shown, never a score), cancel
it, run it again. Admins manage judges (`Action.MANAGE_SCORES`); everyone in the team reads."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from traces.models import Action, Judge, JudgeResult, JudgeRun, membership_of
from traces.scores import judges
from traces.scores.targets import ScoreError
from traces.scores.views import project_for, scores_url

RESULTS_SHOWN = 200


def _run_url(jr: JudgeRun) -> str:
    return reverse("traces:judge_run", kwargs={"project_id": jr.project_id, "judge_run_id": jr.pk})


def _judge_run(
    request: HttpRequest, project_id: int, judge_run_id: int, action: str = Action.READ
) -> JudgeRun:
    project = project_for(request, project_id, action)
    jr = JudgeRun.objects.filter(project=project, pk=judge_run_id).select_related("judge__config").first()
    if jr is None:
        raise Http404("No such judge run.")
    jr.project = project
    return jr


@login_required
@require_POST
def judge_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for(request, project_id, Action.MANAGE_SCORES)
    try:
        fields = judges.check_judge(project, request.POST)
    except ScoreError as e:
        messages.error(request, f"Judge not created: {e.field} {e.message}.")
        return HttpResponseRedirect(scores_url(project) + "#judges")
    judge = judges.do_create_judge(project, request.user, fields)
    messages.success(request, f"Judge {judge.name} created.")
    return HttpResponseRedirect(scores_url(project) + "#judges")


@login_required
@require_POST
def judge_run_start(request: HttpRequest, project_id: int, judge_id: int) -> HttpResponse:
    project = project_for(request, project_id, Action.MANAGE_SCORES)
    judge = Judge.objects.filter(project=project, pk=judge_id).select_related("config").first()
    if judge is None:
        raise Http404("No such judge.")
    judge.project = project
    try:
        fields = judges.check_run(request.POST)
    except ScoreError as e:
        messages.error(request, f"Judge run not started: {e.field} {e.message}.")
        return HttpResponseRedirect(scores_url(project) + "#judges")
    jr = judges.do_start_run(judge, request.user, fields)
    messages.success(request, f"Judge {judge.name} queued over the filter.")
    return HttpResponseRedirect(_run_url(jr))


@login_required
@require_POST
def judge_auto(request: HttpRequest, project_id: int, judge_id: int) -> HttpResponse:
    """Turn "judge each new finished run" on or off (`on=1` / `on=0`)."""
    project = project_for(request, project_id, Action.MANAGE_SCORES)
    judge = Judge.objects.filter(project=project, pk=judge_id).first()
    if judge is None:
        raise Http404("No such judge.")
    judge.project = project
    on = request.POST.get("on") == "1"
    if judges.do_set_auto(judge, request.user, on):
        messages.success(
            request,
            f"Judge {judge.name} {'judges each new finished run' if on else 'no longer judges new runs'}.",
        )
    return HttpResponseRedirect(scores_url(project) + "#judges")


@login_required
@require_GET
def judge_run_page(request: HttpRequest, project_id: int, judge_run_id: int) -> HttpResponse:
    jr = _judge_run(request, project_id, judge_run_id)
    membership = membership_of(request.user, jr.project.team_id)
    results = JudgeResult.objects.filter(judge_run=jr).select_related("score").order_by("-id")
    ctx = {
        "project": jr.project,
        "jr": jr,
        "results": list(results[:RESULTS_SHOWN]),
        "errors": list(results.filter(status=JudgeResult.Status.ERROR)[:RESULTS_SHOWN]),
        "can_manage": membership is not None and membership.can(Action.MANAGE_SCORES),
    }
    return render(request, "traces/scores/judge_run.html", ctx)


@login_required
@require_POST
def judge_run_cancel(request: HttpRequest, project_id: int, judge_run_id: int) -> HttpResponse:
    jr = _judge_run(request, project_id, judge_run_id, Action.MANAGE_SCORES)
    if judges.do_cancel(jr, request.user):
        messages.success(request, "Judge run cancelled (a running one stops after the run it is judging).")
    return HttpResponseRedirect(_run_url(jr))


@login_required
@require_POST
def judge_run_again(request: HttpRequest, project_id: int, judge_run_id: int) -> HttpResponse:
    jr = _judge_run(request, project_id, judge_run_id, Action.MANAGE_SCORES)
    again = judges.do_rerun(jr, request.user)
    messages.success(request, "Judge queued again over the same filter.")
    return HttpResponseRedirect(_run_url(again))
