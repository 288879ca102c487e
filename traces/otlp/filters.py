"""`SpanFilter`: the raw spans list's one filter (`GET /api/v1/projects/<id>/spans`)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from traces.models import Span
from traces.runs.filters import FlagFilter


class SpanFilter(django_filters.FilterSet):  # type: ignore[misc]
    """`trace_id` (32 hex digits), `run_id` (the run a span was derived into), `pending` (true: the
    spans stored whose run is not derived yet; false: the others). A bad value is a 400 naming it."""

    trace_id = django_filters.CharFilter(field_name="trace_id", max_length=32)
    run_id = django_filters.CharFilter(field_name="run_id", max_length=200)
    pending = FlagFilter(method="filter_pending")

    class Meta:
        model = Span
        fields = ["trace_id", "run_id", "pending"]

    def filter_pending(self, queryset: QuerySet[Span], name: str, value: bool | None) -> QuerySet[Span]:
        if value is None:
            return queryset
        return queryset.filter(run_id="") if value else queryset.exclude(run_id="")
