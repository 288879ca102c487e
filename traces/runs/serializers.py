"""Serializers of the read API (runs, turns, steps, decisions, pins, primitive events, raw events),
written with `traces.core.serializers.represent` / `represent_many`."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from traces.core.serializers import represent, represent_many
from traces.models import (
    ContextDecision,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Turn,
)

#: Per readable field of a serializer class: its name, how to read its value from an instance, how to
#: represent a value that is not None, and whether it is a plain `DateTimeField` (see `_iso_datetime`).


class RunSerializer(serializers.ModelSerializer[Run]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    team = serializers.CharField(source="project.team.name", read_only=True)
    project_id = serializers.IntegerField(read_only=True)
    url = serializers.SerializerMethodField()
    page_url = serializers.SerializerMethodField()
    events_url = serializers.SerializerMethodField()
    # Set on the page or with PATCH, else the trace's (`Run.shown_name`, `Run.shown_tags`).
    name = serializers.CharField(source="shown_name", read_only=True)
    tags = serializers.ListField(source="shown_tags", child=serializers.CharField(), read_only=True)

    class Meta:
        model = Run
        fields = [
            "run_id", "name", "tags", "url", "page_url", "events_url", "team", "project", "project_id", "source", "agents",
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


class EventSerializer(serializers.Serializer[Any]):
    step_id = serializers.CharField()
    parent_step_id = serializers.CharField(allow_null=True)
    event_type = serializers.CharField()
    agent = serializers.CharField()
    timestamp = serializers.DateTimeField()
    event = serializers.JSONField(source="data")
