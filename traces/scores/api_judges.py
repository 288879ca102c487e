"""Model judges in the API (issue 36): `/api/v1/projects/<id>/judges` and `/judge-runs`.

Thin views over `traces/scores/judges.py`: viewers read judges and their runs (status, counts, tokens);
admins create, change and delete judges, start a judge run over a runs filter (capped in runs and
tokens; a Celery worker does it), cancel one and run it again (`Action.MANAGE_SCORES`, people only: an
API key reads). A project outside the caller's teams is a 404, never a 403.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from traces.core.api import BaseView, error_response
from traces.core.serializers import ErrorSerializer
from traces.models import Action, Judge, JudgeRun
from traces.scores import judges
from traces.scores.api_queues import body, project_of
from traces.scores.serializers import (
    JudgeRunSerializer,
    JudgeRunStartSerializer,
    JudgeSerializer,
    JudgeWriteSerializer,
)
from traces.scores.targets import ScoreError

RUNS_LISTED = 100


def judge_of(request: Request, project_id: int, judge_id: int, action: str = Action.READ) -> Judge:
    project = project_of(request, project_id, action)
    judge = Judge.objects.filter(project=project, pk=judge_id).select_related("config").first()
    if judge is None:
        raise Http404("no such judge")
    judge.project = project
    return judge


def judge_run_of(request: Request, project_id: int, judge_run_id: int, action: str = Action.READ) -> JudgeRun:
    project = project_of(request, project_id, action)
    jr = JudgeRun.objects.filter(project=project, pk=judge_run_id).select_related("judge").first()
    if jr is None:
        raise Http404("no such judge run")
    jr.project = project
    return jr


def _on_new_runs(data: dict[str, object]) -> bool | None:
    value = data.get("on_new_runs")
    if value is None:
        return None
    if not isinstance(value, bool):
        raise exceptions.ValidationError({"on_new_runs": "true or false"})
    return value


class JudgeListView(BaseView):
    @extend_schema(responses={200: JudgeSerializer(many=True)}, summary="A project's judges")
    def get(self, request: Request, project_id: int) -> Response:
        project = project_of(request, project_id)
        qs = Judge.objects.filter(project=project).select_related("config").order_by("name", "id")
        return Response({"results": JudgeSerializer(qs, many=True).data})

    @extend_schema(
        request=JudgeWriteSerializer,
        responses={201: JudgeSerializer, 400: ErrorSerializer},
        summary="Create a judge (team admins)",
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_of(request, project_id, Action.MANAGE_SCORES)
        data = body(request)
        auto = _on_new_runs(data)
        try:
            fields = judges.check_judge(project, data)
        except ScoreError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        judge = judges.do_create_judge(project, request.user, fields)
        if auto:
            judges.do_set_auto(judge, request.user, True)
        return Response(JudgeSerializer(judge).data, status=status.HTTP_201_CREATED)


class JudgeDetailView(BaseView):
    @extend_schema(responses={200: JudgeSerializer}, summary="A judge")
    def get(self, request: Request, project_id: int, judge_id: int) -> Response:
        return Response(JudgeSerializer(judge_of(request, project_id, judge_id)).data)

    @extend_schema(
        request=JudgeWriteSerializer(partial=True),
        responses={200: JudgeSerializer, 400: ErrorSerializer},
        summary="Change a judge (team admins); running judge runs keep what they started with",
    )
    def patch(self, request: Request, project_id: int, judge_id: int) -> Response:
        judge = judge_of(request, project_id, judge_id, Action.MANAGE_SCORES)
        data = body(request)
        auto = _on_new_runs(data)
        try:
            fields = judges.check_judge_change(judge, data)
        except ScoreError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        judges.do_change_judge(judge, request.user, fields)
        if auto is not None:
            judges.do_set_auto(judge, request.user, auto)
        return Response(JudgeSerializer(judge).data)

    @extend_schema(
        responses={204: None, 409: ErrorSerializer},
        summary="Delete a judge (team admins; the scores it gave stay); 409 while one of its runs works",
    )
    def delete(self, request: Request, project_id: int, judge_id: int) -> Response:
        judge = judge_of(request, project_id, judge_id, Action.MANAGE_SCORES)
        if not judges.do_delete_judge(judge, request.user):
            return error_response(409, "a run of this judge is queued or running: cancel it first")
        return Response(status=status.HTTP_204_NO_CONTENT)


class JudgeRunListView(BaseView):
    @extend_schema(
        responses={200: JudgeRunSerializer(many=True)}, summary="A judge's runs, newest first (the last 100)"
    )
    def get(self, request: Request, project_id: int, judge_id: int) -> Response:
        judge = judge_of(request, project_id, judge_id)
        runs = JudgeRun.objects.filter(judge=judge).order_by("-created_at", "-id")[:RUNS_LISTED]
        return Response({"results": JudgeRunSerializer(runs, many=True).data})

    @extend_schema(
        request=JudgeRunStartSerializer,
        responses={202: JudgeRunSerializer, 400: ErrorSerializer},
        summary="Start a judge run over a runs filter, capped in runs and tokens (team admins)",
        description="Queued for a worker; follow it at `/api/v1/projects/<id>/judge-runs/<id>`.",
    )
    def post(self, request: Request, project_id: int, judge_id: int) -> Response:
        judge = judge_of(request, project_id, judge_id, Action.MANAGE_SCORES)
        try:
            fields = judges.check_run(body(request))
        except ScoreError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        jr = judges.do_start_run(judge, request.user, fields)
        return Response(JudgeRunSerializer(jr).data, status=status.HTTP_202_ACCEPTED)


class JudgeRunDetailView(BaseView):
    @extend_schema(responses={200: JudgeRunSerializer}, summary="A judge run: its status and counts")
    def get(self, request: Request, project_id: int, judge_run_id: int) -> Response:
        return Response(JudgeRunSerializer(judge_run_of(request, project_id, judge_run_id)).data)


class JudgeRunCancelView(BaseView):
    @extend_schema(
        request=None,
        responses={202: JudgeRunSerializer, 409: ErrorSerializer},
        summary="Cancel a judge run (team admins): a queued one at once, a running one after its current run",
    )
    def post(self, request: Request, project_id: int, judge_run_id: int) -> Response:
        jr = judge_run_of(request, project_id, judge_run_id, Action.MANAGE_SCORES)
        if not judges.do_cancel(jr, request.user):
            return error_response(409, "this judge run has finished")
        jr.refresh_from_db()
        return Response(JudgeRunSerializer(jr).data, status=status.HTTP_202_ACCEPTED)


class JudgeRunAgainView(BaseView):
    @extend_schema(
        request=None,
        responses={202: JudgeRunSerializer},
        summary="Run a judge run again: the same judge, filter and caps, as a new judge run (team admins)",
    )
    def post(self, request: Request, project_id: int, judge_run_id: int) -> Response:
        jr = judge_run_of(request, project_id, judge_run_id, Action.MANAGE_SCORES)
        again = judges.do_rerun(jr, request.user)
        return Response(JudgeRunSerializer(again).data, status=status.HTTP_202_ACCEPTED)
