"""Judges on the web side: making a judge, starting a judge run over a runs filter (a backfill, capped
in runs and tokens), cancelling it and running it again — each audited; the worker side is
`traces/scores/worker.py`. Admins manage judges (`Action.MANAGE_SCORES`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.http import QueryDict
from django.utils import timezone

from traces.conversations.providers import SCRIPTED, available_providers
from traces.models import AuditLog, Judge, JudgeResult, JudgeRun, Project, Run, ScoreConfig
from traces.scores import judging, queues
from traces.scores.targets import ScoreError, text_field
from traces.teams import audit

MAX_RUNS = 10_000
MAX_TOKENS = 100_000_000


def models_offered() -> dict[str, list[str]]:
    """Provider → models a judge may use: `scripted`'s judge models, then ARCANA_PROVIDERS'."""
    out = {SCRIPTED: list(judging.SCRIPTED_MODELS)}
    for p in available_providers():
        if p["name"] != SCRIPTED:
            out[p["name"]] = list(p["models"])
    return out


def check_judge(project: Project, data: Any, judge: Judge | None = None) -> dict[str, Any]:
    """A new judge's fields (or `judge`'s after a change): `name`, `model` as `provider/model`,
    `prompt`, `config` (an id)."""
    name = text_field(data, "name", 100).strip()
    if not name:
        raise ScoreError("name", "give the judge a name")
    others = Judge.objects.filter(project=project, name=name)
    if (others.exclude(pk=judge.pk) if judge is not None else others).exists():
        raise ScoreError("name", "this project already has a judge of that name")
    provider, _, model = text_field(data, "model", 300).partition("/")
    if model not in models_offered().get(provider, []):
        raise ScoreError("model", "choose one of the offered provider/model pairs")
    prompt = text_field(data, "prompt", 20_000)
    judging.check_prompt(prompt)
    config_id = str(data.get("config") or "")
    config = ScoreConfig.objects.filter(
        project=project, archived=False, pk=int(config_id) if config_id.isdigit() else 0
    ).first()
    if config is None:
        raise ScoreError("config", "choose the score config the judge's answer fills")
    return {"name": name, "provider": provider, "model": model, "prompt": prompt, "config": config}


def do_create_judge(project: Project, actor: Any, fields: dict[str, Any]) -> Judge:
    user, _ = audit.actor_fields(actor)
    with transaction.atomic():
        judge = Judge.objects.create(project=project, created_by=user, **fields)
        audit.record(
            project.team,
            actor,
            AuditLog.JUDGE_CREATED,
            judge,
            {"model": f"{judge.provider}/{judge.model}", "config": judge.config.name},
        )
    return judge


def check_judge_change(judge: Judge, data: Any) -> dict[str, Any]:
    """A judge's fields after a change: the fields `data` gives over the judge's own. A running judge
    run keeps the prompt and model it started with."""
    merged: dict[str, Any] = {
        "name": judge.name,
        "model": f"{judge.provider}/{judge.model}",
        "prompt": judge.prompt,
        "config": str(judge.config_id),
    }
    merged.update({k: data[k] for k in merged if k in data})
    return check_judge(judge.project, merged, judge)


def do_change_judge(judge: Judge, actor: Any, fields: dict[str, Any]) -> Judge:
    """Apply `check_judge_change`'s fields; audited with the old and new values of what changed."""
    old = {k: getattr(judge, k) for k in fields}
    changed = [k for k in fields if old[k] != fields[k]]
    if not changed:
        return judge
    shown = {"config": lambda c: c.name}
    with transaction.atomic():
        for k in changed:
            setattr(judge, k, fields[k])
        judge.save(update_fields=changed)
        audit.record(
            judge.project.team,
            actor,
            AuditLog.JUDGE_CHANGED,
            judge,
            {
                audit.OLD: {k: shown.get(k, str)(old[k]) for k in changed},
                audit.NEW: {k: shown.get(k, str)(fields[k]) for k in changed},
            },
        )
    return judge


def do_delete_judge(judge: Judge, actor: Any) -> bool:
    """Delete a judge and its finished judge runs; the scores it gave stay (with its name and model).
    False, and nothing deleted, while one of its runs is queued or running (cancel it first)."""
    with transaction.atomic():
        busy = JudgeRun.objects.filter(judge=judge).exclude(status__in=JudgeRun.FINISHED)
        if busy.select_for_update().exists():
            return False
        audit.record(
            judge.project.team,
            actor,
            AuditLog.JUDGE_DELETED,
            judge,
            {"name": judge.name, "model": f"{judge.provider}/{judge.model}", "config": judge.config.name},
        )
        judge.delete()
    return True


def check_run(data: Any) -> dict[str, Any]:
    """A judge run's `filter` (a runs list query string, `days=N` too), `max_runs`, `max_tokens`."""
    raw = text_field(data, "filter", 2000).strip().lstrip("?")
    out: dict[str, Any] = {"filter": queues.check_filter(QueryDict(raw))}
    for field, default, top in (("max_runs", 100, MAX_RUNS), ("max_tokens", 200_000, MAX_TOKENS)):
        raw_value = data.get(field)
        try:
            value = int(raw_value) if raw_value not in (None, "") else default
        except (TypeError, ValueError):
            raise ScoreError(field, "a whole number") from None
        if not 1 <= value <= top:
            raise ScoreError(field, f"1 to {top:,}")
        out[field] = value
    return out


