"""The worker side of judges: claim a judge run under a lease, judge its runs one by one, the sweeper.

The rules are the conversations' (traces/conversations/worker.py, DESIGN.md §7), with their settings
(`ARCANA_CONVERSATION_LEASE_SECONDS`, `ARCANA_CONVERSATION_MAX_ATTEMPTS`): a conditional update claims
a `queued` row (or a `running` one whose lease ran out), a thread renews the lease and reads the
cancel flag, and the sweeper queues again a row whose worker vanished.

**No score lost, none written twice.** A run is judged, then its `JudgeResult` (scored or error), its
`Score` and the counters commit in ONE transaction, and only while this worker still holds the lease.
The runs still to judge are those without a result, so a worker killed mid-judge loses only the model
call in flight: the next claim judges that run again. The unique (judge run, run id) of results and
(project, client id) of scores make a second write impossible even if two workers raced.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from django import db
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime import ProviderError
from traces.conversations.worker import worker_name
from traces.core import workers
from traces.models import JudgeResult, JudgeRun, Run, Score, ScoreConfig
from traces.scores import actions, judges, judging, queues
from traces.scores.targets import Address

log = logging.getLogger(__name__)
Status = JudgeRun.Status


def _lease_seconds() -> int:
    return int(settings.ARCANA_CONVERSATION_LEASE_SECONDS)


def claim(judge_run_id: int, owner: str) -> bool:
    now = timezone.now()
    claimable = Q(status=Status.QUEUED) | Q(status=Status.RUNNING, lease_expires_at__lt=now)
    return (
        JudgeRun.objects.filter(claimable, pk=judge_run_id, cancel_requested=False).update(
            status=Status.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=_lease_seconds()),
            attempts=F("attempts") + 1,
            updated_at=now,
        )
        == 1
    )


class _Lease(threading.Thread):
    """Renews the lease every third of it and reads the cancel flag, once a second (own connection)."""

    def __init__(self, judge_run_id: int, owner: str) -> None:
        super().__init__(name=f"arcana-judge-lease-{judge_run_id}", daemon=True)
        self.pk, self.owner = judge_run_id, owner
        self.cancelled, self.lost, self._halt = threading.Event(), threading.Event(), threading.Event()

    def run(self) -> None:
        waited = 0.0
        try:
            while not self._halt.wait(1.0):
                waited += 1.0
                mine = JudgeRun.objects.filter(pk=self.pk, lease_owner=self.owner)
                if waited >= max(1.0, _lease_seconds() / 3):
                    waited = 0.0
                    if (
                        mine.update(lease_expires_at=timezone.now() + timedelta(seconds=_lease_seconds()))
                        != 1
                    ):
                        self.lost.set()
                if mine.filter(cancel_requested=True).exists():
                    self.cancelled.set()
        except Exception:
            log.exception("lease renewal of judge run %s failed", self.pk)
        finally:
            db.connection.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def _todo(jr: JudgeRun) -> list[str]:
    """The run ids this judge run covers (its runs, or its filter's oldest first; capped) that have no
    result yet."""
    if jr.run_ids:
        covered = [str(r) for r in jr.run_ids][: jr.max_runs]
    else:
        matching = queues.runs_matching(jr.project_id, jr.filter).order_by("started_at", "pk")
        covered = list(matching.values_list("run_id", flat=True)[: jr.max_runs])
    done = set(JudgeResult.objects.filter(judge_run=jr).values_list("run_id", flat=True))
    if jr.runs_total != len(covered):
        JudgeRun.objects.filter(pk=jr.pk).update(runs_total=len(covered))
    return [r for r in covered if r not in done]


def _record(
    jr: JudgeRun,
    owner: str,
    config: ScoreConfig,
    run_id: str,
    call: judging.Call | None,
    error: str,
    parsed: Any,
) -> bool:
    """The run's result (and score), the counters: one transaction, only while the lease is ours."""
    with transaction.atomic():
        held = (
            JudgeRun.objects.select_for_update()
            .filter(pk=jr.pk, lease_owner=owner, status=Status.RUNNING)
            .first()
        )
        if held is None:
            return False
        score = None
        if parsed is not None:
            value, label, reasoning = parsed
            item = actions.ScoreInput(
                config=config,
                address=Address(run_id=run_id),
                value=value,
                label=label,
                client_id=f"judge-run:{jr.pk}:{run_id}",
                judge={
                    "judge_run": jr,
                    "judge_name": jr.judge.name,
                    "judge_model": jr.model_label,
                    "reasoning": reasoning,
                    "tokens": call.tokens if call else 0,
                },
            )
            result = actions.do_write_scores(jr.project, f"judge {jr.judge.name}", [item], Score.Source.JUDGE)
            outcome = result.results[0]
            if outcome.error is not None:  # the run was deleted meanwhile
                error, parsed = f"{outcome.error.field}: {outcome.error.message}", None
            score = outcome.score
        JudgeResult.objects.create(
            judge_run=jr,
            run_id=run_id,
            status=JudgeResult.Status.SCORED if score is not None else JudgeResult.Status.ERROR,
            error=error[:2000],
            answer=((call.text or "") if call else "")[: judging.ANSWER_CHARS],
            tokens=call.tokens if call else 0,
            score=score,
        )
        JudgeRun.objects.filter(pk=jr.pk).update(
            runs_done=F("runs_done") + 1,
            scored=F("scored") + (1 if score is not None else 0),
            errors=F("errors") + (0 if score is not None else 1),
            tokens_used=F("tokens_used") + (call.tokens if call else 0),
            attempts=0,  # progress: the attempts count the lost workers of one run, as a conversation's turn
            updated_at=timezone.now(),
        )
    return True


def _judge_one(jr: JudgeRun, owner: str, config: ScoreConfig, run_id: str) -> bool:
    run = Run.objects.filter(project_id=jr.project_id, run_id=run_id).first()
    if run is None:
        return _record(jr, owner, config, run_id, None, "the run was deleted", None)
    values = judging.variables(run)
    prompt = judging.render(jr.prompt, values)
    try:
        call = judging.call_model(jr.provider, jr.model, config, prompt, values)
    except (ProviderError, judging.JudgeAnswerError) as exc:
        return _record(jr, owner, config, run_id, None, f"provider error: {exc}", None)
    try:
        parsed = judging.parse_answer(config, call.text)
    except judging.JudgeAnswerError as exc:
        return _record(jr, owner, config, run_id, call, f"unparseable answer: {exc}", None)
    return _record(jr, owner, config, run_id, call, "", parsed)


def run_judge(judge_run_id: int) -> dict[str, Any]:
    """The body of `traces.tasks.run_judge`: claim, judge every run left, finish."""
    owner = worker_name()
    if not claim(judge_run_id, owner):
        return {"judge_run": judge_run_id, "skipped": "not claimable"}
    jr = JudgeRun.objects.select_related("judge__config", "project__team").get(pk=judge_run_id)
    if jr.attempts > int(settings.ARCANA_CONVERSATION_MAX_ATTEMPTS):
        _finish(jr, owner, Status.FAILED, f"worker lost {jr.attempts - 1} times while judging")
        return {"judge_run": judge_run_id, "status": "failed"}
    if jr.started_at is None:
        JudgeRun.objects.filter(pk=jr.pk, started_at__isnull=True).update(started_at=timezone.now())
    lease = _Lease(jr.pk, owner)
    lease.start()
    status: str | None
    try:
        status, reason = _judge_all(jr, owner, lease)
    except Exception as exc:
        log.exception("judge run %s failed", judge_run_id)
        status, reason = Status.FAILED, f"{type(exc).__name__}: {exc}"
    finally:
        lease.stop()
    if status is not None:
        _finish(jr, owner, status, reason)
    return {"judge_run": judge_run_id, "status": str(status) if status else "lost lease"}


def _judge_all(jr: JudgeRun, owner: str, lease: _Lease) -> tuple[str | None, str]:
    config = jr.judge.config
    for run_id in _todo(jr):
        jr.refresh_from_db(fields=["tokens_used", "cancel_requested", "lease_owner", "status"])
        if jr.lease_owner != owner or jr.status != Status.RUNNING or lease.lost.is_set():
            return None, ""
        if jr.cancel_requested or lease.cancelled.is_set():
            return Status.CANCELLED, "cancelled by a user"
        if jr.tokens_used >= jr.max_tokens:
            return Status.COMPLETED, f"token cap reached ({jr.max_tokens:,} tokens)"
        if workers.stopping():
            _hand_back(jr, owner)
            return None, ""
        if not _judge_one(jr, owner, config, run_id):
            return None, ""
    return Status.COMPLETED, ""


def _hand_back(jr: JudgeRun, owner: str) -> None:
    if JudgeRun.objects.filter(pk=jr.pk, lease_owner=owner, status=Status.RUNNING).update(
        status=Status.QUEUED, lease_owner="", lease_expires_at=None, attempts=0, updated_at=timezone.now()
    ):
        judges.enqueue(jr.pk)


def _finish(jr: JudgeRun, owner: str, status: str, reason: str) -> None:
    now = timezone.now()
    JudgeRun.objects.filter(pk=jr.pk, lease_owner=owner).update(
        status=status,
        reason=reason[:2000],
        lease_owner="",
        lease_expires_at=None,
        finished_at=now,
        updated_at=now,
    )


def sweep_judge_runs() -> dict[str, int]:
    """Queue again the judge runs whose worker vanished (or fail them after too many attempts), and
    send again the queued ones whose message was lost (untouched for 5 leases)."""
    now = timezone.now()
    requeued = failed = resent = 0
    for jr in JudgeRun.objects.filter(status=Status.RUNNING, lease_expires_at__lt=now):
        expired = JudgeRun.objects.filter(pk=jr.pk, status=Status.RUNNING, lease_expires_at__lt=now)
        if jr.attempts >= int(settings.ARCANA_CONVERSATION_MAX_ATTEMPTS):
            failed += expired.update(
                status=Status.FAILED,
                reason=f"worker lost {jr.attempts} times while judging",
                lease_owner="",
                lease_expires_at=None,
                finished_at=now,
                updated_at=now,
            )
        elif expired.update(status=Status.QUEUED, lease_owner="", lease_expires_at=None, updated_at=now):
            requeued += 1
            judges.enqueue(jr.pk)
    stale = now - timedelta(seconds=5 * _lease_seconds())
    for pk in JudgeRun.objects.filter(status=Status.QUEUED, updated_at__lt=stale).values_list(
        "pk", flat=True
    ):
        JudgeRun.objects.filter(pk=pk).update(updated_at=now)
        judges.enqueue(pk)
        resent += 1
    return {"requeued": requeued, "failed": failed, "resent": resent}
