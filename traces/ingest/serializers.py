"""Shapes of the ingest and upload endpoints (an upload's status, a batch's per-event results)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from traces.models import (
    Upload,
    run_api_url,
    run_page_url,
)

#: Per readable field of a serializer class: its name, how to read its value from an instance, how to
#: represent a value that is not None, and whether it is a plain `DateTimeField` (see `_iso_datetime`).


class UploadSerializer(serializers.ModelSerializer[Upload]):
    url = serializers.SerializerMethodField()
    line_errors = serializers.JSONField()
    runs = serializers.JSONField()
    run_links = serializers.SerializerMethodField(help_text="each run the upload touched, with its addresses")

    class Meta:
        model = Upload
        fields = [
            "id", "url", "status", "original_name", "bytes", "lines_total", "lines_done", "accepted",
            "duplicates", "rejected", "line_errors", "runs", "run_links", "error", "created_at", "started_at",
            "finished_at",
        ]  # fmt: skip

    def get_url(self, upload: Upload) -> str:
        return reverse("api-upload", kwargs={"upload_id": upload.pk})

    def get_run_links(self, upload: Upload) -> list[dict[str, str]]:
        return [
            {
                "run_id": rid,
                "url": run_api_url(upload.project_id, rid),
                "page_url": run_page_url(upload.project_id, rid),
            }
            for rid in upload.runs or []
            if isinstance(rid, str)
        ]


class EventResultSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["accepted", "duplicate", "rejected"])
    error = serializers.CharField(required=False)
    field = serializers.CharField(
        required=False, help_text="dotted path of the value to blame, e.g. metadata.turn"
    )


class IngestRequestSerializer(serializers.Serializer[Any]):
    events = serializers.ListField(child=serializers.DictField(), help_text="Arcana 1.2 TraceEvent objects")


class IngestResponseSerializer(serializers.Serializer[Any]):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    rejected = serializers.IntegerField()
    results = EventResultSerializer(many=True)
    # With rejections (207), the one error shape too (runtime.errors.error_body).
    error = serializers.CharField(required=False)
    detail = serializers.ListField(child=serializers.DictField(), required=False)
