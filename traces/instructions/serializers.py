"""The API's shapes of lost instructions and their checks (`traces/instructions/api.py`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from traces.models import InstructionCheck


class InstructionCheckSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    run_id = serializers.CharField()
    agent = serializers.CharField()
    instruction_key = serializers.CharField()
    instruction = serializers.CharField()
    source = serializers.CharField(help_text="system_prompt or user")  # type: ignore[assignment]
    lost_turn = serializers.IntegerField(help_text="the first step that no longer saw it: its turn")
    lost_step = serializers.IntegerField()
    answer_turn = serializers.IntegerField(allow_null=True, help_text="the answer checked: its turn")
    answer_step = serializers.IntegerField(allow_null=True)
    answer = serializers.CharField(help_text="the answer checked, as the model gave it")
    provider = serializers.CharField()
    model = serializers.CharField()
    checked_by = serializers.CharField(source="model_label", help_text="provider/model")
    status = serializers.ChoiceField(choices=InstructionCheck.Status.values)
    verdict = serializers.CharField(
        help_text='contradicts, consistent, unclear, or "" (not done, or an error)'
    )
    reasoning = serializers.CharField(help_text="the model's reasoning")
    tokens = serializers.IntegerField()
    error = serializers.CharField(
        help_text="why there is no verdict (a provider failure, an unreadable answer)"
    )
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class LostInstructionSerializer(serializers.Serializer[Any]):
    key = serializers.CharField(help_text="names the instruction in a POST's `instructions`")
    text = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]
    turn = serializers.IntegerField(help_text="the first step that no longer saw it: its turn")
    step = serializers.IntegerField()
    check = InstructionCheckSerializer(allow_null=True, help_text="its latest check")


class InstructionChecksSerializer(serializers.Serializer[Any]):
    lost_instructions = LostInstructionSerializer(many=True)
    checks = InstructionCheckSerializer(many=True, help_text="every check of the agent's, newest first")


class CheckRequestSerializer(serializers.Serializer[Any]):
    model = serializers.CharField(
        help_text="provider/model: scripted/check-heuristic or one of ARCANA_PROVIDERS'"
    )
    agent = serializers.CharField(required=False, help_text='the agent ("" for a plain chat)')
    instructions = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="keys of the lost instructions; default all"
    )


class QueuedChecksSerializer(serializers.Serializer[Any]):
    checks = InstructionCheckSerializer(many=True)
