"""Sessions: the runs of one user session, grouped, and their turns read as one transcript.

What a session is, per source (docs/guide/dashboard.md, "Sessions"):
- **OpenTelemetry**: a run already is one session — ingestion makes one run per
  `gen_ai.conversation.id` / `session.id` (runtime.otlp) — so its session is that run;
- **arcana-agent 1.2**: it writes one run per send; the runs of one sub-agent bundle (`Run.bundle_id`,
  `runtime.facts.run_links`) are one session, a run outside any bundle is a session of its own;
- **our runtime and our conversations**: a conversation (`Conversation`, the playground or a script)
  is one run, so one session; runs of our runtime that carry a `bundle_id` group like Arcana's.

So a session's key is `bundle:<bundle_id>` when the run has one, else `run:<run_id>`, within a
project. The list reads one rollup row per session (`SessionRollup`: runs, first and last time,
turns, tokens, cost, failures; summed by `traces.dashboard.rollups` whenever one of its runs' days is
refreshed), newest activity first, a page at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import Coalesce
from django.urls import reverse

from traces.models import Project, Run, SessionRollup, Step, Turn

BUNDLE, RUN = "bundle:", "run:"
TURNS_PER_PAGE = 100


def session_key(run: Run) -> str:
    return f"{BUNDLE}{run.bundle_id}" if run.bundle_id else f"{RUN}{run.run_id}"


def session_url(project_id: int, key: str) -> str:
    return reverse("traces:session", kwargs={"project_id": project_id, "key": key})


def session_runs(project_id: int, key: str) -> QuerySet[Run]:
    """The runs of a session, in start order (none for a malformed key)."""
    runs = Run.objects.filter(project_id=project_id)
    if key.startswith(BUNDLE) and key[len(BUNDLE) :]:
        runs = runs.filter(bundle_id=key[len(BUNDLE) :])
    elif key.startswith(RUN) and key[len(RUN) :]:
        runs = runs.filter(run_id=key[len(RUN) :], bundle_id="")
    else:
        return runs.none()
    return runs.order_by("started_at", "run_id")


def sessions_of(projects: QuerySet[Project]) -> QuerySet[SessionRollup]:
    """The sessions of `projects`, newest activity first: their rollup rows (`SessionRollup`, kept by
    `traces.dashboard.rollups`), read a page at a time through the (project, last) index. The
    projects' ids are read first: behind a subquery, the planner sorted every session instead."""
    ids = list(projects.values_list("pk", flat=True))
    return SessionRollup.objects.filter(project_id__in=ids).order_by("-last", "key")


@dataclass
class SessionRow:
    project: Project
    key: str
    runs: int
    first: Any
    last: Any
    turns: int
    tokens: int
    failed: int
    running: int
    source: str
    cost_usd: float = 0.0
    unpriced_tokens: int = 0

    @property
    def label(self) -> str:
        return self.key.split(":", 1)[1]

    @property
    def kind(self) -> str:
        if self.key.startswith(BUNDLE):
            return "bundle"
        return {"otlp": "OpenTelemetry conversation", "runtime": "conversation"}.get(self.source, "run")

    @property
    def url(self) -> str:
        return session_url(self.project.pk, self.key)

    @property
    def priced(self) -> bool:
        """Whether any of its tokens had a price (else its cost is "not priced", never $0)."""
        return bool(self.cost_usd) or self.unpriced_tokens < self.tokens or not self.tokens


def rows(page: list[SessionRollup]) -> list[SessionRow]:
    projects = Project.objects.select_related("team").in_bulk({r.project_id for r in page})
    return [
        SessionRow(
            projects[r.project_id],
            r.key,
            r.runs,
            r.first,
            r.last,
            r.turns,
            r.tokens,
            r.failed,
            r.running,
            r.source,
            r.cost_usd,
            r.unpriced_tokens,
        )  # fmt: skip
        for r in page
    ]


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        parts = [str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts) if parts else None
    return None


def user_text(step: Step | None) -> str | None:
    """The user message that started a turn: the first `user` message its first step appended to the
    history (our runtime), else the last `user` message of that step's prompt snapshot; None when the
    trace kept neither."""
    if step is None:
        return None
    for msg in step.messages or []:
        if isinstance(msg, dict) and msg.get("role") == "user":
            return _text(msg.get("content"))
    snapshot = step.prompt_snapshot if isinstance(step.prompt_snapshot, dict) else {}
    users = [m for m in snapshot.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return _text(users[-1].get("content")) if users else None


@dataclass
class TranscriptTurn:
    run: Run
    turn: Turn
    user: str | None
    assistant: str | None

    @property
    def url(self) -> str:
        url = self.run.turn_url(self.turn.number)
        return url + ("?agent=" + self.turn.agent if self.turn.agent else "")


def transcript(
    runs: list[Run], offset: int = 0, limit: int = TURNS_PER_PAGE
) -> tuple[list[TranscriptTurn], int]:
    """The turns of the session's runs in time order (a page of them), with each turn's user
    message and last answer; and the total number of turns. Three queries per page."""
    by_pk = {r.pk: r for r in runs}
    turns_qs = Turn.objects.filter(run_id__in=list(by_pk)).order_by(
        Coalesce("started_at", "ended_at").asc(nulls_last=True), "run_id", "agent", "number"
    )
    total = turns_qs.count()
    page = list(turns_qs[offset : offset + limit])
    firsts = {
        s.turn_id: s
        for s in Step.objects.filter(turn__in=page, number=1).only("turn_id", "messages", "prompt_snapshot")
    }
    answers: dict[int, str | None] = {}
    for turn_id, text in (
        Step.objects.filter(turn__in=page, assistant_text__isnull=False)
        .order_by("turn_id", "number")
        .values_list("turn_id", "assistant_text")
    ):
        answers[turn_id] = text or answers.get(turn_id)
    return [
        TranscriptTurn(by_pk[t.run_id], t, user_text(firsts.get(t.pk)), answers.get(t.pk)) for t in page
    ], total
