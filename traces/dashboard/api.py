"""The dashboard and prices in the read API: `GET /api/v1/projects/<id>/dashboard` (the figures of a
range and filters, from the rollups, as the page draws them) and `GET /api/v1/projects/<id>/prices`
(the price table in force: defaults and the project's own). Session or read key; a project outside
the caller's scope is a 404. Changing prices is an admin's page (audit-logged), not an API call yet."""

from __future__ import annotations

from django import forms
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from runtime.pricing import DEFAULT_PRICES, PRICES_CHECKED, UNPRICED_PRESETS
from traces.core import access
from traces.core.api import BaseView, error_response
from traces.core.serializers import ErrorSerializer
from traces.dashboard import figures, rollups
from traces.dashboard.filters import resolve
from traces.dashboard.prices import project_table
from traces.dashboard.serializers import price_dict
from traces.models import Project


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
