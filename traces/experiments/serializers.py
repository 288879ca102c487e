"""The API's shapes of datasets, their versions and items, and experiments (for reading and the schema;
writes are checked by `traces.experiments.datasets` and `service`, which report every bad field)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from traces.models import Dataset, DatasetVersion, Experiment


class DatasetVersionSerializer(serializers.ModelSerializer[DatasetVersion]):
    class Meta:
        model = DatasetVersion
        fields = ["number", "note", "items", "created_at"]


class DatasetSerializer(serializers.ModelSerializer[Dataset]):
    url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "project", "name", "description", "version", "url", "created_at", "updated_at"]


class DatasetCreateSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(help_text="project id or slug (an API key's project by default)")
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True)


class ItemSerializer(serializers.Serializer[Any]):
    """An item as written: `input` (a string or `[{"role", "content"}]`), or `run_id` and `turn` (that
    turn's input messages)."""

    input = serializers.JSONField(required=False)
    expected = serializers.CharField(required=False, allow_null=True)
    metadata = serializers.DictField(required=False, allow_null=True)
    run_id = serializers.CharField(required=False)
    turn = serializers.IntegerField(required=False)


class ItemBatchSerializer(serializers.Serializer[Any]):
    items = ItemSerializer(many=True)


class ExperimentSerializer(serializers.ModelSerializer[Experiment]):
    url = serializers.CharField(source="get_absolute_url", read_only=True)
    judges = serializers.SerializerMethodField()
    cognitive_primitives = serializers.SerializerMethodField()

    class Meta:
        model = Experiment
        fields = [
            "id", "project", "dataset", "dataset_version", "name", "provider", "model", "config",
            "cognitive_primitives", "judges", "parallel", "max_items", "max_tokens", "status", "reason",
            "cancel_requested", "items_total", "items_done", "items_failed", "tokens_used", "url",
            "created_at", "started_at", "finished_at",
        ]  # fmt: skip

    def get_judges(self, exp: Experiment) -> list[int]:
        return [j.pk for j in exp.judges.all()]

    def get_cognitive_primitives(self, exp: Experiment) -> list[str]:
        return list(exp.config.get("cognitive_primitives") or [])


class ExperimentCreateSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(required=False)
    dataset = serializers.IntegerField()
    version = serializers.IntegerField(required=False)
    name = serializers.CharField(required=False)
    provider = serializers.CharField(required=False)
    model = serializers.CharField(required=False)
    system = serializers.CharField(required=False, allow_null=True)
    cognitive_primitives = serializers.ListField(child=serializers.CharField(), required=False)
    context_window = serializers.IntegerField(required=False, allow_null=True)
    judges = serializers.ListField(child=serializers.IntegerField(), required=False)
    max_items = serializers.IntegerField(required=False)
    max_tokens = serializers.IntegerField(required=False)
    parallel = serializers.IntegerField(required=False)
