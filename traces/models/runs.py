"""A run and its raw events: `Run` (with its addresses and related runs) and `Event`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.db import models
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from .teams import Project

if TYPE_CHECKING:
    from .conversation import Conversation
    from .projection import Pin


def run_page_url(project_id: int, run_id: str) -> str:
    """The page of the run `run_id` of project `project_id`, for callers holding ids, not a `Run` (an
    upload's list of run ids). With a `Run` at hand, use `run.get_absolute_url()`."""
    return reverse("traces:run", kwargs={"project_id": project_id, "run_id": run_id})


def run_api_url(project_id: int, run_id: str) -> str:
    """The read API's address of a run, for callers holding ids; with a `Run`, `run.api_url()`."""
    return reverse("api-run", kwargs={"project_id": project_id, "run_id": run_id})


class Run(models.Model):
    """One trace (one `run_id`) in a project, with counters projected from its raw events.

    `status`, `failure` and `errors` are `runtime.facts.run_outcome` of its events: `failed` (with the
    reason in `failure`) when an error stopped it or its last step failed — including an arcana-agent 1.2
    send whose model never answered —, `cancelled` (the reason in `failure` too) when its last event
    says someone cancelled it, `completed` when its last answer is final, else `running`; a run
    with no event of a step at all (an Arcana 1.2 session file holding only `history_seeded`) is
    `completed` with zero steps ("no steps" on the pages). `errors` counts failed tool calls, unknown
    tools and other errors alike, for both producers. `bundle_id` / `delegated_by_run_id` are
    `runtime.facts.run_links`: the sub-agent bundle the run belongs to and the run that delegated it.

    `status` is a pure function of the run's events; whether a `running` run is still *live* also
    depends on the clock, so it is the property `is_live`, computed when a page is drawn (no re-ingest).
    """

    class Source(models.TextChoices):
        RUNTIME = "runtime"  # written by Arcana Console's runtime (metadata.producer)
        ARCANA = "arcana"  # written by arcana-agent 1.2
        OTLP = "otlp", "OpenTelemetry"  # spans of any framework (traces/models/otlp.py)

    class Status(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"  # someone stopped it (`runtime.facts.CANCELLED_STOP`)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ARCANA)
    agents = models.JSONField(default=list)  # sorted names of pool agents; [] for a plain chat
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    turns = models.PositiveIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)
    events = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    failure = models.TextField(blank=True)  # why a failed run failed (runtime.facts.run_outcome)
    bundle_id = models.CharField(max_length=200, blank=True)  # metadata.bundle_id ("" outside a bundle)
    delegated_by_run_id = models.CharField(max_length=200, blank=True)  # metadata.delegated_by_run_id
    primitives = models.PositiveIntegerField(default=0)
    recall_count = models.PositiveIntegerField(default=0)
    pin_count = models.PositiveIntegerField(default=0)
    unpin_count = models.PositiveIntegerField(default=0)
    peak_utilization = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Bookkeeping of `traces.ingest` (not shown): True when every event of the run is one of ours with
    # a `metadata.turn`, so a batch re-projects only the turns it touches (see traces/ingest/incremental.py).
    incremental = models.BooleanField(default=False)
    # Bookkeeping of the turn-by-turn projection (traces/ingest/incremental.py), so a batch costs what it
    # touches: the steps per model over the run, and the key (timestamp, step_id) of its last event and
    # of its last `turn` event with what the run's status needs of them. Valid only while its "at" equals
    # `updated_at` (every whole-run projection moves `updated_at` on); otherwise recomputed from the rows.
    tally = models.JSONField(null=True, blank=True, editable=False)
    # Name and tags. `name` / `tags` are the trace's (`runtime.facts.run_labels`: `metadata.run_name`
    # / `run_tags`), projected from the raw events like every column above, so `rebuild_projections`
    # writes them again. `label_name` / `label_tags` are what a member set on the page or with PATCH
    # (audited): no projection ever writes them, so a rebuild keeps them; None = not set, the trace's
    # shows. `shown_name` / `shown_tags` are what pages, the API and the filters use.
    name = models.CharField(max_length=200, blank=True)
    tags = models.JSONField(default=list, blank=True)
    label_name = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 (None: not set; "": no name)
    label_tags = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="run_project_run_id_uniq")]
        indexes = [
            # The runs list: newest first per project.
            models.Index(fields=["project", "-started_at"], name="run_project_started_idx"),
            # A run page lists the runs of its bundle and the runs it delegated.
            models.Index(fields=["project", "bundle_id"], name="run_project_bundle_idx"),
            models.Index(fields=["project", "delegated_by_run_id"], name="run_project_delegated_idx"),
        ]

    def __str__(self) -> str:
        return self.run_id

    # Addresses (DESIGN.md §9): the project is part of a run's address, and the run id is encoded by
    # the `run_id` URL converter (traces/core/converters.py), so every stored id can be opened.

    def get_absolute_url(self) -> str:
        """The run overview page."""
        return run_page_url(self.project_id, self.run_id)

    @property
    def is_running(self) -> bool:
        return self.status == self.Status.RUNNING

    @property
    def conversation(self) -> Conversation | None:
        """The conversation our workers ran as this run, if any (`traces/models/conversation.py`)."""
        # By its name: the conversation's module imports this one.
        conversations = apps.get_model("traces", "Conversation")._default_manager
        cached = self.__dict__.get("_conversation", False)
        if cached is False:
            cached = conversations.filter(project_id=self.project_id, run_id=self.run_id).first()
            self.__dict__["_conversation"] = cached
        return cached

    @property
    def tokens_estimated(self) -> bool:
        """True when some of the run's token counts are calibrated estimates (see
        `ContextDecision.estimated`): pages show "≈" before them. One query (a probe of a partial index,
        whatever the run's length), cached per instance."""
        cached = self.__dict__.get("_tokens_estimated")
        if cached is None:
            cached = self.decisions.filter(counts_estimated=True).exists()
            self.__dict__["_tokens_estimated"] = cached
        return cached

    @property
    def last_activity(self) -> datetime | None:
        """When the run last showed a sign of life: the older of its last event's timestamp (the
        producer's clock) and the last time ingestion stored a new event of it (`updated_at`, ours).

        Why the older: an old file uploaded now has a fresh `updated_at` but an old last event (it is
        not live); a producer whose clock runs ahead has a future last event but a true `updated_at`."""
        stamps = [t for t in (self.ended_at, self.updated_at) if t is not None]
        return min(stamps) if stamps else None

    @property
    def is_live(self) -> bool:
        """True while the run may still get events: `running`, and active within the last
        `settings.ARCANA_LIVE_WINDOW_SECONDS`. Pages show "Live" and poll only then; a `running` run
        past the window is `is_idle` (a crashed producer, an abandoned file) and pages stop polling it."""
        if self.status != self.Status.RUNNING:
            return False
        last = self.last_activity
        window = timedelta(seconds=int(settings.ARCANA_LIVE_WINDOW_SECONDS))
        return last is not None and timezone.now() - last <= window

    @property
    def is_idle(self) -> bool:
        """`running`, but no sign of life within the live window: it may never get more events."""
        return self.status == self.Status.RUNNING and not self.is_live

    @property
    def is_updating(self) -> bool:
        """Whether an open page of this run should keep polling (traces/runs/live.py): it is live, or a
        worker has its conversation — between two turns of a script, or with a playground turn
        queued, the run's last turn event says "complete" although more are coming."""
        if self.is_live:
            return True
        if self.source != self.Source.RUNTIME:
            return False  # only our runtime's runs have a conversation (no query for uploads)
        conversation = self.conversation
        return conversation is not None and conversation.is_active

    @property
    def is_completed(self) -> bool:
        return self.status == self.Status.COMPLETED

    @property
    def is_failed(self) -> bool:
        return self.status == self.Status.FAILED

    @property
    def shown_name(self) -> str:
        """The run's name: set on the page or the API, else the trace's ("" for none)."""
        return self.label_name if self.label_name is not None else self.name

    @property
    def shown_tags(self) -> list[str]:
        """The run's tags: set on the page or the API, else the trace's."""
        tags = self.label_tags if self.label_tags is not None else self.tags
        return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []

    @property
    def is_cancelled(self) -> bool:
        return self.status == self.Status.CANCELLED

    @property
    def has_primitives(self) -> bool:
        return self.primitives > 0

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()

    def turn_url(self, number: int) -> str:
        """The page of turn `number` (1-based) of this run."""
        return reverse(
            "traces:turn", kwargs={"project_id": self.project_id, "run_id": self.run_id, "number": number}
        )

    def live_url(self) -> str:
        """The fragment a page polls while the run is live (header stats and the timeline's last page)."""
        return reverse("traces:run_live", kwargs=self._url_kwargs())

    def fidelity_url(self) -> str:
        """The fidelity-map fragment (the range control fetches it with `?from=`)."""
        return reverse("traces:run_fidelity", kwargs=self._url_kwargs())

    def band_url(self) -> str:
        """The context band's fragment (what filled the context over the run), which the overview loads."""
        return reverse("traces:run_band", kwargs=self._url_kwargs())

    def turn_live_url(self, number: int) -> str:
        """The steps fragment a turn page polls while the run is live."""
        return reverse("traces:turn_live", kwargs={**self._url_kwargs(), "number": number})

    def api_url(self) -> str:
        """The run in the read API."""
        return run_api_url(self.project_id, self.run_id)

    def api_turn_url(self, number: int) -> str:
        return reverse("api-turn", kwargs={**self._url_kwargs(), "number": number})

    def api_events_url(self) -> str:
        return reverse("api-events", kwargs=self._url_kwargs())

    def _url_kwargs(self) -> dict[str, Any]:
        return {"project_id": self.project_id, "run_id": self.run_id}

    def delegated_by_url(self) -> str:
        """The page of the run that delegated this one ("" when none), whether or not it is stored."""
        return run_page_url(self.project_id, self.delegated_by_run_id) if self.delegated_by_run_id else ""

    @cached_property
    def related_runs(self) -> RelatedRuns:
        """The runs linked to this one (`runtime.facts.run_links`), in one query: the runs of its
        sub-agent bundle in start order (itself included), the run that delegated it, and the runs it
        delegated. arcana-agent 1.2 writes one run per send, so these links are what ties them."""
        q = Q(delegated_by_run_id=self.run_id)
        if self.bundle_id:
            q |= Q(bundle_id=self.bundle_id)
        if self.delegated_by_run_id:
            q |= Q(run_id=self.delegated_by_run_id)
        runs = list(
            Run.objects.filter(project_id=self.project_id)
            .filter(q)
            .order_by(models.F("started_at").asc(nulls_last=True), "run_id")
            .only(
                "id",
                "project_id",
                "run_id",
                "agents",
                "status",
                "source",  # the status badge asks is_updating (source first: no conversation for uploads)
                "updated_at",  # … and is_live (a running run's last activity)
                "ended_at",
                "errors",
                "started_at",
                "bundle_id",
                "delegated_by_run_id",
            )
        )
        return RelatedRuns(
            bundle=[r for r in runs if self.bundle_id and r.bundle_id == self.bundle_id],
            delegated_by=next((r for r in runs if r.run_id == self.delegated_by_run_id), None),
            delegated=[r for r in runs if r.delegated_by_run_id == self.run_id],
        )

    def raw_events(self) -> QuerySet[Event]:
        """The run's raw events, oldest first."""
        return Event.objects.filter(project_id=self.project_id, run_id=self.run_id).order_by(
            "timestamp", "step_id"
        )

    def active_pins_at(self, turn: int, agent: str | None = None) -> list[Pin]:
        """Pins in effect at `turn`, in creation order, by the one rule of DESIGN.md §1
        (`Pin.is_active_at`, i.e. `runtime.facts.pin_active_at`); the query only skips later pins."""
        qs = self.pins.filter(created_turn__lte=turn)
        if agent is not None:
            qs = qs.filter(agent=agent)
        return [p for p in qs.order_by("created_turn", "created_step", "id") if p.is_active_at(turn)]


