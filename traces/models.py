"""The trace store: teams and projects, raw events, and the projections pages read.

`Event` rows are the source of truth (one per `(project, run_id, step_id)`). Everything below `Run`
(`Turn`, `Step`, `ContextDecision`, `Pin`, `PrimitiveEvent`) and the counters on `Run` are projections
computed from a run's raw events by `traces.ingest` — the only module that creates or changes trace
rows (DESIGN.md §3). Pages and the read API read projections and never re-parse raw JSON.

Numbering follows DESIGN.md §1: turns and steps are 1-based for both producers; `agent` is `""` for a
plain chat (one unnamed agent).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, TypedDict

from django.conf import settings
from django.db import models
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from runtime.facts import ToolResult, pin_active_at


class Team(models.Model):
    """A group of people sharing projects. Every page and API call is scoped to the caller's teams."""

    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's place in a team. Roles, strongest first: owner, admin, member, viewer."""

    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        MEMBER = "member"
        VIEWER = "viewer"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_team_user_uniq")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    @property
    def can_write(self) -> bool:
        """Viewers read; everyone else may upload, start conversations, write notes and share runs."""
        return self.can(Action.UPLOAD)

    @property
    def rank(self) -> int:
        return ROLE_RANK[self.role]

    def can(self, action: str) -> bool:
        """Whether this member may do `action` (an `Action`) in their team: the ONE permission rule.

        >>> Membership(role="viewer").can(Action.READ), Membership(role="viewer").can(Action.UPLOAD)
        (True, False)
        >>> Membership(role="admin").can(Action.MANAGE_KEYS), Membership(role="admin").can(Action.DELETE_TEAM)
        (True, False)
        """
        return ROLE_RANK[self.role] >= ROLE_RANK[PERMISSIONS[action]]

    def role_at_least(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


class Action:
    """What a member may do in a team; `PERMISSIONS` maps each to the weakest role allowed to (DESIGN.md §8:
    viewer reads < member uploads, converses, notes, shares < admin manages keys, projects, members,
    deletes data and reads the audit log < owner deletes the team)."""

    READ = "read"
    UPLOAD = "upload"
    CONVERSE = "converse"
    NOTE = "note"
    SHARE = "share"
    MANAGE_KEYS = "manage_keys"
    MANAGE_PROJECTS = "manage_projects"
    MANAGE_MEMBERS = "manage_members"
    DELETE_RUNS = "delete_runs"
    VIEW_AUDIT = "view_audit"
    DELETE_TEAM = "delete_team"


ROLE_RANK: dict[str, int] = {
    Membership.Role.VIEWER: 0,
    Membership.Role.MEMBER: 1,
    Membership.Role.ADMIN: 2,
    Membership.Role.OWNER: 3,
}

PERMISSIONS: dict[str, str] = {
    Action.READ: Membership.Role.VIEWER,
    Action.UPLOAD: Membership.Role.MEMBER,
    Action.CONVERSE: Membership.Role.MEMBER,
    Action.NOTE: Membership.Role.MEMBER,
    Action.SHARE: Membership.Role.MEMBER,
    Action.MANAGE_KEYS: Membership.Role.ADMIN,
    Action.MANAGE_PROJECTS: Membership.Role.ADMIN,
    Action.MANAGE_MEMBERS: Membership.Role.ADMIN,
    Action.DELETE_RUNS: Membership.Role.ADMIN,
    Action.VIEW_AUDIT: Membership.Role.ADMIN,
    Action.DELETE_TEAM: Membership.Role.OWNER,
}


def roles_allowed(action: str) -> list[str]:
    """The roles that may do `action`, for queries (`team__memberships__role__in=roles_allowed(...)`)."""
    return [role for role, rank in ROLE_RANK.items() if rank >= ROLE_RANK[PERMISSIONS[action]]]


def membership_of(user: Any, team: Team | int) -> Membership | None:
    """`user`'s membership of `team` (a Team or its id), or None (anonymous users and outsiders)."""
    if user is None or not getattr(user, "is_authenticated", False) or getattr(user, "pk", None) is None:
        return None
    team_id = team.pk if isinstance(team, Team) else team
    return Membership.objects.filter(team_id=team_id, user=user).select_related("team").first()


def user_can(user: Any, team: Team | int, action: str) -> bool:
    """Whether `user` may do `action` in `team` (False for outsiders and anonymous users)."""
    membership = membership_of(user, team)
    return membership is not None and membership.can(action)


class Project(models.Model):
    """A team's bucket of runs; API keys belong to one project. `slug` is unique within its team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="projects")
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Runs whose last activity is older than this many days are deleted by the `enforce_retention`
    # beat task (traces/tasks.py); None keeps runs forever.
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["team__name", "slug"]
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="project_team_slug_uniq")]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.slug}"


def run_page_url(project_id: int, run_id: str) -> str:
    """The page of the run `run_id` of project `project_id`, for callers holding ids, not a `Run` (an
    upload's list of run ids). With a `Run` at hand, use `run.get_absolute_url()`."""
    return reverse("traces:run", kwargs={"project_id": project_id, "run_id": run_id})


def run_api_url(project_id: int, run_id: str) -> str:
    """The read API's address of a run, for callers holding ids; with a `Run`, `run.api_url()`."""
    return reverse("api-run", kwargs={"project_id": project_id, "run_id": run_id})


def projects_for_user(user: Any, action: str = Action.READ) -> QuerySet[Project]:
    """The projects of every team where `user` may do `action` (empty for anonymous users). One
    membership row must match both the user and the role, hence the single `filter()` call."""
    if user is None or not user.is_authenticated or getattr(user, "pk", None) is None:
        return Project.objects.none()
    return Project.objects.filter(
        team__memberships__user=user, team__memberships__role__in=roles_allowed(action)
    )


class Run(models.Model):
    """One trace (one `run_id`) in a project, with counters projected from its raw events.

    `status`, `failure` and `errors` are `runtime.facts.run_outcome` of its events: `failed` (with the
    reason in `failure`) when an error stopped it or its last step failed — including an arcana-agent 1.2
    send whose model never answered —, `completed` when its last answer is final, else `running`; a run
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

    class Status(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"

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
    # a `metadata.turn`, so a batch re-projects only the turns it touches (see traces/ingest.py).
    incremental = models.BooleanField(default=False)

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
    # the `run_id` URL converter (traces/converters.py), so every stored id can be opened.

    def get_absolute_url(self) -> str:
        """The run overview page."""
        return run_page_url(self.project_id, self.run_id)

    @property
    def is_running(self) -> bool:
        return self.status == self.Status.RUNNING

    @property
    def conversation(self) -> Conversation | None:
        """The conversation our workers ran as this run, if any (`traces/models_conversation.py`)."""
        cached = self.__dict__.get("_conversation", False)
        if cached is False:
            cached = Conversation.objects.filter(project_id=self.project_id, run_id=self.run_id).first()
            self.__dict__["_conversation"] = cached
        return cached

    @property
    def tokens_estimated(self) -> bool:
        """True when some of the run's token counts are calibrated estimates (see
        `ContextDecision.estimated`): pages show "≈" before them. One query, cached per instance."""
        cached = self.__dict__.get("_tokens_estimated")
        if cached is None:
            cached = self.decisions.filter(report__token_counts__estimated=True).exists()
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
        """Whether an open page of this run should keep polling (traces/live.py): it is live, or a
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


class TurnDict(TypedDict):
    agent: str
    number: int
    steps: int
    prompt_tokens: int
    completion_tokens: int
    tokens: int
    peak_utilization: float | None
    strategy: str
    compressions: int
    primitives: int
    tool_calls: int
    errors: int
    failure: str
    started_at: str | None
    ended_at: str | None


class Turn(models.Model):
    """One turn of one agent (1-based `number`): all the steps one user message caused."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="turn_set", db_index=False)
    agent = models.CharField(max_length=200, blank=True)
    number = models.PositiveIntegerField()
    steps = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    peak_utilization = models.FloatField(null=True, blank=True)
    strategy = models.CharField(max_length=100, blank=True)  # the strategy of the turn's last decision
    compressions = models.PositiveIntegerField(default=0)  # sum of compressed_count over its decisions
    primitives = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)  # tool calls the model asked for (not primitives)
    errors = models.PositiveIntegerField(default=0)  # runtime.facts.step_errors over its steps
    failure = models.TextField(blank=True)  # why the send failed (runtime.facts.turn_outcome), or ""
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "agent", "number"], name="turn_run_agent_number_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.agent or '-'} turn {self.number}"

    def to_dict(self) -> TurnDict:
        return TurnDict(
            agent=self.agent,
            number=self.number,
            steps=self.steps,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            tokens=self.tokens,
            peak_utilization=self.peak_utilization,
            strategy=self.strategy,
            compressions=self.compressions,
            primitives=self.primitives,
            tool_calls=self.tool_calls,
            errors=self.errors,
            failure=self.failure,
            started_at=self.started_at.isoformat() if self.started_at else None,
            ended_at=self.ended_at.isoformat() if self.ended_at else None,
        )


#: One tool result of a step, as `runtime.facts.tool_results` gives it (`Step.tool_results` holds a list).
ToolResultDict = ToolResult


class Step(models.Model):
    """One LLM call inside a turn. `step_id` is the step's `turn` event id (None when that event has
    not arrived: a send that failed before its first LLM call, or a batch still in flight)."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_set", db_index=False)
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="step_set")
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField()
    number = models.PositiveIntegerField()  # 1-based within its turn
    step_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001  (None = not arrived)
    model = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    total_tokens = models.PositiveBigIntegerField(default=0)
    finish_reason = models.CharField(max_length=50, blank=True)
    # None when the trace kept only a digest (Arcana "minimized"), "" when the model said nothing.
    assistant_text = models.TextField(null=True, blank=True)  # noqa: DJ001
    tool_calls = models.JSONField(default=list)  # [{id, name, arguments?}] as the turn event lists them
    # What came back: list[ToolResultDict] (`runtime.facts.tool_results`), in the order the model asked.
    tool_results = models.JSONField(default=list)
    messages = models.JSONField(null=True, blank=True)  # ours: messages this step appended to history
    prompt_snapshot = models.JSONField(null=True, blank=True)  # only when the producer recorded it
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    completed = models.BooleanField(null=True)  # the turn event's assessment
    failed = models.BooleanField(null=True)
    # runtime.facts.step_errors (dicts: kind, message, name, ends_send) and step_failure ("" if none).
    errors = models.JSONField(default=list)
    failure = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "turn_number", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "agent", "turn_number", "number"], name="step_run_agent_turn_number_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.agent or '-'} {self.turn_number}.{self.number}"


