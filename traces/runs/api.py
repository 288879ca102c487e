"""The read API over the projections: runs, one run with its turns and pins, one turn, a run's raw
events. Every run is found through `traces.core.access`: a run outside the caller's scope is a 404."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpResponseRedirect
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from traces.core import access, sqlread
from traces.core.api import (
    BaseView,
    error_response,
)
from traces.core.authentication import key_of
from traces.core.serializers import ErrorSerializer, represent, represent_many
from traces.dashboard import prices
from traces.models import (
    Action,
    Event,
    Pin,
    PrimitiveEvent,
    Run,
    Step,
    Turn,
)
from traces.runs import labels
from traces.runs.filters import RunFilter
from traces.runs.serializers import (
    EventSerializer,
    PinSerializer,
    PrimitiveEventSerializer,
    RunSerializer,
    StepSerializer,
    TurnSerializer,
)
from traces.teams import actions as teams

# --------------------------------------------------------------------------------------------------
# Read API


class RunListView(BaseView, generics.ListAPIView[Run]):
    """Runs of the caller's projects, newest first, filtered by `RunFilter` (the runs page's filter):
    a bad value is a 400 naming the parameter."""

    serializer_class = RunSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = RunFilter

    @extend_schema(
        description="Each run carries its tokens (`prompt_tokens`, `completion_tokens`, `tokens`) and its "
        "cost with the project's prices: `cost_usd` (null when none of its models has a price: never "
        "guessed), `unpriced_tokens` (the tokens of models without one) and `unpriced_models`."
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return _paginated(self, RunSerializer, with_costs)

    def get_queryset(self) -> QuerySet[Run]:
        return access.runs(self.request).select_related("project__team").order_by("-started_at", "-pk")


def cost_fields(summary: Any) -> dict[str, Any]:
    """A run's cost in the list and detail: `cost_usd` (None: nothing priced), the unpriced part."""
    d = summary.to_dict()
    return {k: d[k] for k in ("cost_usd", "unpriced_tokens", "unpriced_models")}


def with_costs(runs: list[Run], rows: list[dict[str, Any]]) -> None:
    """The runs' cost fields into their rows (one grouped query over the page's steps per project)."""
    prices.attach_run_costs(runs)
    for run, row in zip(runs, rows, strict=True):
        row.update(cost_fields(run.cost_summary))  # type: ignore[attr-defined]


def _paginated(
    view: generics.GenericAPIView[Any],
    serializer_class: type[Any],
    extend: Callable[[list[Any], list[dict[str, Any]]], None] | None = None,
) -> Response:
    """`ListAPIView.list` with the rows written by `represent_many` (the same JSON); `extend` adds
    fields to a page's rows from its objects."""
    queryset = view.filter_queryset(view.get_queryset())
    page = view.paginate_queryset(queryset)
    objects = list(queryset if page is None else page)
    rows = represent_many(serializer_class, objects)
    if extend is not None:
        extend(objects, rows)
    return Response(rows) if page is None else view.get_paginated_response(rows)


class LegacyRunView(BaseView):
    """`/api/v1/runs/<id>[/turns/<n>|/events]`, the unscoped addresses of earlier versions: a 302 to
    the project-scoped address when exactly one run the caller can read has this id, 404 otherwise
    (never "the newest": with two candidates, which one a client meant is unknown)."""

    @extend_schema(exclude=True)
    def get(self, request: Request, run_id: str, number: int | None = None) -> HttpResponseRedirect:
        found = list(Run.objects.filter(run_id=run_id, project__in=access.projects(request))[:2])
        if not found:
            raise Http404("no such run")
        if len(found) > 1:
            raise Http404(
                "several of your projects have a run with this id; "
                "use /api/v1/projects/<project_id>/runs/<run_id> (the `url` of each run in /api/v1/runs)"
            )
        run = found[0]
        name = request.resolver_match.url_name if request.resolver_match else ""
        if name == "api-legacy-events":
            url = run.api_events_url()
        elif number is not None:
            url = run.api_turn_url(number)
        else:
            url = run.api_url()
        query = request.GET.urlencode()
        return HttpResponseRedirect(f"{url}?{query}" if query else url)


