"""`Conversation`: a conversation our Celery workers run (a script or a playground; a chat or a pool).

Import it from `traces.models`, like every model.

A conversation names its run by `(project, run_id)` (DESIGN.md §9). The run row itself is a projection
that `traces.ingest` creates from the conversation's events; `Conversation.run` looks it up, and
`Run.conversation` goes the other way. The service functions that create and drive conversations are
in `traces/conversations/` (its `__init__` docstring is the interface); the worker task is
`traces.tasks.run_conversation`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from .runs import Run, run_page_url
from .teams import Project


class Conversation(models.Model):
    """One conversation run by our workers, with its lifecycle, its saved session state and its lease.

    Lifecycle (`status`): `queued` → `running` → (`waiting_for_user` ⇄ `queued` → `running`, playground)
    → `completed` / `failed` / `cancelled`. `reason` says why it failed, was cancelled or stopped at an
    operator limit ("turn limit reached (20)", "provider error: …").

    Work is claimed with a lease: the task that runs a turn sets `lease_owner` / `lease_expires_at`
    and renews them while it works; a row `running` with an expired lease lost its worker, and the
    sweeper (`traces.conversations.sweep_conversations`) queues it again (or fails it after
    `ARCANA_CONVERSATION_MAX_ATTEMPTS`). `state` is the runtime session's `export_state()` after the
    last completed turn (nothing else is needed to continue: no trace file, no local folder).
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING_FOR_USER = "waiting_for_user"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Mode(models.TextChoices):
        SCRIPT = "script"  # a list of user messages, run to completion unattended
        PLAYGROUND = "playground"  # the user types; one task per turn

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="conversations")
    run_id = models.CharField(max_length=200)
    mode = models.CharField(max_length=12, choices=Mode.choices)
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    # What the runtime is built with: system, cognitive_primitives, context_window, pin_budget_fraction,
    # prompt_snapshots, agents ([{name, system, cognitive_primitives}] or None for a plain chat).
    config = models.JSONField(default=dict)
    # Script mode: [{"agent": str | None, "content": str}]; playground: the messages sent so far.
    script = models.JSONField(default=list)
    # Messages handled so far (script entries done, or playground turns done): the cursor.
    cursor = models.PositiveIntegerField(default=0)
    # What each turn produced: [{"index", "agent", "turn", "user", "assistant", "outcome", "steps"}].
    transcript = models.JSONField(default=list)
    state = models.JSONField(null=True, blank=True)  # the session's export_state() after `cursor` turns
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    tokens_used = models.PositiveBigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)  # task starts of the current unit of work
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)  # the first turn started
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "run_id"], name="conversation_project_run_uniq")
        ]
        indexes = [
            # The concurrency limit (active conversations of a project) and the sweeper (running rows).
            models.Index(fields=["status", "project"], name="conversation_status_idx"),
        ]

    def __str__(self) -> str:
        return f"conversation {self.pk} ({self.status})"

    def get_absolute_url(self) -> str:
        """The run page of this conversation (before its first event: "Waiting for the first event…")."""
        return run_page_url(self.project_id, self.run_id)

    def page_url(self) -> str:
        """The conversation's own page (lifecycle, transcript, playground input): it exists from the
        moment the row does, unlike the run page, which needs the first event."""
        from django.urls import reverse

        return reverse(
            "traces:conversation", kwargs={"project_id": self.project_id, "conversation_id": self.pk}
        )

    # -- reading ---------------------------------------------------------------------------------
    @property
    def run(self) -> Run | None:
        """The run projected from this conversation's events (None until its first event is stored)."""
        cached = self.__dict__.get("_run")
        if cached is None:
            cached = Run.objects.filter(project_id=self.project_id, run_id=self.run_id).first()
            self.__dict__["_run"] = cached
        return cached

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def is_active(self) -> bool:
        """Queued or running: a worker owns it or will."""
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def is_waiting(self) -> bool:
        return self.status == self.Status.WAITING_FOR_USER

    @property
    def is_pool(self) -> bool:
        return bool(self.config.get("agents"))

    @property
    def agent_names(self) -> list[str]:
        return [a["name"] for a in self.config.get("agents") or []]

    @property
    def accepts_messages(self) -> bool:
        """A playground waiting for the user (a message now starts a turn; else 409)."""
        return self.mode == self.Mode.PLAYGROUND and self.status == self.Status.WAITING_FOR_USER

    @property
    def lease_expired(self) -> bool:
        return self.lease_expires_at is not None and self.lease_expires_at < timezone.now()

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        end: datetime = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        """The API's view of a conversation (`GET /api/v1/conversations/<id>`)."""
        return {
            "id": self.pk,
            "project": self.project_id,
            "run_id": self.run_id,
            "url": self.page_url(),
            "run_url": self.get_absolute_url(),
            "mode": self.mode,
            "status": self.status,
            "reason": self.reason,
            "provider": self.provider,
            "model": self.model,
            "system": self.config.get("system"),
            "cognitive_primitives": self.config.get("cognitive_primitives"),
            "context_window": self.config.get("context_window"),
            "pin_budget_fraction": self.config.get("pin_budget_fraction"),
            "prompt_snapshots": self.config.get("prompt_snapshots"),
            "agents": self.config.get("agents"),
            "script": self.script if self.mode == self.Mode.SCRIPT else None,
            "turns_done": self.cursor,
            "transcript": self.transcript,
            "pins": self.active_pins(),
            "tokens_used": self.tokens_used,
            "cancel_requested": self.cancel_requested,
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "updated_at": _iso(self.updated_at),
            "finished_at": _iso(self.finished_at),
        }

    def active_pins(self) -> list[dict[str, Any]]:
        """The pins in force after the last completed turn, from the saved session state (per agent
        for a pool): `[{"agent", "pin_id", "label", "content", "tokens", "created_turn", "until_turn"}]`."""
        state = self.state or {}
        sessions = (
            list((state.get("agents") or {}).items())
            if "agents" in state
            else [(None, state)]
            if state
            else []
        )
        out: list[dict[str, Any]] = []
        for agent, s in sessions:
            turn = int(s.get("turn") or 0)
            for p in s.get("pins") or []:
                if p.get("unpinned_turn") is not None:
                    continue
                until = p.get("until_turn")
                if until is not None and until < turn + 1:
                    continue
                out.append(
                    {
                        "agent": agent,
                        "pin_id": p.get("pin_id"),
                        "label": p.get("label"),
                        "content": p.get("content"),
                        "tokens": p.get("tokens"),
                        "created_turn": p.get("created_turn"),
                        "until_turn": until,
                    }
                )
        return out


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
