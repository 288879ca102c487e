"""Starting checks of a run's lost instructions (members, `Action.SCORE`) and doing one on a worker.

`check_request` reads what to check (`model` as `provider/model`, the `agent`, optionally the
`instructions` by key); `do_check_lost_instructions` queues one `InstructionCheck` per instruction
and sends `traces.tasks.check_lost_instructions` once the transaction commits;
`do_check_lost_instruction` is the task's side: ask the model, write its verdict or the error.
A check whose answer arrives twice (a redelivered task) writes once: only a `queued` row is written;
`sweep_checks` (a beat task) sends again the checks whose task was lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from runtime.errors import ProviderError
from traces.conversations.providers import SCRIPTED, available_providers
from traces.instructions import checking
from traces.instructions.lost import Lost, answer_after, lost_instructions
from traces.models import InstructionCheck, Run
from traces.teams import audit

log = logging.getLogger(__name__)

MAX_CHECKS = 100  # lost instructions checked by one request
TASK = "traces.tasks.check_lost_instructions"


class CheckError(ValueError):
    """A request to check that cannot be done: `field` and a message for the one error shape."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def models_offered() -> dict[str, list[str]]:
    """Provider → models a check may use: `scripted`'s checkers, then ARCANA_PROVIDERS'."""
    out = {SCRIPTED: list(checking.SCRIPTED_MODELS)}
    for p in available_providers():
        if p["name"] != SCRIPTED:
            out[p["name"]] = list(p["models"])
    return out


@dataclass
class CheckRequest:
    provider: str
    model: str
    agent: str
    keys: list[str] | None  # None: every lost instruction of the agent


def _text(data: Any, name: str, limit: int) -> str:
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CheckError(name, "a string")
    if len(value) > limit or "\x00" in value:
        raise CheckError(name, f"at most {limit} characters, no NUL")
    return value.strip()


def check_request(data: Any) -> CheckRequest:
    """What to check, from a form or a JSON body: `model` (`provider/model`, one of
    `models_offered()`), `agent` (default the plain chat's ""), `instructions` (keys; default all)."""
    if not isinstance(data, dict) and not hasattr(data, "get"):
        raise CheckError("body", 'a JSON object {"model": "provider/model", ...}')
    provider, _, model = _text(data, "model", 300).partition("/")
    if not provider or model not in models_offered().get(provider, []):
        offered = ", ".join(f"{p}/{m}" for p, ms in models_offered().items() for m in ms)
        raise CheckError("model", f"choose one of the offered provider/model pairs: {offered}")
    agent = _text(data, "agent", 200)
    keys = data.get("instructions")
    if keys is not None:
        if not isinstance(keys, list) or not all(isinstance(k, str) and len(k) <= 64 for k in keys):
            raise CheckError("instructions", "a list of lost instructions' keys")
        if not keys or len(keys) > MAX_CHECKS:
            raise CheckError("instructions", f"1 to {MAX_CHECKS} keys")
    return CheckRequest(provider, model, agent, keys)


def _chosen(run: Run, req: CheckRequest) -> list[Lost]:
    lost = lost_instructions(run, req.agent)
    if not lost:
        raise CheckError("run", "this run lost no instruction (for this agent): nothing to check")
    if req.keys is None:
        return lost[:MAX_CHECKS]
    by_key = {i.key: i for i in lost}
    if unknown := [k for k in req.keys if k not in by_key]:
        raise CheckError("instructions", f"not a lost instruction of this run: {', '.join(unknown[:5])}")
    return [by_key[k] for k in dict.fromkeys(req.keys)]


def enqueue(check_ids: list[int]) -> None:
    """Send the checks to the agents queue once the transaction commits."""
    queue_name = str(settings.ARCANA_AGENTS_QUEUE)
    transaction.on_commit(
        lambda: current_app.send_task(TASK, (check_ids,), queue=queue_name, ignore_result=True)
    )