def _api_turn_link(run: Run) -> Callable[[int], str]:
    """`number → run.api_turn_url(number)` from two `reverse()` calls instead of one a turn: the
    address with the number swapped, checked against a second real call (else each turn's own call)."""
    probe = 987654321
    head, sep, tail = run.api_turn_url(probe).rpartition(str(probe))
    if sep and run.api_turn_url(1) == f"{head}1{tail}":
        return lambda number: f"{head}{int(number)}{tail}"
    return run.api_turn_url


def _run_link(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "url": run.api_url(),
        "page_url": run.get_absolute_url(),
        "agents": list(run.agents or []),
        "status": run.status,
        "started_at": run.started_at.isoformat() if run.started_at else None,
    }


def related_runs(run: Run) -> dict[str, Any]:
    """The runs linked to `run` (`Run.related_runs`, as the run page shows them both ways): its
    sub-agent bundle in start order (itself included), the run that delegated it (`stored: false`
    with no addresses when that run was not uploaded), and the runs it delegated, in start order."""
    related = run.related_runs
    by: dict[str, Any] | None = None
    if related.delegated_by is not None:
        by = {**_run_link(related.delegated_by), "stored": True}
    elif run.delegated_by_run_id:
        by = {"run_id": run.delegated_by_run_id, "stored": False}
    return {
        "bundle": [_run_link(r) for r in related.bundle],
        "delegated_by": by,
        "delegated": [_run_link(r) for r in related.delegated],
    }


