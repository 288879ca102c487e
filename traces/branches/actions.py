"""Checking and starting a re-run of one step (`check_*` / `do_*`): the step's context read back from
the run's stored events (`runtime.rerun.step_context`), the edits and the provider checked, the
`Branch` row created and its task sent by name once the transaction commits."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from runtime.errors import TraceFormatError
from runtime.rerun import Edit, RerunEditError, StepContext, parse_edits, step_context
from traces.conversations.providers import SCRIPTED, server_providers
from traces.core import sqlread
from traces.models import Branch, Event, Project, Run

#: The task's name on the wire (`traces/tasks.py`).
TASK = "traces.tasks.rerun_step"


class RerunInputError(Exception):
    """Bad input for a re-run: `detail` is the API's error detail list (`field`, `message`)."""

    def __init__(self, detail: list[dict[str, Any]], status: int = 400) -> None:
        super().__init__("; ".join(d["message"] for d in detail))
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class RerunRequest:
    """A checked re-run: the step's context, the edits, the provider and model to run it with."""

    context: StepContext
    edits: list[Edit]
    provider: str
    model: str


def run_events(run: Run) -> list[dict[str, Any]]:
    """The run's stored events in the order they were stored."""
    rows = Event.objects.filter(project_id=run.project_id, run_id=run.run_id).order_by("id")
    return [json.loads(raw) for raw in rows.values_list("raw", flat=True).iterator(chunk_size=2000)]


def step_context_of(run: Run, turn: int, step: int, agent: str | None = None) -> StepContext:
    """What step `step` of turn `turn` received (`runtime.rerun.step_context` over the stored events).
    `RerunInputError` (404) when the run has no such step, (400) when it recorded no messages."""
    try:
        return step_context(run_events(run), turn=turn, step=step, agent=agent or None)
    except TraceFormatError as exc:
        status = 404 if "no step" in exc.reason or "no events" in exc.reason else 400
        raise RerunInputError([{"field": exc.field or "step", "message": exc.reason}], status) from None


def provider_models(name: str) -> list[str] | None:
    """The models provider `name` may run (empty for `scripted`: any), or None for no such provider."""
    if name == SCRIPTED:
        return []
    sp = server_providers().get(name)
    return list(sp.models) if sp is not None else None


def check_rerun(
    run: Run, turn: int, step: int, *, agent: str | None, edits: Any, provider: Any, model: Any
) -> RerunRequest:
    """A re-run of step (`turn`, `step`) of `run` with `edits` on `provider` / `model` (default: the
    original's provider when it is configured, else `scripted`; the original's model), or
    `RerunInputError` naming what is wrong."""
    context = step_context_of(run, turn, step, agent)
    try:
        parsed = parse_edits(edits if edits is not None else [], context)
    except RerunEditError as exc:
        raise RerunInputError([{"field": exc.field or "edits", "message": exc.reason}]) from None
    if provider in (None, ""):
        provider = SCRIPTED
    if not isinstance(provider, str) or (allowed := provider_models(provider)) is None:
        names = ", ".join([SCRIPTED, *server_providers()])
        raise RerunInputError(
            [{"field": "provider", "message": f"unknown provider {provider!r} (one of: {names})"}]
        )
    if model in (None, ""):
        model = context.model if (not allowed or context.model in allowed) else allowed[0]
        model = model or "scripted-rerun"
    if not isinstance(model, str) or len(model) > 200 or (allowed and model not in allowed):
        raise RerunInputError(
            [
                {
                    "field": "model",
                    "message": f"provider {provider!r} has no model {model!r}: {', '.join(allowed or [])}",
                }
            ]
        )
    return RerunRequest(context, parsed, provider, model)


def do_rerun_step(run: Run, request: RerunRequest, *, user: Any = None) -> Branch:
    """Create the `Branch` (`queued`, with the id of the run it will write) and send its task to
    `ARCANA_AGENTS_QUEUE` once the transaction commits. `RerunInputError` (429) when the project
    already has `ARCANA_MAX_CONCURRENT_CONVERSATIONS` re-runs queued or running (the project row is
    locked for the check, so two requests cannot both pass it)."""
    ctx = request.context
    limit = int(settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=run.project_id).first()
        active = Branch.objects.filter(
            project_id=run.project_id, status__in=[Branch.Status.QUEUED, Branch.Status.RUNNING]
        ).count()
        if active >= limit:
            message = (
                f"this project already runs {limit} re-runs (ARCANA_MAX_CONCURRENT_CONVERSATIONS); "
                "wait for one to finish"
            )
            raise RerunInputError([{"field": "project", "message": message}], status=429)
        branch = Branch.objects.create(
            project_id=run.project_id,
            run=run,
            agent=ctx.agent or "",
            turn_number=ctx.turn,
            step_number=ctx.step,
            branch_run_id=str(uuid.uuid4()),
            edits=[e.to_dict() for e in request.edits],
            provider=request.provider,
            model=request.model,
            created_by=user if isinstance(user, get_user_model()) else None,
        )
        enqueue(branch.pk)
    return branch


def enqueue(branch_id: int) -> None:
    queue_name = str(settings.ARCANA_AGENTS_QUEUE)
    # By the task's name (traces/tasks.py imports this package): no import circle.
    transaction.on_commit(
        lambda: current_app.send_task(TASK, (branch_id,), queue=queue_name, ignore_result=True)
    )


#: The most branches a run or turn page lists.
LISTED = 50


_LINKS_WHERE = (
    'WHERE ("traces_branch"."run_id" = %s OR ("traces_branch"."project_id" = %s'
    ' AND "traces_branch"."branch_run_id" = %s))'
    ' ORDER BY "traces_branch"."created_at" DESC, "traces_branch"."id" DESC LIMIT %s'
)


def branch_links(run: Run) -> list[Branch]:
    """In one query: the branches made from `run` (newest first, at most `LISTED`) and the branch
    that wrote `run`, when it is a branch run (its original run loaded)."""
    # SQL written once (`traces.core.sqlread`): a run and turn page ask it on every view.
    rows = sqlread.fetch(Branch, _LINKS_WHERE, [run.pk, run.project_id, run.run_id, LISTED + 1])
    for b in rows:
        if b.run_id == run.pk:
            b.run = run  # the branches made from `run`; the branch that wrote it loads its own
    return rows
