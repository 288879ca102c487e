"""The project dashboard's rows: a project's own model prices, the per-day rollups the dashboard
reads, and the days ingestion marked for a new rollup (DESIGN.md §10: a dashboard view never scans
events, nor the runs of the range).

`DailyRollup` rows are a projection of projections: computed from a day's `Run`, `Step` and
`ContextDecision` rows by `traces.dashboard.rollups`, replaced whole per (project, day), and can be
rebuilt at any time (`rebuild_rollups`). Ingestion and deletion mark the days they touch
(`RollupDay`); the `refresh_rollups` beat task (or the dashboard itself, for a small day) recomputes
them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .teams import Project

#: `DailyRollup.agent` of the row that counts each run once, all its agents together.
ALL_AGENTS = "*"


class ModelPrice(models.Model):
    """A project's price for one model, in USD per million tokens; it wins over the default table
    (`runtime.pricing.DEFAULT_PRICES`). Admins set it (`traces.dashboard.actions`, audit-logged)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="model_prices")
    model = models.CharField(max_length=200)
    input_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    output_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    # None: cached prompt tokens are billed as input.
    cached_input_per_million = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["model"]
        constraints = [
            models.UniqueConstraint(fields=["project", "model"], name="modelprice_project_model_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.model}: {self.input_per_million} / {self.output_per_million}"


class DailyRollup(models.Model):
    """What a project's runs that started on `day` (UTC) add up to, per (source, the run's model,
    agent). `agent` is `ALL_AGENTS` for the row counting every run once; a pool agent's row counts the
    runs it took part in and only its own steps. Latencies are histograms (`traces.dashboard.buckets`),
    so percentiles over any range merge exactly to a bucket (~12%)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    source = models.CharField(max_length=10)
    model = models.CharField(max_length=200, blank=True)
    agent = models.CharField(max_length=200, default=ALL_AGENTS)
    runs = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    run_ms = models.JSONField(default=dict)  # histogram of run durations: {bucket: runs}
    step_ms = models.JSONField(default=dict)  # histogram of step (model call) latencies: {bucket: steps}
    steps = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)  # the priced steps' cost
    unpriced_tokens = models.PositiveBigIntegerField(default=0)  # tokens of models with no price
    # By the model of each step: {model: [steps, prompt, completion, cached, cost_usd or None]}.
    by_model = models.JSONField(default=dict)
    compactions = models.PositiveIntegerField(default=0)  # decisions that dropped or condensed messages
    runs_compacted = models.PositiveIntegerField(default=0)
    lost_instructions = models.PositiveIntegerField(default=0)  # instructions a later call no longer saw
    runs_lost = models.PositiveIntegerField(default=0)
    pins = models.PositiveIntegerField(default=0)
    recalls = models.PositiveIntegerField(default=0)
    runs_pinned = models.PositiveIntegerField(default=0)
    runs_recalled = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "source", "model", "agent"], name="rollup_project_day_dims_uniq"
            )
        ]
        indexes = [models.Index(fields=["project", "agent", "day"], name="rollup_project_agent_day_idx")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} {self.source} {self.model or '-'} {self.agent}"


class RollupDay(models.Model):
    """A (project, day) whose rollup is out of date: marked by ingestion and deletion in their
    transaction, cleared by the refresh that recomputed it after `marked_at`."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    marked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="rollupday_project_day_uniq")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day}"


class RunRollup(models.Model):
    """What one run adds to its day's `DailyRollup` (per agent as there: `ALL_AGENTS` and each pool
    agent), kept beside it by the same refresh: the rows a dashboard filtered by **score** sums (only
    the runs whose scores match, DESIGN.md §10), and the rows `SessionRollup` is summed from. `run` is
    None for a run deleted since its day's last refresh (the next one removes the row)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("traces.Run", on_delete=models.SET_NULL, null=True, related_name="+")
    day = models.DateField()
    source = models.CharField(max_length=10)
    model = models.CharField(max_length=200, blank=True)
    agent = models.CharField(max_length=200, default=ALL_AGENTS)
    session = models.CharField(max_length=210)  # `bundle:<bundle_id>` or `run:<run_id>`
    started_at = models.DateTimeField(null=True)
    last_at = models.DateTimeField(null=True)  # ended, else started
    failed = models.PositiveSmallIntegerField(default=0)
    running = models.PositiveSmallIntegerField(default=0)
    run_bucket = models.SmallIntegerField(null=True)  # the run duration's histogram bucket
    step_ms = models.JSONField(default=dict)
    turns = models.PositiveIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)  # the run's own count (`Run.tokens`)
    steps = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    unpriced_tokens = models.PositiveBigIntegerField(default=0)
    by_model = models.JSONField(default=dict)
    compactions = models.PositiveIntegerField(default=0)
    lost_instructions = models.PositiveIntegerField(default=0)
    pins = models.PositiveIntegerField(default=0)
    recalls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "agent"], name="runrollup_run_agent_uniq")]
        indexes = [
            models.Index(fields=["project", "agent", "day"], name="runrollup_proj_agent_day_idx"),
            models.Index(fields=["project", "session"], name="runrollup_proj_session_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} run {self.run_id} {self.agent}"


class SessionRollup(models.Model):
    """One session of a project (`traces.dashboard.sessions`: a bundle, or a run alone) summed from
    its runs' `RunRollup` rows, recomputed whenever a refresh touches one of its runs: the Sessions
    list reads these rows, newest activity first, a page at a time."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=210)
    runs = models.PositiveIntegerField(default=0)
    first = models.DateTimeField(null=True)
    last = models.DateTimeField(null=True)
    turns = models.PositiveIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    unpriced_tokens = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=10, blank=True)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "key"], name="sessionrollup_project_key_uniq")
        ]
        indexes = [models.Index(fields=["project", "-last", "key"], name="sessionrollup_proj_last_idx")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.key}"
