"""The re-run API's shapes (for the schema; the views check the body themselves, naming each field)."""

from __future__ import annotations

from rest_framework import serializers


class EditSerializer(serializers.Serializer):
    op = serializers.ChoiceField(choices=["restore", "remove", "pin", "unpin", "system"])
    index = serializers.IntegerField(required=False, help_text="a message of the step (its `index`)")
    content = serializers.CharField(required=False, help_text="pin: the content; system: the new prompt")


class RerunRequestSerializer(serializers.Serializer):
    turn = serializers.IntegerField(min_value=1, help_text="the turn of the step (the path names the step)")
    agent = serializers.CharField(required=False, help_text="the pool agent, for a pool's run")
    edits = EditSerializer(many=True, required=False)
    provider = serializers.CharField(
        required=False, help_text="`scripted` (default) or an ARCANA_PROVIDERS name"
    )
    model = serializers.CharField(
        required=False, help_text="default: the step's model, or the provider's first"
    )


class BranchSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["queued", "running", "completed", "failed"])
    error = serializers.CharField(allow_null=True)
    answer = serializers.CharField(allow_null=True)
    project = serializers.IntegerField()
    run_id = serializers.CharField()
    agent = serializers.CharField(allow_null=True)
    turn = serializers.IntegerField()
    step = serializers.IntegerField()
    edits = EditSerializer(many=True)
    provider = serializers.CharField()
    model = serializers.CharField()
    branch_run_id = serializers.CharField()
    branch_run_url = serializers.CharField(allow_null=True)
    compare_url = serializers.CharField(allow_null=True)
    page_url = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
