"""The re-run API (issue 38):

    POST /api/v1/projects/<id>/runs/<run_id>/steps/<n>/rerun   {"turn", "agent"?, "edits", "provider"?, "model"?} → 202
    GET  /api/v1/projects/<id>/branches/<branch_id>              the branch's status and links

`<n>` is the step's number within turn `turn` (1-based, as on the turn page). Readers of a project read
its branches; starting one needs a member (viewers 403, outsiders 404). Bad input is a 400 naming the
field (`edits[0].index`, `provider`, `model`), a missing step a 404.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from traces.branches import actions
from traces.branches.serializers import BranchSerializer, RerunRequestSerializer
from traces.core import access
from traces.core.api import BaseView, error_response
from traces.core.serializers import ErrorSerializer
from traces.models import Action, Branch


def branch_json(branch: Branch) -> dict[str, Any]:
    run = branch.branch_run
    return {
        "id": branch.pk,
        "status": branch.status,
        "error": branch.error or None,
        "answer": branch.answer if branch.status == Branch.Status.COMPLETED else None,
        "project": branch.project_id,
        "run_id": branch.run.run_id,
        "agent": branch.agent or None,
        "turn": branch.turn_number,
        "step": branch.step_number,
        "edits": branch.edits,
        "provider": branch.provider,
        "model": branch.model,
        "branch_run_id": branch.branch_run_id,
        "branch_run_url": run.get_absolute_url() if run is not None else None,
        "compare_url": branch.compare_url() if run is not None else None,
        "page_url": branch.get_absolute_url(),
        "created_at": branch.created_at.isoformat(),
        "finished_at": branch.finished_at.isoformat() if branch.finished_at else None,
    }


class RerunView(BaseView):
    key_scope = "read"

    @extend_schema(
        request=RerunRequestSerializer,
        responses={202: BranchSerializer, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
        summary="Re-run a step from an edited context",
    )
    def post(self, request: Request, project_id: int, run_id: str, number: int) -> Response:
        run = access.get_run(request, project_id, run_id)
        access.require(request, run.project.team_id, Action.CONVERSE)
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            return error_response(
                400, "invalid input", [{"field": "body", "message": "must be a JSON object"}]
            )
        turn = body.get("turn")
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
            return error_response(
                400, "invalid input", [{"field": "turn", "message": "must be a turn number >= 1"}]
            )
        agent = body.get("agent")
        if agent is not None and not isinstance(agent, str):
            return error_response(400, "invalid input", [{"field": "agent", "message": "must be a string"}])
        try:
            checked = actions.check_rerun(
                run,
                turn,
                number,
                agent=agent,
                edits=body.get("edits", []),
                provider=body.get("provider"),
                model=body.get("model"),
            )
            branch = actions.do_rerun_step(run, checked, user=request.user)
        except actions.RerunInputError as exc:
            if exc.status == 429:
                return error_response(429, str(exc), exc.detail, headers={"Retry-After": "30"})
            return error_response(
                exc.status, "no such step" if exc.status == 404 else "invalid input", exc.detail
            )
        return Response(branch_json(branch), status=202)


class BranchView(BaseView):
    @extend_schema(responses={200: BranchSerializer, 404: ErrorSerializer}, summary="A re-run's status")
    def get(self, request: Request, project_id: int, branch_id: int) -> Response:
        branch = (
            Branch.objects.filter(pk=branch_id, project_id=project_id, project__in=access.projects(request))
            .select_related("run", "project")
            .first()
        )
        if branch is None:
            raise Http404("No such branch.")
        return Response(branch_json(branch))


RUN = "projects/<id:project_id>/runs/<run_id:run_id>"

branch_urls = [
    path(f"{RUN}/steps/<id:number>/rerun", RerunView.as_view(), name="api-rerun-step"),
    path("projects/<id:project_id>/branches/<id:branch_id>", BranchView.as_view(), name="api-branch"),
]
