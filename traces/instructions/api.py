"""`/api/v1/projects/<project_id>/runs/<run_id>/instruction-checks`: a run's lost instructions and
the model checks of them (issue 35).

`GET` (the viewer role; a read + ingest key of the project) lists the lost instructions of `?agent=`
(default the plain chat's "") each with its latest check, and every check of that agent, newest
first. `POST` (the member role, `Action.SCORE`; a key of the project) queues checks:
`{"model": "provider/model", "agent": "", "instructions": [keys]}` (default every lost instruction)
and answers 202 with the queued rows; the verdicts arrive as the worker writes them. A run outside
the caller's reach is a 404; bad input a 400 in the one error shape.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from traces.core import access
from traces.core.api import BaseView
from traces.core.serializers import ErrorSerializer
from traces.instructions import actions
from traces.instructions.lost import lost_instructions
from traces.instructions.serializers import (
    CheckRequestSerializer,
    InstructionCheckSerializer,
    InstructionChecksSerializer,
    LostInstructionSerializer,
    QueuedChecksSerializer,
)
from traces.models import Action, InstructionCheck

CHECKS_LISTED = 500


def _agent(request: Request) -> str:
    agent = request.query_params.get("agent", "")
    if len(agent) > 200 or "\x00" in agent:
        raise exceptions.ValidationError({"agent": "an agent name: at most 200 characters, no NUL"})
    return agent


class InstructionChecksView(BaseView):
    """A run's lost instructions with their checks; `POST` starts checks."""

    @extend_schema(
        parameters=[OpenApiParameter("agent", str, description='the agent ("" for a plain chat)')],
        responses={200: InstructionChecksSerializer},
        summary="A run's lost instructions and the model checks of them",
    )
    def get(self, request: Request, project_id: int, run_id: str) -> Response:
        run = access.get_run(request, project_id, run_id)
        agent = _agent(request)
        lost = lost_instructions(run, agent)
        checks = InstructionCheck.objects.filter(project_id=run.project_id, run_id=run.run_id, agent=agent)
        return Response(
            {
                "lost_instructions": LostInstructionSerializer(lost, many=True).data,
                "checks": InstructionCheckSerializer(checks[:CHECKS_LISTED], many=True).data,
            }
        )

    @extend_schema(
        request=CheckRequestSerializer,
        responses={202: QueuedChecksSerializer, 400: ErrorSerializer},
        summary="Ask a model whether later answers contradict the run's lost instructions (members)",
    )
    def post(self, request: Request, project_id: int, run_id: str) -> Response:
        run = access.get_run(request, project_id, run_id)
        access.require(request, run.project.team_id, Action.SCORE)
        data: Any = request.data
        if not isinstance(data, dict):
            raise exceptions.ValidationError({"body": 'a JSON object {"model": "provider/model", ...}'})
        try:
            rows = actions.do_check_lost_instructions(run, request.user, actions.check_request(data))
        except actions.CheckError as e:
            raise exceptions.ValidationError({e.field: e.message}) from None
        return Response(
            {"checks": InstructionCheckSerializer(rows, many=True).data}, status=status.HTTP_202_ACCEPTED
        )