class MessageDecisionDict(TypedDict):
    index: int | None
    role: str | None
    outcome: str | None
    fidelity: str | None
    relevance_score: float | None
    token_count_before: int | None
    token_count_after: int | None
    reason: str | None
    pinned: bool
    pin_id: str | None
    # Pinned blocks: `index` is where the block really was in the working set, `raw_index` the index the
    # producer wrote (arcana-agent 1.2 writes a synthetic one), `pin_id` the pin it is
    # (runtime.facts.pinned_blocks). For other rows `raw_index` equals `index`.
    raw_index: int | None


#: The keys of one message decision, in the order they are stored.
MESSAGE_DECISION_KEYS: tuple[str, ...] = tuple(MessageDecisionDict.__annotations__)


def pack_message_decisions(rows: list[list[Any]]) -> str:
    """The stored form of a step's message decisions: compact JSON `{"cols": [...], "rows": [[...], ...]}`,
    one row per input message with the values of `MESSAGE_DECISION_KEYS` in that order."""
    return _PACK_HEAD + _dumps(rows) + "}"


def unpack_message_decisions(text: str | None) -> list[MessageDecisionDict]:
    """`pack_message_decisions` reversed: the list of `MessageDecisionDict` pages and the API read.
    Columns are taken from the stored header, so a later change of keys still reads old rows."""
    if not text:
        return []
    value = json.loads(text)
    if isinstance(value, list):  # a plain list of decision objects (as producers write them)
        return value
    cols = value.get("cols") or MESSAGE_DECISION_KEYS
    return [dict(zip(cols, row, strict=False)) for row in value.get("rows") or []]  # type: ignore[misc]


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_PACK_HEAD = '{"cols":' + _dumps(list(MESSAGE_DECISION_KEYS)) + ',"rows":'
EMPTY_MESSAGE_TABLE = pack_message_decisions([])


