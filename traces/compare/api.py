"""`GET /api/v1/compare?a=<project_id>:<run_id>&b=…`: two runs compared, as JSON.

The same facts as the compare page and `arcana trace diff --json` (`runtime.compare.Comparison.to_dict`,
fed from the projections by `traces.compare.service`). Session or read + ingest key; a run outside the
caller's scope — either one — is a 404 (DESIGN.md §8), never a 403.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from traces.compare import service as cmp
from traces.core.api import BaseView, error_response
from traces.core.serializers import ErrorSerializer


class CompareView(BaseView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "a", str, required=True, description="run A as `<project_id>:<run_id>` (URL-encoded)"
            ),
            OpenApiParameter("b", str, required=True, description="run B, same form"),
            OpenApiParameter(
                "turn",
                int,
                description="working-set diff of the pair holding A's turn N (default: the first divergence)",
            ),  # fmt: skip
            OpenApiParameter("agent_a", str, description="pool agent of run A (default: its first)"),
            OpenApiParameter("agent_b", str, description="pool agent of run B (default: its first)"),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: ErrorSerializer, 404: ErrorSerializer},
        summary="Compare two runs: summaries, aligned turns, first divergence, working-set diff",
        description="`a` and `b` are summaries side by side (turns, steps, tokens, peak context, "
        "compressions by level, drops, summaries, pins made / rejected / active at the end, recalls found / "
        "not found, tool calls, errors, duration, status, final answer); `turns` the aligned pairs "
        "(`aligned_by`: turn number, or matching user message when the scripts differ); `divergence` the "
        "first pair whose working sets differ; `working_set_diff` that pair's (or `turn`'s) step-level diff. "
        "The same JSON as `arcana trace diff --json`.",
    )
    def get(self, request: Request) -> Response:
        p = request.query_params
        if cmp.parse_run_ref(p.get("a")) is None or cmp.parse_run_ref(p.get("b")) is None:
            return error_response(
                400, "bad_request", [{"field": "a/b", "message": "both must be <project_id>:<run_id>"}]
            )
        run_a, run_b = cmp.find_run(request, p.get("a")), cmp.find_run(request, p.get("b"))
        if run_a is None or run_b is None:
            raise Http404("no such run")
        turn = p.get("turn")
        if turn is not None and not turn.isdigit():
            return error_response(400, "bad_request", [{"field": "turn", "message": "a positive integer"}])
        number = int(turn) if turn is not None else None
        c = cmp.compare_runs(run_a, run_b, agent_a=p.get("agent_a"), agent_b=p.get("agent_b"), turn=number)
        data = c.to_dict(turn=number)
        data["a"]["project"] = run_a.project_id
        data["b"]["project"] = run_b.project_id
        data["a"]["url"], data["b"]["url"] = run_a.api_url(), run_b.api_url()
        data["page"] = cmp.compare_url(run_a, run_b)
        return Response(data)