def enqueue(judge_run_id: int) -> None:
    """Send `run_judge(judge_run_id)` to the agents queue once the transaction commits."""
    queue_name = str(settings.ARCANA_AGENTS_QUEUE)
    transaction.on_commit(
        lambda: current_app.send_task(
            "traces.tasks.run_judge", (judge_run_id,), queue=queue_name, ignore_result=True
        )
    )


def do_start_run(judge: Judge, actor: Any, fields: dict[str, Any]) -> JudgeRun:
    user, _ = audit.actor_fields(actor)
    with transaction.atomic():
        jr = JudgeRun.objects.create(
            judge=judge,
            project=judge.project,
            provider=judge.provider,
            model=judge.model,
            prompt=judge.prompt,
            created_by=user,
            **fields,
        )
        audit.record(
            judge.project.team,
            actor,
            AuditLog.JUDGE_RUN_STARTED,
            jr,
            {"judge": judge.name, "filter": jr.filter, "max_runs": jr.max_runs, "max_tokens": jr.max_tokens},
        )
        enqueue(jr.pk)
    return jr


def do_rerun(jr: JudgeRun, actor: Any) -> JudgeRun:
    """The same judge over the same filter and caps again, as a new judge run (its own scores)."""
    return do_start_run(
        jr.judge, actor, {"filter": jr.filter, "max_runs": jr.max_runs, "max_tokens": jr.max_tokens}
    )


def do_cancel(jr: JudgeRun, actor: Any) -> bool:
    """Cancel a judge run: a queued one at once, a running one at its next run (the worker reads the
    flag). False when it had finished."""
    now = timezone.now()
    with transaction.atomic():
        queued = JudgeRun.objects.filter(pk=jr.pk, status=JudgeRun.Status.QUEUED).update(
            status=JudgeRun.Status.CANCELLED,
            reason="cancelled before it started",
            finished_at=now,
            updated_at=now,
        )
        running = JudgeRun.objects.filter(pk=jr.pk, status=JudgeRun.Status.RUNNING).update(
            cancel_requested=True, updated_at=now
        )
        if not queued and not running:
            return False
        audit.record(jr.project.team, actor, AuditLog.JUDGE_RUN_CANCELLED, jr, {"judge": jr.judge.name})
    return True


# --------------------------------------------------------------------------------------------------
# Each new finished run

AUTO_BATCH = 100  # runs in one automatic judge run
AUTO_TOKENS = 1_000_000  # its token cap


def do_set_auto(judge: Judge, actor: Any, on: bool) -> bool:
    """Turn "judge each new finished run" on (from now: older runs are a backfill's) or off; audited.
    False when it already was so."""
    with transaction.atomic():
        changed = Judge.objects.filter(pk=judge.pk, on_new_runs=not on).update(
            on_new_runs=on, watch_from=timezone.now() if on else None
        )
        if not changed:
            return False
        judge.refresh_from_db(fields=["on_new_runs", "watch_from"])
        audit.record(
            judge.project.team,
            actor,
            AuditLog.JUDGE_CHANGED,
            judge,
            {audit.OLD: {"on_new_runs": not on}, audit.NEW: {"on_new_runs": on}},
        )
    return True


def new_finished_runs(judge: Judge) -> list[str]:
    """Runs of the judge's project that finished (completed or failed, no event for the live window)
    since `watch_from`, and that no run of this judge has judged yet; oldest first, at most a batch."""
    quiet = timezone.now() - timedelta(seconds=int(settings.ARCANA_LIVE_WINDOW_SECONDS))
    judged = JudgeResult.objects.filter(judge_run__judge=judge, run_id=OuterRef("run_id"))
    return list(
        Run.objects.filter(
            project_id=judge.project_id,
            status__in=[Run.Status.COMPLETED, Run.Status.FAILED],
            updated_at__gte=judge.watch_from,
            updated_at__lte=quiet,
        )
        .exclude(Exists(judged))
        .order_by("updated_at", "pk")
        .values_list("run_id", flat=True)[:AUTO_BATCH]
    )


def judge_new_runs() -> dict[str, int]:
    """Periodic (beat, `traces.tasks.judge_new_runs`): for each judge watching new runs and not busy
    with an automatic run already, one automatic judge run over its new finished runs."""
    started = 0
    busy = JudgeRun.objects.filter(
        judge=OuterRef("pk"), automatic=True, status__in=[JudgeRun.Status.QUEUED, JudgeRun.Status.RUNNING]
    )
    for judge in Judge.objects.filter(on_new_runs=True).exclude(Exists(busy)).select_related("project"):
        run_ids = new_finished_runs(judge)
        if not run_ids:
            continue
        with transaction.atomic():
            jr = JudgeRun.objects.create(
                judge=judge, project=judge.project, provider=judge.provider, model=judge.model,
                prompt=judge.prompt, run_ids=run_ids, automatic=True, max_runs=len(run_ids),
                max_tokens=AUTO_TOKENS, filter="",
            )  # fmt: skip
            enqueue(jr.pk)
        started += 1
    return {"started": started}
