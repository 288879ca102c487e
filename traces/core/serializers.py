"""DRF serializers for the read API and the shapes of the ingest and upload endpoints.

The read views write a serializer's output with `represent` / `represent_many`: the same fields, values
and order as `Serializer(instance).data`, with the serializer's fields built once per class. DRF builds
them anew for every serializer object (ModelSerializer inspects the model each time), which was most of
the CPU of a small response such as one run with its turns.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.db import models
from django.urls import reverse
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.settings import api_settings

from traces.models import (
    ContextDecision,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Turn,
    Upload,
    run_api_url,
    run_page_url,
)

#: Per readable field of a serializer class: its name, how to read its value from an instance, how to
#: represent a value that is not None, and whether it is a plain `DateTimeField` (see `_iso_datetime`).
FieldPlan = tuple[tuple[str, Callable[[Any], Any], Callable[[Any], Any], bool], ...]


_plans: dict[type[Any], FieldPlan] = {}


def field_plan(serializer_class: type[serializers.BaseSerializer[Any]]) -> FieldPlan:
    """The readable fields of `serializer_class`, built once. Only for serializers whose output does
    not depend on their context (no request, no hyperlinked fields): the fields are shared by every
    call. A field read straight from a model column is read with `getattr` (DRF's `get_attribute`
    would also call a callable, which a column value never is); any other source goes through DRF."""
    plan = _plans.get(serializer_class)
    if plan is None:
        plan = _plans[serializer_class] = _field_plan(serializer_class)
    return plan


def _field_plan(serializer_class: type[serializers.BaseSerializer[Any]]) -> FieldPlan:
    fields = serializer_class().fields  # type: ignore[attr-defined]
    meta = getattr(serializer_class, "Meta", None)
    model = getattr(meta, "model", None)
    columns: set[str] = set()
    if model is not None:
        columns = {
            f.name for f in model._meta.concrete_fields if not f.is_relation and isinstance(f, models.Field)
        }
    plan = []
    for field in fields.values():
        if field.write_only:
            continue
        attrs = field.source_attrs
        read = (
            operator.attrgetter(attrs[0]) if len(attrs) == 1 and attrs[0] in columns else field.get_attribute
        )
        # A DateTimeField with neither its own format nor its own time zone: the settings' (`_iso_datetime`).
        plain_datetime = (
            type(field) is serializers.DateTimeField
            and not hasattr(field, "format")
            and not hasattr(field, "timezone")
        )
        plan.append((field.field_name, read, field.to_representation, plain_datetime))
    return tuple(plan)


def _iso_datetime() -> Callable[[datetime], str | None] | None:
    """How DRF's `DateTimeField.to_representation` writes an aware datetime under the current settings
    and time zone, looked up once per call of `represent` / `represent_many` instead of once per value
    (the time zone is a context-local look-up; it was a third of the CPU of a run's turn list): ISO 8601
    in the current time zone, `Z` for UTC. None when the settings ask for anything else (DRF's then)."""
    if not django_settings.USE_TZ or str(api_settings.DATETIME_FORMAT).lower() != ISO_8601:
        return None
    tz = timezone.get_current_timezone()

    def iso(value: datetime) -> str | None:
        if type(value) is not datetime or value.utcoffset() is None:
            return None  # not an aware datetime: DRF's own path
        try:
            text = value.astimezone(tz).isoformat()
        except OverflowError:
            return None  # DRF's own path refuses it as DRF does
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    return iso


def _represent(
    plan: FieldPlan, instance: Any, iso: Callable[[datetime], str | None] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, read, to_representation, plain_datetime in plan:
        try:
            value = read(instance)
        except SkipField:
            continue
        if value is None:
            out[name] = None
        elif plain_datetime and iso is not None and (text := iso(value)) is not None:
            out[name] = text
        else:
            out[name] = to_representation(value)
    return out


def represent(serializer_class: type[serializers.BaseSerializer[Any]], instance: Any) -> dict[str, Any]:
    """`serializer_class(instance).data` as a plain dict (see `field_plan`)."""
    return _represent(field_plan(serializer_class), instance, _iso_datetime())


def represent_many(
    serializer_class: type[serializers.BaseSerializer[Any]], instances: Iterable[Any]
) -> list[dict[str, Any]]:
    """`serializer_class(instances, many=True).data` as a list of plain dicts."""
    plan, iso = field_plan(serializer_class), _iso_datetime()
    return [_represent(plan, instance, iso) for instance in instances]


class RunSerializer(serializers.ModelSerializer[Run]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    team = serializers.CharField(source="project.team.name", read_only=True)
    project_id = serializers.IntegerField(read_only=True)
    url = serializers.SerializerMethodField()
    page_url = serializers.SerializerMethodField()
    events_url = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "run_id", "url", "page_url", "events_url", "team", "project", "project_id", "source", "agents",
            "model", "status", "started_at", "ended_at", "turns", "steps", "events", "prompt_tokens",
            "completion_tokens", "tokens", "tool_calls", "errors", "primitives", "recall_count", "pin_count",
            "unpin_count", "peak_utilization", "failure", "bundle_id", "delegated_by_run_id",
        ]  # fmt: skip

    # Addresses carry the project and the encoded run id (DESIGN.md §9): built by the model, never here.
    def get_url(self, run: Run) -> str:
        return run.api_url()

    def get_page_url(self, run: Run) -> str:
        return run.get_absolute_url()

    def get_events_url(self, run: Run) -> str:
        return run.api_events_url()


class TurnSerializer(serializers.ModelSerializer[Turn]):
    class Meta:
        model = Turn
        fields = [
            "agent", "number", "steps", "prompt_tokens", "completion_tokens", "tokens", "peak_utilization",
            "strategy", "compressions", "primitives", "tool_calls", "errors", "failure", "started_at", "ended_at",
        ]  # fmt: skip


class DecisionSerializer(serializers.ModelSerializer[ContextDecision]):
    class Meta:
        model = ContextDecision
        fields = [
            "strategy", "budget_total", "budget_used", "budget_tools", "budget_reserve", "messages_in",
            "messages_out", "compressed_count", "pinned_count", "dropped_count", "explanation",
            "utilization", "message_decisions", "report",
        ]  # fmt: skip


class PrimitiveEventSerializer(serializers.ModelSerializer[PrimitiveEvent]):
    turn = serializers.IntegerField(source="turn_number", allow_null=True)
    step = serializers.IntegerField(source="step_number", allow_null=True)

    class Meta:
        model = PrimitiveEvent
        fields = [
            "agent",
            "turn",
            "step",
            "primitive",
            "args",
            "result",
            "ok",
            "note",
            "tool_call_id",
            "timestamp",
        ]


class StepSerializer(serializers.ModelSerializer[Step]):
    turn = serializers.IntegerField(source="turn_number")
    step = serializers.IntegerField(source="number")
    decision = serializers.SerializerMethodField()
    primitive_events = serializers.SerializerMethodField()

    class Meta:
        model = Step
        fields = [
            "agent", "turn", "step", "step_id", "model", "prompt_tokens", "completion_tokens", "total_tokens",
            "finish_reason", "assistant_text", "tool_calls", "tool_results", "messages", "prompt_snapshot", "latency_ms",
            "completed", "failed", "errors", "failure", "started_at", "decision", "primitive_events",
        ]  # fmt: skip

    def get_decision(self, step: Step) -> dict[str, Any] | None:
        decision = getattr(step, "decision", None)
        return represent(DecisionSerializer, decision) if decision is not None else None

    def get_primitive_events(self, step: Step) -> list[dict[str, Any]]:
        return represent_many(PrimitiveEventSerializer, step.primitive_events.all())


class PinSerializer(serializers.ModelSerializer[Pin]):
    class Meta:
        model = Pin
        fields = [
            "agent", "pin_id", "label", "content", "content_hash", "tokens", "created_turn", "created_step",
            "until_turn", "unpinned_turn",
        ]  # fmt: skip


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


class ErrorDetailSerializer(serializers.Serializer[Any]):
    """`runtime.errors.ErrorDetail`: `index` (an event of a batch) or `line` (of a file), `field`, `message`."""

    line = serializers.IntegerField(required=False)
    index = serializers.IntegerField(required=False)
    field = serializers.CharField(required=False)
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer[Any]):
    error = serializers.CharField()
    detail = ErrorDetailSerializer(many=True)


class EventSerializer(serializers.Serializer[Any]):
    step_id = serializers.CharField()
    parent_step_id = serializers.CharField(allow_null=True)
    event_type = serializers.CharField()
    agent = serializers.CharField()
    timestamp = serializers.DateTimeField()
    event = serializers.JSONField(source="data")