def do_check_lost_instructions(run: Run, actor: Any, req: CheckRequest) -> list[InstructionCheck]:
    """Queue a check of each chosen lost instruction against the agent's last answer after its loss
    (a check with no such answer fails at once, saying so). Returns the new rows."""
    chosen = _chosen(run, req)
    user, _ = audit.actor_fields(actor)  # an API key's checks have no person behind them
    now = timezone.now()
    rows: list[InstructionCheck] = []
    with transaction.atomic():
        for lost in chosen:
            step = answer_after(run, req.agent, lost.turn, lost.step)
            row = InstructionCheck(
                project_id=run.project_id,
                run_id=run.run_id,
                agent=req.agent,
                instruction_key=lost.key,
                instruction=lost.text,
                source=lost.source,
                lost_turn=lost.turn,
                lost_step=lost.step,
                provider=req.provider,
                model=req.model,
                requested_by=user,
                created_at=now,
                sent_at=now,
            )
            if step is None:
                row.status = InstructionCheck.Status.FAILED
                row.error = f"no answer at or after turn {lost.turn} · step {lost.step} to check"
                row.finished_at = now
            else:
                row.answer_turn, row.answer_step = step.turn_number, step.number
                row.answer = step.assistant_text or ""
            rows.append(row)
        InstructionCheck.objects.bulk_create(rows)
        queued = [r.pk for r in rows if r.status == InstructionCheck.Status.QUEUED]
        if queued:
            enqueue(queued)
    return rows


def do_check_lost_instruction(check_id: int) -> str:
    """Ask the check's model and write its verdict, or its error (a provider failure, an answer that
    is no verdict). Returns the status written, or "skipped" for a row no longer queued."""
    check = InstructionCheck.objects.filter(pk=check_id, status=InstructionCheck.Status.QUEUED).first()
    if check is None:
        return "skipped"
    fields: dict[str, Any] = {"finished_at": timezone.now()}
    call: checking.Call | None = None
    try:
        call = checking.call_model(check.provider, check.model, check.instruction, check.source, check.answer)
        fields["tokens"] = call.tokens
        verdict, reasoning = checking.parse_answer(call.text)
    except checking.CheckAnswerError as e:
        said = f" — the model said: {checking.quoted(call.text)}" if call is not None and call.text else ""
        fields.update(status=InstructionCheck.Status.FAILED, error=f"{e}{said}")
    except ProviderError as e:
        fields.update(status=InstructionCheck.Status.FAILED, error=f"the provider failed: {e}"[:2000])
    except Exception as e:  # ours, not the model's: logged, and the row says so rather than stay queued
        log.exception("instruction check %s failed", check_id)
        fields.update(status=InstructionCheck.Status.FAILED, error=f"the check failed ({type(e).__name__})")
    else:
        fields.update(status=InstructionCheck.Status.DONE, verdict=verdict, reasoning=reasoning)
    written = InstructionCheck.objects.filter(pk=check_id, status=InstructionCheck.Status.QUEUED).update(
        **fields
    )
    return str(fields["status"]) if written else "skipped"


def run_checks(check_ids: list[int]) -> dict[str, int]:
    """The task's side: each check in turn (`do_check_lost_instruction`). Before each, the checks not
    done yet are marked as just sent, so the sweeper leaves a long task's later checks alone."""
    done: dict[str, int] = {}
    ids = [int(i) for i in check_ids]
    for n, check_id in enumerate(ids):
        InstructionCheck.objects.filter(pk__in=ids[n:], status=InstructionCheck.Status.QUEUED).update(
            sent_at=timezone.now()
        )
        status = do_check_lost_instruction(check_id)
        done[status] = done.get(status, 0) + 1
    return done


def sweep_checks() -> dict[str, int]:
    """Send again the checks still queued 5 leases after their task was sent (the broker lost it, or
    no worker took it); after `ARCANA_CONVERSATION_MAX_ATTEMPTS` sends, fail them saying so. A check
    a worker is still doing when it is sent again is written once (only a queued row is written)."""
    now = timezone.now()
    stale = now - timedelta(seconds=5 * int(settings.ARCANA_CONVERSATION_LEASE_SECONDS))
    queued = InstructionCheck.objects.filter(status=InstructionCheck.Status.QUEUED, sent_at__lt=stale)
    limit = int(settings.ARCANA_CONVERSATION_MAX_ATTEMPTS)
    failed = queued.filter(sends__gte=limit).update(
        status=InstructionCheck.Status.FAILED,
        error=f"no worker took this check after {limit} sends",
        finished_at=now,
    )
    ids = list(queued.filter(sends__lt=limit).values_list("pk", flat=True)[:1000])
    if ids:
        InstructionCheck.objects.filter(pk__in=ids).update(sent_at=now, sends=F("sends") + 1)
        current_app.send_task(TASK, (ids,), queue=str(settings.ARCANA_AGENTS_QUEUE), ignore_result=True)
    return {"resent": len(ids), "failed": failed}