@dataclass
class RelatedRuns:
    """See `Run.related_runs`. `agents`: the bundle's agents, in the order their runs started."""

    bundle: list[Run] = field(default_factory=list)
    delegated_by: Run | None = None
    delegated: list[Run] = field(default_factory=list)

    @property
    def agents(self) -> list[str]:
        seen: list[str] = []
        for r in self.bundle:
            for a in r.agents or []:
                if a not in seen:
                    seen.append(a)
        return seen

    @property
    def any(self) -> bool:
        return bool(self.bundle or self.delegated_by or self.delegated)


class Event(models.Model):
    """One raw trace event, the source of truth. `raw` is the JSON text exactly as received (kept as
    text: it is written once and read back whole, and text is several times cheaper to write than
    jsonb). Unique per (project, run_id, step_id): a replay is a duplicate and changes nothing."""

    # No foreign key to Run: an event is keyed by the (project, run_id) it names, so raw rows can be
    # written before (and independently of) the projection rows; `Run.raw_events()` joins them.
    # No index of its own and no database constraint (ingest speed, bench/ingest.py): the unique
    # (project, run_id, step_id) index serves every lookup by project; the project is checked by the
    # run row `traces.ingest` upserts in the same transaction (its foreign key locks the project row
    # until commit), and deleting a project still deletes its events (Django's on_delete).
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False
    )
    run_id = models.CharField(max_length=200)
    step_id = models.CharField(max_length=200)
    parent_step_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001  (as written)
    event_type = models.CharField(max_length=100)
    agent = models.CharField(max_length=200, blank=True)  # metadata.source_agent as written
    timestamp = models.DateTimeField()
    raw = models.TextField()
    received_at = models.DateTimeField(default=timezone.now)
    # `metadata.turn` of our runtime's events (None for others): lets ingestion load one turn's events.
    turn = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["timestamp", "step_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "run_id", "step_id"], name="event_project_run_step_uniq"
            )
        ]
        # Every index costs each COPY'd row an insert; these are the ones a query needs. `raw_events()`
        # (the read API's event list) finds a run's rows through the unique index and sorts them.
        # Incremental projection: a turn's events, and the events that name a new `turn` event. Both
        # partial, so that each serves only the queries that name its last column: a live run's rows are
        # newer than the table's statistics, and the planner, believing the run holds one row, took the
        # smallest index on (project, run_id) for any lookup in the run — the turn index for a parent or
        # a step id — and filtered every event of the run (a cost growing with the run).
        indexes = [
            models.Index(
                fields=["project", "run_id", "turn"],
                name="event_run_turn_idx",
                condition=Q(turn__isnull=False),
            ),
            models.Index(
                fields=["project", "run_id", "parent_step_id"],
                name="event_run_parent_idx",
                condition=Q(parent_step_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.step_id}"

    @property
    def data(self) -> dict[str, Any]:
        """The event as a dict (parses `raw`)."""
        value = json.loads(self.raw)
        return value if isinstance(value, dict) else {}