class RunDetailView(BaseView):
    @extend_schema(
        responses={200: RunSerializer},
        summary="One run with its turns, pins and related runs",
        description="`related`: `bundle` (the runs of its sub-agent bundle in start order, itself "
        "included), `delegated_by` (the run that delegated it, or null) and `delegated` (the runs it "
        "delegated), each with `run_id`, `url`, `page_url`, `agents`, `status` and `started_at`.",
    )
    def get(self, request: Request, project_id: int, run_id: str) -> Response:
        run = access.get_run(request, project_id, run_id)
        data = represent(RunSerializer, run)
        # The turns and pins by SQL written once (`traces.core.sqlread`): the same rows and order as
        # `run.turn_set.order_by("agent", "number")` and `run.pins.all()` (Pin's Meta.ordering).
        turns = sqlread.fetch(Turn, 'WHERE run_id = %s ORDER BY agent, "number"', [run.pk])
        turn_list = represent_many(TurnSerializer, turns)
        turn_url = _api_turn_link(run)
        for turn in turn_list:
            turn["url"] = turn_url(turn["number"])
        data["turn_list"] = turn_list
        pins = sqlread.fetch(Pin, "WHERE run_id = %s ORDER BY created_turn, created_step, id", [run.pk])
        data["pins"] = represent_many(PinSerializer, pins)
        data["related"] = related_runs(run)
        cost = prices.run_cost(run)  # issue 37: by model, with the project's prices
        data.update(cost_fields(cost))  # as in the list
        data["cost"] = cost.to_dict()
        return Response(data)

    @extend_schema(
        request={
            "application/json": {
                "type": "object",
                "properties": {
                    "name": {"type": ["string", "null"], "maxLength": 200},
                    "tags": {"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 20},
                },
            }
        },
        responses={200: RunSerializer, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
        summary="Name and tag a run (audited)",
        description="`name` (one line, up to 200 characters) and `tags` (up to 20, each 1–50 letters, digits "
        "or - _ . : / @ +); either may be left out, `null` shows the trace's again (`metadata.run_name` / "
        "`run_tags`). Members and up; a read + ingest API key of the run's project. Outsiders get 404.",
    )
    def patch(self, request: Request, project_id: int, run_id: str) -> Response:
        run = access.get_run(request, project_id, run_id)
        key = key_of(request)
        if key is None:
            access.require(request, run.project.team_id, Action.LABEL)
        body = request.data
        if not isinstance(body, dict) or not body or set(body) - {"name", "tags"}:
            return error_response(
                400,
                "send a JSON object with `name` and/or `tags`",
                [{"field": "body", "message": "only name, tags"}],
            )
        try:
            labels.do_set_labels(
                run,
                key or request.user,
                name=body.get("name", labels.UNCHANGED),
                tags=body.get("tags", labels.UNCHANGED),
            )
        except labels.LabelError as exc:
            return error_response(400, "invalid name or tags", exc.detail)
        return Response(represent(RunSerializer, run))

    @extend_schema(
        request=None,
        responses={204: None, 403: ErrorSerializer, 404: ErrorSerializer},
        summary="Delete a run: its raw events and every projection (audited)",
        description="Session callers need the admin or owner role in the run's team; a read + ingest API "
        "key of the run's project may delete its runs. Outsiders get 404.",
    )
    def delete(self, request: Request, project_id: int, run_id: str) -> Response:
        run = access.get_run(request, project_id, run_id)
        key = key_of(request)
        if key is None:
            access.require(request, run.project.team_id, Action.DELETE_RUNS)
        teams.do_delete_run(run, key or request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TurnDetailView(BaseView):
    @extend_schema(
        parameters=[OpenApiParameter("agent", str, description="one pool agent (default: every agent)")],
        responses={200: OpenApiTypes.OBJECT},
        summary="One turn: its steps with decisions and primitive events, and the pins active at it",
    )
    def get(self, request: Request, project_id: int, run_id: str, number: int) -> Response:
        run = access.get_run(request, project_id, run_id)
        agent = request.query_params.get("agent")
        turns = run.turn_set.filter(number=number)
        if agent is not None:
            turns = turns.filter(agent=agent)
        turn_list = list(turns.order_by("agent"))
        if not turn_list:
            raise Http404("no such turn")
        steps_qs = (
            Step.objects.filter(turn__in=turn_list)
            .select_related("decision")
            .prefetch_related(
                Prefetch("primitive_events", queryset=PrimitiveEvent.objects.order_by("timestamp", "id"))
            )
            .order_by("agent", "number")
        )
        steps = list(steps_qs)
        turn_cost, step_costs = prices.step_costs(run.project_id, steps)  # issue 37
        step_list = represent_many(StepSerializer, steps)
        for item, step, cost in zip(step_list, steps, step_costs, strict=True):
            item["cached_tokens"] = step.cached_tokens
            item["cost_usd"] = None if cost is None else round(cost, 8)
        primitives = run.primitive_events.filter(turn_number=number)
        if agent is not None:
            primitives = primitives.filter(agent=agent)
        return Response(
            {
                "run_id": run.run_id,
                "project_id": run.project_id,
                "run_url": run.api_url(),
                "page_url": run.turn_url(number),
                "turn": number,
                "agents": [t.agent for t in turn_list],
                "turns": represent_many(TurnSerializer, turn_list),
                "steps": step_list,
                "cost": turn_cost.to_dict(),
                "active_pins": represent_many(PinSerializer, run.active_pins_at(number, agent=agent)),
                "primitive_events": represent_many(
                    PrimitiveEventSerializer, primitives.order_by("timestamp", "id")
                ),
            }
        )


class EventListView(BaseView, generics.ListAPIView[Event]):
    """The run's raw events, oldest first; `?type=` filters by event type (comma-separated)."""

    serializer_class = EventSerializer

    @extend_schema(parameters=[OpenApiParameter("type", str, description="event types, comma-separated")])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return _paginated(self, EventSerializer)

    def get_queryset(self) -> QuerySet[Event]:
        run = access.get_run(self.request, self.kwargs["project_id"], self.kwargs["run_id"])
        qs = run.raw_events()
        types = [t for t in (self.request.query_params.get("type") or "").split(",") if t]
        if types:
            qs = qs.filter(event_type__in=types)
        return qs
