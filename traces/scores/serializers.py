"""The API's shapes of scores and score configs (`traces/scores/api.py`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from traces.models import Score, ScoreConfig, run_api_url, run_page_url


def typed_value(score: Score) -> Any:
    """A score's value as its config's kind has it: a number, true/false, or a category."""
    if score.label in ("true", "false") and score.value in (0.0, 1.0):
        return score.label == "true"
    if score.label:
        return score.label
    return score.value


class ScoreConfigSerializer(serializers.Serializer[ScoreConfig]):
    id = serializers.IntegerField()
    project = serializers.IntegerField(source="project_id")
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=ScoreConfig.Kind.values)
    description = serializers.CharField()
    min_value = serializers.FloatField(allow_null=True)
    max_value = serializers.FloatField(allow_null=True)
    categories = serializers.ListField(child=serializers.CharField())
    archived = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class ScoreConfigCreateSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(help_text="project id (or an unambiguous slug); a key's own project")
    name = serializers.CharField(max_length=64, help_text="[a-z][a-z0-9_]*, the filter's `score.<name>`")
    kind = serializers.ChoiceField(choices=ScoreConfig.Kind.values)
    description = serializers.CharField(required=False, allow_blank=True)
    min_value = serializers.FloatField(required=False, allow_null=True)
    max_value = serializers.FloatField(required=False, allow_null=True)
    categories = serializers.ListField(child=serializers.CharField(), required=False)


class ScoreSerializer(serializers.Serializer[Score]):
    id = serializers.IntegerField()
    project = serializers.IntegerField(source="project_id")
    run_id = serializers.CharField()
    agent = serializers.CharField()
    turn = serializers.IntegerField(source="turn_number", allow_null=True)
    step = serializers.IntegerField(source="step_number", allow_null=True)
    target = serializers.ChoiceField(choices=Score.Target.values)
    name = serializers.CharField()
    value = serializers.SerializerMethodField("value_of", help_text="a number, true/false, or a category")
    comment = serializers.CharField()
    # A declared field (DRF's metaclass moves it off the class), not Field.source.
    source = serializers.ChoiceField(choices=Score.Source.values)  # type: ignore[assignment]
    author = serializers.CharField(
        source="author_label", help_text="who wrote it: a user, an API key, a judge"
    )
    client_id = serializers.CharField()
    judge = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    edited_at = serializers.DateTimeField(allow_null=True)
    run_url = serializers.SerializerMethodField()
    page_url = serializers.SerializerMethodField()

    def value_of(self, score: Score) -> Any:
        return typed_value(score)

    def get_judge(self, score: Score) -> dict[str, Any] | None:
        if score.source != Score.Source.JUDGE:
            return None
        return {
            "name": score.judge_name,
            "model": score.judge_model,
            "judge_run": score.judge_run_id,
            "reasoning": score.reasoning,
            "tokens": score.tokens,
        }

    def get_run_url(self, score: Score) -> str:
        return run_api_url(score.project_id, score.run_id)

    def get_page_url(self, score: Score) -> str:
        return run_page_url(score.project_id, score.run_id)


class ScoreItemSerializer(serializers.Serializer[Any]):
    """One score of a `POST /api/v1/scores` batch (checked by `traces.scores.actions.check_item`)."""

    name = serializers.CharField(help_text="a score config of the project")
    value = serializers.JSONField(help_text="a number in the config's range, true/false, or a category")
    run_id = serializers.CharField()
    target = serializers.ChoiceField(choices=Score.Target.values, required=False)
    agent = serializers.CharField(required=False)
    turn = serializers.IntegerField(required=False, min_value=1)
    step = serializers.IntegerField(required=False, min_value=1)
    comment = serializers.CharField(required=False)
    client_id = serializers.CharField(required=False, help_text="makes the write idempotent per project")


class ScoreBatchSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(required=False, help_text="project id or slug (a key's own project)")
    scores = ScoreItemSerializer(many=True)


class ScoreItemResultSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["created", "duplicate", "rejected"])
    id = serializers.IntegerField(required=False)
    field = serializers.CharField(required=False)
    error = serializers.CharField(required=False)


class ScoreBatchResultSerializer(serializers.Serializer[Any]):
    created = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    rejected = serializers.IntegerField()
    results = ScoreItemResultSerializer(many=True)
    error = serializers.CharField(required=False)
    detail = serializers.ListField(child=serializers.DictField(), required=False)


class ScoreEditSerializer(serializers.Serializer[Any]):
    value = serializers.JSONField(required=False)
    comment = serializers.CharField(required=False, allow_blank=True)


# --------------------------------------------------------------------------------------------------
# Review queues and judges (`traces/scores/api_queues.py`, `api_judges.py`)


class ReviewQueueSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    project = serializers.IntegerField(source="project_id")
    name = serializers.CharField()
    description = serializers.CharField()
    filter = serializers.CharField(help_text="the runs list's query string (`days=N`: the last N days)")
    configs = serializers.SerializerMethodField(help_text="the names of the score configs a reviewer fills")
    lock_minutes = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_configs(self, queue: Any) -> list[str]:
        return sorted(c.name for c in queue.configs.all())

    def get_lock_minutes(self, queue: Any) -> int:
        return int(queue.lock_seconds // 60)


class ReviewQueueWriteSerializer(serializers.Serializer[Any]):
    """`POST` needs `name` and `configs`; `PATCH` any of them."""

    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True)
    filter = serializers.CharField(required=False, allow_blank=True, help_text="e.g. `days=7&status=failed`")
    configs = serializers.ListField(child=serializers.CharField(), help_text="config ids or names")
    lock_minutes = serializers.IntegerField(required=False, min_value=1, max_value=1440)


class ReviewItemSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    queue = serializers.IntegerField(source="queue_id")
    run_id = serializers.CharField()
    status = serializers.CharField()
    assignee = serializers.CharField(source="assignee.username", allow_null=True, default=None)
    locked_until = serializers.DateTimeField(allow_null=True)
    finished_by = serializers.CharField(source="finished_by.username", allow_null=True, default=None)
    finished_at = serializers.DateTimeField(allow_null=True)


class ReviewItemChangeSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=["done", "skipped", "released"],
        help_text="done (after scoring), skipped, or released (back to the queue at once)",
    )


class JudgeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    project = serializers.IntegerField(source="project_id")
    name = serializers.CharField()
    model = serializers.SerializerMethodField(help_text="provider/model")
    prompt = serializers.CharField()
    config = serializers.CharField(source="config.name")
    on_new_runs = serializers.BooleanField()
    created_at = serializers.DateTimeField()

    def get_model(self, judge: Any) -> str:
        return f"{judge.provider}/{judge.model}"


class JudgeWriteSerializer(serializers.Serializer[Any]):
    """`POST` needs all but `on_new_runs`; `PATCH` any of them."""

    name = serializers.CharField(max_length=100)
    model = serializers.CharField(help_text="provider/model, from `scripted` or ARCANA_PROVIDERS")
    prompt = serializers.CharField(help_text="a template: {{ last_answer }}, {{ first_input }}, …")
    config = serializers.CharField(help_text="the score config (id) the answer fills")
    on_new_runs = serializers.BooleanField(required=False, help_text="judge each new finished run")


class JudgeRunSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    judge = serializers.IntegerField(source="judge_id")
    status = serializers.CharField()
    reason = serializers.CharField()
    filter = serializers.CharField()
    automatic = serializers.BooleanField()
    model = serializers.SerializerMethodField()
    max_runs = serializers.IntegerField()
    max_tokens = serializers.IntegerField()
    cancel_requested = serializers.BooleanField()
    runs_total = serializers.IntegerField()
    runs_done = serializers.IntegerField()
    scored = serializers.IntegerField()
    errors = serializers.IntegerField()  # type: ignore[assignment]
    tokens_used = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_model(self, jr: Any) -> str:
        return f"{jr.provider}/{jr.model}"


class JudgeRunStartSerializer(serializers.Serializer[Any]):
    filter = serializers.CharField(required=False, allow_blank=True, help_text="e.g. `days=7`")
    max_runs = serializers.IntegerField(required=False, min_value=1, help_text="at most this many runs")
    max_tokens = serializers.IntegerField(required=False, min_value=1, help_text="stop past these tokens")
