"""Scores, review queues and model judges (issue 36, DESIGN.md §10).

A `Score` names what it scores by its ADDRESS — project, run id, agent, turn and step numbers and the
kind of target — never by the pk of a run, turn or step row: those are projections a rebuild may
make again, and a score must outlive that. `ScoreConfig` is a project's definition of one score
(numeric with a range, categorical with its categories, or boolean); a score's `name` is its
config's, copied so that the runs filter (`score.helpfulness>=4`) reads one table.

`ReviewQueue` is a saved runs filter plus the configs to fill; its `ReviewItem`s are made as members
take runs (a lock for a while, then done or skipped). `Judge` is a provider, a model, a prompt and the
config its answer fills; a `JudgeRun` runs it over a filter on a worker under a lease (as
conversations do), and each judged run leaves one `JudgeResult` — written in the same transaction as
its score, so a worker killed mid-judge loses no score and writes none twice.

The rules (who may write what, how values are checked) are in `traces/scores/`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .teams import Action, Membership, Project

NAME_MAX = 64


class ScoreConfig(models.Model):
    """One score a project collects: `helpfulness` (numeric, 1–5), `kept_constraint` (boolean), …"""

    class Kind(models.TextChoices):
        NUMERIC = "numeric"
        CATEGORICAL = "categorical"
        BOOLEAN = "boolean"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="score_configs")
    name = models.CharField(max_length=NAME_MAX)  # [a-z0-9_], the filter's `score.<name>`
    kind = models.CharField(max_length=12, choices=Kind.choices)
    description = models.CharField(max_length=500, blank=True)
    min_value = models.FloatField(null=True, blank=True)  # numeric: the range, both ends included
    max_value = models.FloatField(null=True, blank=True)
    categories = models.JSONField(default=list, blank=True)  # categorical: the labels, in order
    archived = models.BooleanField(default=False)  # no new scores; old ones stay readable
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="scoreconfig_project_name_uniq")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_integer_range(self) -> bool:
        return (
            self.kind == self.Kind.NUMERIC
            and self.min_value is not None
            and self.max_value is not None
            and float(self.min_value).is_integer()
            and float(self.max_value).is_integer()
            and self.max_value - self.min_value <= 20
        )

    def describe(self) -> str:
        """ "numeric 1–5", "boolean", "categorical: good, bad"."""
        if self.kind == self.Kind.NUMERIC:
            lo = "" if self.min_value is None else f"{self.min_value:g}"
            hi = "" if self.max_value is None else f"{self.max_value:g}"
            return f"numeric {lo}–{hi}" if lo or hi else "numeric"
        if self.kind == self.Kind.CATEGORICAL:
            return "categorical: " + ", ".join(map(str, self.categories))
        return "boolean"


class Score(models.Model):
    """One value given to a run, a turn, a step, a step's context decision or a compaction (a
    decision that dropped or condensed content), by a person, through the API, or by a judge.

    `value` holds a numeric score, and 1/0 for a boolean; `label` holds a category, and
    "true"/"false" for a boolean (so both comparisons work). `client_id` makes API writes
    idempotent: one score per (project, client id)."""

    class Target(models.TextChoices):
        RUN = "run"
        TURN = "turn"
        STEP = "step"
        DECISION = "decision", "context decision"
        COMPACTION = "compaction"

    class Source(models.TextChoices):
        PERSON = "person"
        API = "api"
        JUDGE = "judge"

    COMMENT_MAX = 5000

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="scores")
    config = models.ForeignKey(ScoreConfig, on_delete=models.CASCADE, related_name="scores")
    name = models.CharField(max_length=NAME_MAX)  # the config's, for the runs filter
    run_id = models.CharField(max_length=200)
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField(null=True, blank=True)
    step_number = models.PositiveIntegerField(null=True, blank=True)
    target = models.CharField(max_length=12, choices=Target.choices, default=Target.RUN)
    value = models.FloatField(null=True, blank=True)
    label = models.CharField(max_length=200, blank=True)
    comment = models.TextField(blank=True)
    source = models.CharField(max_length=8, choices=Source.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    author_label = models.CharField(max_length=200, blank=True)  # "alice", "API key arc_ab…", "judge x"
    client_id = models.CharField(max_length=200, blank=True)
    judge_run = models.ForeignKey(
        "JudgeRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="scores"
    )
    judge_name = models.CharField(max_length=100, blank=True)
    judge_model = models.CharField(max_length=300, blank=True)  # "provider/model"
    reasoning = models.TextField(blank=True)
    tokens = models.PositiveIntegerField(default=0)  # the judge's tokens for this score
    created_at = models.DateTimeField(default=timezone.now)
    edited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # A run's scores (its page), and the runs filter's EXISTS by the run's address and the name.
            models.Index(fields=["project", "run_id", "name", "value"], name="score_project_run_idx"),
            models.Index(fields=["project", "name", "value"], name="score_project_name_value_idx"),
            models.Index(fields=["project", "-created_at"], name="score_project_created_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "client_id"],
                condition=~Q(client_id=""),
                name="score_project_client_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name}={self.display_value} on {self.run_id} {self.target_label}"

    @property
    def display_value(self) -> str:
        if self.label:
            return self.label
        if self.value is None:
            return ""
        return f"{self.value:g}"

    @property
    def target_label(self) -> str:
        """ "run", "turn 3", "turn 3 step 2", "decision of turn 3 step 2" (with a pool's agent)."""
        who = f"{self.agent} " if self.agent else ""
        if self.target == self.Target.RUN:
            return "run"
        if self.target == self.Target.TURN:
            return f"{who}turn {self.turn_number}"
        where = f"{who}turn {self.turn_number} step {self.step_number}"
        if self.target == self.Target.STEP:
            return where
        return f"{self.get_target_display()} of {where}"

    # Who may change a score: the notes' rule (`Note.can_edit` / `Note.can_delete`).

    def can_edit(self, membership: Membership | None) -> bool:
        """Its author, while they may score in the team. A score without an author (an API key's, a
        judge's, or one whose author's account is gone) is edited by nobody.

        >>> Score(author_id=7).can_edit(Membership(user_id=7, role="member"))
        True
        >>> Score(author_id=7).can_edit(Membership(user_id=7, role="viewer")), Score().can_edit(None)
        (False, False)
        """
        return (
            membership is not None
            and membership.can(Action.SCORE)
            and self.author_id is not None
            and self.author_id == membership.user_id
        )

    def can_delete(self, membership: Membership | None) -> bool:
        """Its author (as for `can_edit`), or any admin or owner of the team."""
        if membership is None:
            return False
        return self.can_edit(membership) or membership.role_at_least(Membership.Role.ADMIN)


class ReviewQueue(models.Model):
    """A saved runs filter (the runs list's query string) and the score configs a reviewer fills."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="review_queues")
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=500, blank=True)
    filter = models.CharField(max_length=2000, blank=True)  # `RunFilter` parameters, URL-encoded
    configs = models.ManyToManyField(ScoreConfig, related_name="queues")
    lock_seconds = models.PositiveIntegerField(default=900)  # how long a taken item stays its reviewer's
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class ReviewItem(models.Model):
    """One run of a queue once someone took it: locked to `assignee` until `locked_until`, then done or
    skipped (who and when). A run of the queue's filter without an item is still to review."""

    class Status(models.TextChoices):
        ASSIGNED = "assigned"
        DONE = "done"
        SKIPPED = "skipped"

    queue = models.ForeignKey(ReviewQueue, on_delete=models.CASCADE, related_name="items")
    run_id = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ASSIGNED)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    locked_until = models.DateTimeField(null=True, blank=True)
    finished_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["queue", "run_id"], name="reviewitem_queue_run_uniq")]

    def __str__(self) -> str:
        return f"{self.queue} · {self.run_id} ({self.status})"


