"""The raw span as the API shows it: its keys, the run it was derived into, and the span itself as it
was decoded from the request (`runtime.otlp.Span`: every attribute, event and link, resource, scope)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from traces.ingest.spans import stored_span
from traces.models import Span


class SpanSerializer(serializers.ModelSerializer[Span]):
    pending = serializers.SerializerMethodField(help_text="true until the span's run is derived")
    span = serializers.SerializerMethodField(help_text="the span as received (decoded OTLP)")

    class Meta:
        model = Span
        fields = ["trace_id", "span_id", "conversation", "run_id", "pending", "received_at", "span"]

    def get_pending(self, obj: Span) -> bool:
        return obj.run_id == ""

    def get_span(self, obj: Span) -> dict[str, Any]:
        return dict(stored_span(bytes(obj.body)))
