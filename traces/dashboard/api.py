"""The dashboard and prices in the read API: `GET /api/v1/projects/<id>/dashboard` (the figures of a
range and filters, from the rollups, as the page draws them) and `GET /api/v1/projects/<id>/prices`
(the price table in force: defaults and the project's own). Session or read key; a project outside
the caller's scope is a 404.

A project's own prices are changed by its team's admins and owners (`Action.MANAGE_PROJECTS`), each
change audit-logged as on the prices page (`traces.dashboard.actions`): `POST …/prices` (the model in
the body) or `PUT …/prices/<model>` set one (201 new, 200 changed), `DELETE …/prices/<model>` removes
it (204; 404 when the project has no price of its own for it). Viewers and members get 403 saying why;
an API key gets 403 too (a key is no admin)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from runtime.pricing import DEFAULT_PRICES, PRICES_CHECKED, UNPRICED_PRESETS
from traces.collab.notes import storable_text
from traces.core import access
from traces.core.api import BaseView, error_response
from traces.core.authentication import key_of
from traces.core.serializers import ErrorSerializer
from traces.dashboard import actions, figures, rollups
from traces.dashboard.filters import resolve
from traces.dashboard.prices import project_table
from traces.dashboard.serializers import PriceInputSerializer, own_price_dict, price_dict
from traces.models import Action, ModelPrice, Project


def _project(request: Request, project_id: int) -> Project:
    project = access.projects(request).filter(pk=project_id).first()
    if project is None:
        raise Http404("no such project")
    return project


class DashboardView(BaseView):
    @extend_schema(
        parameters=[
            OpenApiParameter("started_after", str, description="first day (UTC, YYYY-MM-DD), included"),
            OpenApiParameter("started_before", str, description="the day after the last, excluded"),
            OpenApiParameter("agent", str, description="a pool agent"),
            OpenApiParameter("model", str, description="the run's model"),
            OpenApiParameter("source", str, description="runtime, arcana or otlp"),
            OpenApiParameter(
                "score",
                str,
                description="score conditions, `;`-separated, as the runs list takes them: "
                "`helpfulness>=4;kept_constraint=true` (or `score.helpfulness>=4` as a parameter of its own)",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: ErrorSerializer, 404: ErrorSerializer},
        summary="A project's dashboard: runs, failures, latency, tokens and cost per day, by model and agent",
        description="`days`: one entry per day of the range (default: the last 30), `total` the range, "
        "`by_model` tokens and cost per step model (`cost_usd` null: not priced), `by_agent` per pool agent. "
        "Latency percentiles are exact to one histogram bucket (~12%). Read from the daily rollups.",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = _project(request, project_id)
        try:
            f, _ = resolve(request.query_params, strict=True)
        except forms.ValidationError as exc:
            return error_response(400, "bad_request", [{"message": m} for m in exc.messages])
        pending = rollups.refresh_project(project.pk)
        data = figures.figures(project.pk, f).to_dict()
        data["project_id"] = project.pk
        data["pending_days"] = [d.isoformat() for d in pending]
        return Response(data)


class PriceListView(BaseView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, 404: ErrorSerializer},
        summary="The project's price table: defaults (dated, with their source) and its own prices",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = _project(request, project_id)
        table = project_table(project.pk)
        return Response(
            {
                "project_id": project.pk,
                "currency": "USD",
                "unit": "per million tokens",
                "defaults_checked": PRICES_CHECKED,
                "own": {m: price_dict(p) for m, p in sorted(table.overrides.items())},
                "defaults": {m: price_dict(p) for m, p in sorted(DEFAULT_PRICES.items())},
                "unpriced_presets": dict(UNPRICED_PRESETS),
            }
        )


def _admin_project(request: Request, project_id: int) -> Project:
    """The project (404 outside the caller's scope) if the caller may change its prices (else 403)."""
    project = access.projects(request).filter(pk=project_id).select_related("team").first()
    if project is None:
        raise Http404("no such project")
    if key_of(request) is not None:
        raise exceptions.PermissionDenied("an API key cannot change prices: a team admin signed in can")
    try:
        access.require(request, project.team_id, Action.MANAGE_PROJECTS)
    except PermissionDenied as exc:
        raise exceptions.PermissionDenied(f"{exc} Prices are set by the team's admins and owners.") from None
    return project


def _set(request: Request, project: Project, data: object) -> Response:
    serializer = PriceInputSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    v = serializer.validated_data
    existed = ModelPrice.objects.filter(project=project, model=v["model"]).exists()
    row = actions.do_set_price(
        project,
        request.user,
        v["model"],
        v["input_per_million"],
        v["output_per_million"],
        v["cached_input_per_million"],
    )
    return Response(own_price_dict(row), status=200 if existed else 201)


_SET_RESPONSES: dict[int, Any] = {
    200: OpenApiTypes.OBJECT,
    201: OpenApiTypes.OBJECT,
    400: ErrorSerializer,
    403: ErrorSerializer,
    404: ErrorSerializer,
}


class PriceSetView(PriceListView):
    """`GET` the table, `POST` a model's price (admins)."""

    @extend_schema(
        request=PriceInputSerializer,
        responses=_SET_RESPONSES,
        summary="Set the project's price of a model (admins and owners; audit-logged)",
        description="USD per million tokens: `model`, `input_per_million`, `output_per_million`, "
        "`cached_input_per_million` (null: cached prompt tokens cost the input price). 201 when the "
        "project had no price of its own for the model, 200 when it changed one. Unknown fields, "
        "negative or non-numeric prices are a 400 naming the field.",
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = _admin_project(request, project_id)
        return _set(request, project, request.data)


class PriceDetailView(BaseView):
    @extend_schema(
        request=PriceInputSerializer,
        responses=_SET_RESPONSES,
        summary="Set the project's price of the model in the path (admins and owners; audit-logged)",
        description="The body as for `POST …/prices`, without `model` (or with the same one).",
    )
    def put(self, request: Request, project_id: int, model: str) -> Response:
        project = _admin_project(request, project_id)
        data = request.data
        if isinstance(data, dict):
            if "model" in data and data["model"] != model:
                return error_response(
                    400, "invalid input", [{"field": "model", "message": "the path names the model"}]
                )
            data = {**data, "model": model}
        return _set(request, project, data)

    @extend_schema(
        responses={204: None, 403: ErrorSerializer, 404: ErrorSerializer},
        summary="Remove the project's own price of a model (admins and owners; audit-logged)",
        description="The default price, if any, applies again. 404 when the project has no price of its own.",
    )
    def delete(self, request: Request, project_id: int, model: str) -> Response:
        project = _admin_project(request, project_id)
        if (
            len(model) > 200
            or not storable_text(model)
            or not actions.do_delete_price(project, request.user, model)
        ):
            raise Http404("this project has no price of its own for this model")
        return Response(status=204)