class Judge(models.Model):
    """A model that scores runs: a provider and model, a prompt template and the config it fills."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="judges")
    name = models.CharField(max_length=100)
    provider = models.CharField(max_length=100)  # "scripted" or a name of ARCANA_PROVIDERS
    model = models.CharField(max_length=200)
    prompt = models.TextField()  # `{{ last_answer }}`, … (traces/scores/judging.py: VARIABLES)
    config = models.ForeignKey(ScoreConfig, on_delete=models.CASCADE, related_name="judges")
    # Judge each new finished run (`traces.scores.judges.judge_new_runs`, a beat task): runs that
    # finished after `watch_from`, in automatic judge runs of their own.
    on_new_runs = models.BooleanField(default=False)
    watch_from = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="judge_project_name_uniq")]

    def __str__(self) -> str:
        return self.name


class JudgeRun(models.Model):
    """A judge over a runs filter (a backfill), capped in runs and tokens, run by a worker under a
    lease like a conversation: `queued` → `running` → `completed` / `failed` / `cancelled`."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="runs")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="judge_runs")
    filter = models.CharField(max_length=2000, blank=True)
    run_ids = models.JSONField(default=list, blank=True)  # the runs to judge, when given (not the filter)
    automatic = models.BooleanField(default=False)  # made by `judge_new_runs`, not by a person
    max_runs = models.PositiveIntegerField(default=100)
    max_tokens = models.PositiveBigIntegerField(default=200_000)
    # What the judge is: copied when the run starts, so an edit of the judge changes no running work.
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    prompt = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    runs_total = models.PositiveIntegerField(default=0)  # the runs it will judge (capped)
    runs_done = models.PositiveIntegerField(default=0)
    scored = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    tokens_used = models.PositiveBigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "lease_expires_at"], name="judgerun_status_lease_idx")]

    def __str__(self) -> str:
        return f"{self.judge} run {self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def model_label(self) -> str:
        return f"{self.provider}/{self.model}"


class JudgeResult(models.Model):
    """What one judge run made of one run: a score, or a visible error (an unparseable answer, a
    provider failure). Written with its score in one transaction: its presence means "done"."""

    class Status(models.TextChoices):
        SCORED = "scored"
        ERROR = "error"

    judge_run = models.ForeignKey(JudgeRun, on_delete=models.CASCADE, related_name="results")
    run_id = models.CharField(max_length=200)
    status = models.CharField(max_length=8, choices=Status.choices)
    error = models.TextField(blank=True)
    answer = models.TextField(blank=True)  # the model's answer as received (capped)
    tokens = models.PositiveIntegerField(default=0)
    score = models.ForeignKey(Score, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["judge_run", "run_id"], name="judgeresult_run_uniq")]

    def __str__(self) -> str:
        return f"{self.judge_run_id} {self.run_id}: {self.status}"


def score_fields(score: Score) -> dict[str, Any]:
    """A score as plain data (audit rows, exports)."""
    return {
        "id": score.pk,
        "name": score.name,
        "run_id": score.run_id,
        "agent": score.agent,
        "turn": score.turn_number,
        "step": score.step_number,
        "target": score.target,
        "value": score.value,
        "label": score.label,
        "source": score.source,
    }