class ContextDecision(models.Model):
    """What the working-set builder did before one step; one per step.

    The per-message decisions are stored as ONE compact columnar JSON text per decision
    (`message_table`: `{"cols": MESSAGE_DECISION_KEYS, "rows": [[index, role, outcome, ...], ...]}`,
    written by `pack_message_decisions`), not as one row per message; `message_decisions` turns it back
    into the list of `MessageDecisionDict` the pages and the read API use.

    Why — measured with `bench/ingest.py --storage-compare` on PostgreSQL (this shared 2-core machine;
    mix (b): 2,000 decisions, 218,168 message decisions; read = fetch + decode to dicts):

    ==============  ===========  =======  ===================  ======================
    storage         COPY         size     turn page            fidelity map (20 steps)
    ==============  ===========  =======  ===================  ======================
    row per message 115k/s       43.7 MB  0.83 ms / decision   14.2 ms / run
    jsonb objects   78k/s        6.2 MB   0.92 ms / decision   16.9 ms / run
    packed jsonb    165k/s       6.0 MB   0.72 ms / decision   12.1 ms / run
    packed text     620k/s       4.9 MB   0.64 ms / decision    9.7 ms / run
    ==============  ===========  =======  ===================  ======================

    The previous form (jsonb objects, ~49 MB of JSON before compression) made PostgreSQL's jsonb parser
    the floor of mix (b) (~70–85k message decisions/s); packed text is 8x cheaper to write and also the
    fastest to read, since nothing queries inside the array (the aggregates pages filter on are the
    columns `pinned_count` / `dropped_count`) and jsonb bought nothing. Mix (b) went from ~36k to
    ~64k message decisions/s end to end with everything else equal (2 gunicorn workers). Pages
    (`bench/pages.py`, 1,000 steps x 200 decisions, SQLite, median of 3 runs): turn page 44.8 → 36.7
    ms, run overview 253 → 289 ms — within this machine's noise (run to run: 35–64 ms, 231–326 ms);
    template rendering, not decoding, dominates both. One row per message costs a Python object and
    a COPY line per message (~100 per step) and reads no faster; a step's decisions are always shown
    together, so one value per step stays.
    """

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="decisions", db_index=False)
    step = models.OneToOneField(Step, on_delete=models.CASCADE, related_name="decision")
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField()
    step_number = models.PositiveIntegerField()
    strategy = models.CharField(max_length=100, blank=True)
    budget_total = models.IntegerField(null=True, blank=True)
    budget_used = models.IntegerField(null=True, blank=True)
    budget_tools = models.IntegerField(null=True, blank=True)
    budget_reserve = models.IntegerField(null=True, blank=True)
    messages_in = models.IntegerField(null=True, blank=True)
    messages_out = models.IntegerField(null=True, blank=True)
    compressed_count = models.IntegerField(default=0)
    pinned_count = models.IntegerField(default=0)
    dropped_count = models.IntegerField(default=0)
    explanation = models.TextField(blank=True)
    utilization = models.FloatField(null=True, blank=True)
    report = models.JSONField(null=True, blank=True)  # metadata.context_report as written
    message_table = models.TextField(default=EMPTY_MESSAGE_TABLE)  # packed, see the docstring

    class Meta:
        ordering = ["agent", "turn_number", "step_number"]
        indexes = [models.Index(fields=["run", "agent", "turn_number"], name="decision_run_turn_idx")]

    def __str__(self) -> str:
        return f"decision {self.agent or '-'} {self.turn_number}.{self.step_number}"

    @property
    def message_decisions(self) -> list[MessageDecisionDict]:
        """The per-message decisions in input order (decoded once per instance)."""
        cached: list[MessageDecisionDict] | None = self.__dict__.get("_message_decisions")
        if cached is None:
            cached = self.__dict__["_message_decisions"] = unpack_message_decisions(self.message_table)
        return cached

    def decisions(self) -> list[MessageDecisionDict]:
        """The per-message decisions in input order."""
        return list(self.message_decisions)

    @property
    def estimated(self) -> bool:
        """True when the token counts are calibrated estimates (a model whose tokenizer tiktoken does
        not have; `context_report.token_counts` says so): pages show them with "≈"."""
        counts = (self.report or {}).get("token_counts") if isinstance(self.report, dict) else None
        return isinstance(counts, dict) and counts.get("estimated") is True

    @property
    def fidelity_distribution(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.message_decisions:
            key = d.get("fidelity") or d.get("outcome") or "?"
            out[key] = out.get(key, 0) + 1
        return out


def content_hash(text: str | None) -> str:
    """sha256 hex of pinned content (empty string for no content)."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest() if text is not None else ""


class Pin(models.Model):
    """Content an agent protected, with its lifetime in 1-based turns (docs/trace-format.md, Pins)."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="pins", db_index=False)
    agent = models.CharField(max_length=200, blank=True)
    pin_id = models.CharField(max_length=100)
    label = models.CharField(max_length=500, blank=True)
    content = models.TextField(blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    tokens = models.IntegerField(null=True, blank=True)
    created_turn = models.PositiveIntegerField()
    created_step = models.PositiveIntegerField(null=True, blank=True)
    until_turn = models.IntegerField(null=True, blank=True)
    unpinned_turn = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_turn", "created_step", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "agent", "pin_id"], name="pin_run_agent_pin_id_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.pin_id} ({self.label})"

    def is_active_at(self, turn: int) -> bool:
        """DESIGN.md §1: `runtime.facts.pin_active_at`, the one statement of the rule."""
        return pin_active_at(self.created_turn, self.until_turn, self.unpinned_turn, turn)


class PrimitiveEvent(models.Model):
    """One `recall` / `pin` / `unpin` call. `ok` is False when the call did not do what it asked
    (an error result, `pinned: false`, `unpinned: false`, `found: false`); `note` says why, or what it did."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="primitive_events", db_index=False)
    step = models.ForeignKey(Step, on_delete=models.CASCADE, null=True, related_name="primitive_events")
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField(null=True, blank=True)
    step_number = models.PositiveIntegerField(null=True, blank=True)
    event_step_id = models.CharField(max_length=200)  # the cognitive_primitive event's own step_id
    primitive = models.CharField(max_length=50)
    args = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    ok = models.BooleanField(default=True)
    note = models.TextField(blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    timestamp = models.DateTimeField()

    class Meta:
        ordering = ["timestamp", "id"]
        indexes = [models.Index(fields=["run", "agent", "turn_number"], name="primitive_run_turn_idx")]

    def __str__(self) -> str:
        return f"{self.primitive} at {self.agent or '-'} turn {self.turn_number}"


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
        indexes = [
            # Incremental projection: a turn's events, and the events that name a new `turn` event.
            models.Index(fields=["project", "run_id", "turn"], name="event_run_turn_idx"),
            models.Index(fields=["project", "run_id", "parent_step_id"], name="event_run_parent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.step_id}"

    @property
    def data(self) -> dict[str, Any]:
        """The event as a dict (parses `raw`)."""
        value = json.loads(self.raw)
        return value if isinstance(value, dict) else {}


class Upload(models.Model):
    """A JSONL file to ingest, processed by the `process_upload` task in chunks with progress."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="uploads")
    file = models.FileField(upload_to="uploads/%Y/%m/%d/", max_length=300)
    original_name = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    bytes = models.PositiveBigIntegerField(default=0)
    lines_total = models.PositiveIntegerField(null=True, blank=True)  # known once the file is read
    lines_done = models.PositiveIntegerField(default=0)
    accepted = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    # [{"line": n, "field"?: "...", "message": "..."}] (runtime.errors.ErrorDetail; older rows: "error"), capped
    line_errors = models.JSONField(default=list)
    runs = models.JSONField(default=list)  # run ids the file touched, sorted
    error = models.TextField(blank=True)  # why a failed upload failed as a whole
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    api_key = models.ForeignKey("ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Work survives a dead worker (DESIGN.md §7). A `running` row is held under a lease: the worker
    # named `lease_owner` renews `lease_expires_at` with every chunk it commits; a row whose lease
    # expired lost its worker and is claimed again from its cursor (`lines_done`). `queued_at` is
    # when a task was last enqueued for a `queued` row (a row left queued while the broker was down is
    # enqueued again by the sweeper); `attempts` counts claims, so a file that kills every worker
    # that reads it ends `failed` instead of looping.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The sweeper's scan: unfinished uploads only.
            models.Index(
                fields=["status"],
                name="upload_unfinished_idx",
                condition=models.Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"upload {self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def progress(self) -> float | None:
        """0..1 once the number of lines is known."""
        if not self.lines_total:
            return 1.0 if self.status == self.Status.DONE else None
        return min(1.0, self.lines_done / self.lines_total)


class LoginFailure(models.Model):
    """A failed sign-in, kept for the login throttle's window (`arcana_site/login.py`). In the database,
    not in a process, so every gunicorn worker and machine counts the same failures."""

    username = models.CharField(max_length=150)  # as typed, lower-cased
    address = models.CharField(max_length=64)  # the client's IP address
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["username", "created_at"], name="loginfailure_user_idx"),
            models.Index(fields=["address", "created_at"], name="loginfailure_addr_idx"),
            models.Index(fields=["created_at"], name="loginfailure_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.created_at:%Y-%m-%d %H:%M:%S}"


KEY_PREFIX = "arc_"


class ApiKey(models.Model):
    """A project API key. Only its sha256 is stored; the key is shown once, when it is issued.

    `scope`: an `ingest` key may only send traces (`POST /api/v1/ingest`, uploads and their status); a
    `read_ingest` key may also read the project's runs through the API."""

    class Scope(models.TextChoices):
        INGEST = "ingest", "ingest only"
        READ_INGEST = "read_ingest", "read + ingest"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=12, choices=Scope.choices, default=Scope.READ_INGEST)
    prefix = models.CharField(max_length=16)  # the first characters, to tell keys apart in lists
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The ingest rate limit's fixed window (traces/ratelimit.py): its number and the requests counted in
    # it. On the key row so every gunicorn worker and machine shares the count through the database.
    rate_window = models.BigIntegerField(default=0)
    rate_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @staticmethod
    def hash_key(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    @classmethod
    def issue(
        cls, project: Project, name: str = "", created_by: Any = None, scope: str = Scope.READ_INGEST
    ) -> tuple[ApiKey, str]:
        """Create a key; returns the row and the raw key (the only time it exists in clear)."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        key = cls.objects.create(
            project=project,
            name=name,
            prefix=raw[:12],
            key_hash=cls.hash_key(raw),
            created_by=created_by,
            scope=scope,
        )
        return key, raw

    @property
    def can_read(self) -> bool:
        return self.scope == self.Scope.READ_INGEST

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class ShareLinkQuerySet(models.QuerySet["ShareLink"]):
    def usable(self) -> ShareLinkQuerySet:
        """Links that open a page now: not revoked, not expired."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


class ShareLink(models.Model):
    """A read-only URL to one run, for someone outside the team (DESIGN.md §6, §8).

    The token (`secrets.token_urlsafe(32)`, 256 bits) is shown once, when the link is issued; only its
    sha256 is stored, so a database leak opens nothing and lookup by hash never compares secrets
    byte by byte in Python. `hide_content` links show the run's structure with every content string
    replaced by its size (`traces.sharing` is the one place that does it)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="share_links")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="share_links")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)  # first characters of the token, to tell links apart
    hide_content = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"share link {self.prefix}… to {self.run_id}"

    @staticmethod
    def hash_token(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return not self.is_revoked and not self.is_expired

    @property
    def state(self) -> str:
        """ "active", "revoked" or "expired", for lists."""
        return "revoked" if self.is_revoked else "expired" if self.is_expired else "active"


class Note(models.Model):
    """A review note on a run, one of its turns, or one step's context decision (`turn_number` and
    `step_number` None for the run / the turn as a whole), labelled and resolvable."""

    class Label(models.TextChoices):
        BUG = "bug"
        EXPECTED = "expected"
        QUESTION = "question"

    BODY_MAX = 5000

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="notes")
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField(null=True, blank=True)
    step_number = models.PositiveIntegerField(null=True, blank=True)
    label = models.CharField(max_length=10, choices=Label.choices, default=Label.QUESTION)
    body = models.TextField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["run", "turn_number"], name="note_run_turn_idx")]

    def __str__(self) -> str:
        return f"{self.label} note on {self.run_id} {self.target_label}"

    @property
    def is_resolved(self) -> bool:
        return self.resolved_at is not None

    @property
    def target_label(self) -> str:
        """ "run", "turn 3" or "turn 3 step 2" (with the agent of a pool)."""
        who = f"{self.agent} " if self.agent else ""
        if self.turn_number is None:
            return "run"
        if self.step_number is None:
            return f"{who}turn {self.turn_number}"
        return f"{who}turn {self.turn_number} step {self.step_number}"


INVITE_PREFIX = "inv_"


class Invite(models.Model):
    """A one-time link that adds whoever opens it (signing up, or already logged in) to `team` with
    `role`. Only the token's sha256 is stored: the link is shown once, to the admin who made it."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invites")
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True)
    note = models.CharField(max_length=100, blank=True)  # who it is for, as the admin wrote it
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invite to {self.team} as {self.role}"

    @staticmethod
    def hash_token(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    @property
    def is_usable(self) -> bool:
        """Not yet used, not revoked, not expired."""
        return self.accepted_at is None and self.revoked_at is None and self.expires_at > timezone.now()

    @property
    def state(self) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "open"


class AuditLog(models.Model):
    """One change to a team's members, keys, share links, notes, projects or data (STYLE.md item 21).

    Written by the action that makes the change, inside its transaction (`traces.audit.record`), so no
    change exists without its row. `actor` is the user who acted (None for an API key or the system:
    `actor_label` then says which); `target` names the thing changed; `extra` holds details and, for
    changes, `{"old": ..., "new": ...}`."""

    KEY_CREATED = "key_created"
    KEY_REVOKED = "key_revoked"
    SHARE_LINK_CREATED = "share_link_created"
    SHARE_LINK_REVOKED = "share_link_revoked"
    NOTE_CREATED = "note_created"
    NOTE_RESOLVED = "note_resolved"
    NOTE_DELETED = "note_deleted"
    MEMBER_INVITED = "member_invited"
    INVITE_REVOKED = "invite_revoked"
    MEMBER_JOINED = "member_joined"
    MEMBER_ROLE_CHANGED = "member_role_changed"
    MEMBER_REMOVED = "member_removed"
    MEMBER_LEFT = "member_left"
    PROJECT_CREATED = "project_created"
    PROJECT_CHANGED = "project_changed"
    PROJECT_DELETED = "project_deleted"
    RUN_DELETED = "run_deleted"
    RUNS_EXPIRED = "runs_expired"
    TEAM_CREATED = "team_created"

    EVENT_TYPES: dict[str, str] = {
        KEY_CREATED: "API key created",
        KEY_REVOKED: "API key revoked",
        SHARE_LINK_CREATED: "share link created",
        SHARE_LINK_REVOKED: "share link revoked",
        NOTE_CREATED: "note created",
        NOTE_RESOLVED: "note resolved",
        NOTE_DELETED: "note deleted",
        MEMBER_INVITED: "member invited",
        INVITE_REVOKED: "invite revoked",
        MEMBER_JOINED: "member joined",
        MEMBER_ROLE_CHANGED: "member role changed",
        MEMBER_REMOVED: "member removed",
        MEMBER_LEFT: "member left",
        PROJECT_CREATED: "project created",
        PROJECT_CHANGED: "project changed",
        PROJECT_DELETED: "project deleted",
        RUN_DELETED: "run deleted",
        RUNS_EXPIRED: "runs deleted by retention",
        TEAM_CREATED: "team created",
    }

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="audit_logs")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)  # "alice", "api key arc_abc…", "retention"
    event_type = models.CharField(max_length=40, choices=list(EVENT_TYPES.items()))
    target = models.CharField(max_length=300, blank=True)
    extra = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"], name="auditlog_team_created_idx")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_label} {self.event_type} {self.target}"

    @property
    def event_label(self) -> str:
        return self.EVENT_TYPES.get(self.event_type, self.event_type)


# The worker side's model lives in its own module; imported here so Django registers it with the app.
from traces.models_conversation import Conversation as Conversation  # noqa: E402  (re-exported)


class StoredFile(models.Model):
    """A file kept in the database by `traces.storage.DatabaseStorage` (ARCANA_STORAGE=database), so
    web nodes and workers on different machines read the same uploads."""

    name = models.CharField(max_length=300, unique=True)
    size = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes)"


class StoredFileChunk(models.Model):
    """One chunk (`traces.storage.CHUNK_BYTES`) of a `StoredFile`, in order of `index`."""

    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["file", "index"], name="storedfilechunk_file_index_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.file_id}#{self.index}"


class WorkerHeartbeat(models.Model):
    """A Celery worker that is alive: written by the worker itself every `traces.workers.BEAT_SECONDS`,
    read by /healthz to report the workers seen per queue (on any machine: they share the database)."""

    hostname = models.CharField(max_length=300, unique=True)  # celery's node name, e.g. arcana-12@web1
    queues = models.JSONField(default=list)
    pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.hostname} {self.queues}"
