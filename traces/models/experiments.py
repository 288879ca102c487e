"""Datasets and experiments (issue 38): versioned lists of inputs, and a conversation spec run over one.

**A dataset** belongs to a project and holds items: an input conversation (a list of
`{"role", "content"}` messages), an optional expected output and metadata. Its items are versioned
without copies: an item row lives in the versions `since_version <= v < until_version` (`until_version`
None: still in the newest). Adding an item makes version n+1 holding it; editing one closes its row at
n+1 and opens a new row of the same `key` there; removing one closes it. Every old version stays
readable (`Dataset.items_at(v)`), and an experiment names the version it ran.

**An experiment** runs the items of one dataset version through a conversation spec (provider, model,
system, strategy window, primitives, pool) on Celery workers. Each item becomes an `ExperimentItem`
with a run id fixed when the experiment is made, and a `Conversation` that writes that run.
Items are claimed one at a time by a conditional update (`pending`, or `running` under an expired
lease) so no item runs twice and none is lost when a worker dies; the optional judges score each
item's run. The worker is `traces/experiments/worker.py`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone

from .conversation import Conversation
from .runs import run_page_url
from .scores import Judge
from .teams import Project


class Dataset(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    version = models.PositiveIntegerField(default=0)  # the newest version (0: no items yet)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="dataset_project_name_uniq")]

    def __str__(self) -> str:
        return f"dataset {self.name} v{self.version}"

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("traces:dataset", kwargs={"project_id": self.project_id, "dataset_id": self.pk})

    def items_at(self, version: int | None = None) -> QuerySet[DatasetItem]:
        """The items of `version` (the newest when None), in the order they were added."""
        v = self.version if version is None else version
        return (
            DatasetItem.objects.filter(dataset=self, since_version__lte=v)
            .filter(Q(until_version__isnull=True) | Q(until_version__gt=v))
            .order_by("position", "id")
        )


class DatasetVersion(models.Model):
    """One version of a dataset: what made it, and how many items it holds."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    note = models.CharField(max_length=300, blank=True)  # "3 items uploaded", "item 2 edited"
    items = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_number_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.dataset_id} v{self.number}"


class DatasetItem(models.Model):
    """One item in the versions `[since_version, until_version)`; `key` is the item across its edits."""

    class Source(models.TextChoices):
        RUN = "run"  # a turn of a run: its input messages
        UPLOAD = "upload"  # a CSV or JSONL row
        API = "api"
        PAGE = "page"  # typed on the dataset page

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="items")
    key = models.CharField(max_length=40)
    position = models.PositiveIntegerField(default=0)
    input = models.JSONField(default=list)  # [{"role": "system"|"user"|"assistant", "content": str}]
    expected = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.API)
    source_run_id = models.CharField(max_length=200, blank=True)  # the run (same project) it came from
    source_turn = models.PositiveIntegerField(null=True, blank=True)
    since_version = models.PositiveIntegerField()
    until_version = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["position", "id"]
        indexes = [models.Index(fields=["dataset", "key"], name="dataset_item_key_idx")]

    def __str__(self) -> str:
        return f"item {self.key} v{self.since_version}"

    @property
    def user_messages(self) -> list[str]:
        return [str(m.get("content", "")) for m in self.input if m.get("role") == "user"]

    @property
    def system(self) -> str | None:
        found = [str(m.get("content", "")) for m in self.input if m.get("role") == "system"]
        return "\n\n".join(found) if found else None

    @property
    def input_json(self) -> str:
        """The input as the edit form shows it (escaped by the template like any trace text)."""
        import json

        return json.dumps(self.input, ensure_ascii=False, indent=1)

    def source_url(self) -> str:
        if not self.source_run_id:
            return ""
        project_id = self.dataset.project_id
        if self.source_turn:
            from django.urls import reverse

            return reverse(
                "traces:turn",
                kwargs={"project_id": project_id, "run_id": self.source_run_id, "number": self.source_turn},
            )
        return run_page_url(project_id, self.source_run_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "key": self.key,
            "input": self.input,
            "expected": self.expected,
            "metadata": self.metadata,
            "source": self.source,
            "source_run_id": self.source_run_id or None,
            "source_turn": self.source_turn,
            "since_version": self.since_version,
            "until_version": self.until_version,
        }


class Experiment(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="experiments")
    dataset_version = models.PositiveIntegerField()
    name = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    config = models.JSONField(default=dict)  # the conversation spec's config (ConversationSpec.config)
    judges = models.ManyToManyField(Judge, blank=True, related_name="experiments")
    parallel = models.PositiveIntegerField(default=1)  # tasks working on it at once
    max_items = models.PositiveIntegerField(default=100)
    max_tokens = models.PositiveBigIntegerField(default=1_000_000)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    items_total = models.PositiveIntegerField(default=0)
    items_done = models.PositiveIntegerField(default=0)  # finished items (ok, failed or skipped)
    items_failed = models.PositiveIntegerField(default=0)
    tokens_used = models.PositiveBigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "project"], name="experiment_status_idx")]

    def __str__(self) -> str:
        return f"experiment {self.pk} ({self.status})"

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("traces:experiment", kwargs={"project_id": self.project_id, "experiment_id": self.pk})

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def label(self) -> str:
        return self.name or f"experiment {self.pk}"

    @property
    def primitives_label(self) -> str:
        return ", ".join(self.config.get("cognitive_primitives") or []) or "off"

    @property
    def progress_percent(self) -> int:
        return int(100 * self.items_done / self.items_total) if self.items_total else 100


class ExperimentItem(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        SKIPPED = "skipped"  # not run: the experiment was cancelled or reached its token cap

    FINISHED = (State.DONE, State.FAILED, State.SKIPPED)

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="items")
    item = models.ForeignKey(DatasetItem, on_delete=models.CASCADE, related_name="experiment_items")
    position = models.PositiveIntegerField()
    run_id = models.CharField(max_length=200)  # fixed when the experiment is made
    conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)  # claims of this item (more than 1: a lost worker)
    error = models.TextField(blank=True)
    output = models.TextField(blank=True)  # the run's last answer
    # What the run did: tokens, cost, compactions, recalls, pins, steps, errors; and the judges' scores
    # ({"name": value}) and judge errors ({"judge": message}).
    stats = models.JSONField(default=dict)
    scores = models.JSONField(default=dict)
    judge_errors = models.JSONField(default=dict)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "position"], name="experiment_item_position_uniq"),
            models.UniqueConstraint(fields=["experiment", "run_id"], name="experiment_item_run_uniq"),
        ]
        indexes = [models.Index(fields=["experiment", "state"], name="experiment_item_state_idx")]

    def __str__(self) -> str:
        return f"experiment item {self.experiment_id}/{self.position} ({self.state})"

    @property
    def run_url(self) -> str:
        return run_page_url(self.experiment.project_id, self.run_id)

    @property
    def tokens(self) -> int:
        return int(self.stats.get("tokens") or 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "item": self.item_id,
            "item_key": self.item.key,
            "run_id": self.run_id,
            "state": self.state,
            "error": self.error,
            "output": self.output,
            "stats": self.stats,
            "scores": self.scores,
            "judge_errors": self.judge_errors,
            "attempts": self.attempts,
        }
