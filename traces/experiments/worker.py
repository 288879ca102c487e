"""The worker side of experiments: claim items one at a time, run each as a conversation, judge it.

**No item run twice, none lost.** An item is claimed by a conditional update (`pending`, or
`running` under an expired lease: its worker vanished), so two tasks never hold one item. Its run id
was fixed when the experiment was made and its `Conversation` is made once (`get_or_create` by that
run id), so a worker killed mid-item leaves a conversation the next claim continues from its saved
state and cursor (a turn cut short re-runs with the same step ids: the store keeps one copy). The
item's result, its judges' scores (idempotent by client id) and the experiment's counters commit
together, only while this worker holds the item's lease.

A thread renews the item's lease and reads the experiment's cancel flag (then the item's conversation
is cancelled: it stops after its current step). A provider error fails the conversation, hence the
item, never the experiment. The experiment's token cap stops new items (they are skipped).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from django import db
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from runtime import ProviderError
from traces.conversations import cancel_conversation, run_pending_turns, worker_name
from traces.core import workers
from traces.dashboard.prices import run_cost
from traces.experiments import service
from traces.models import (
    ContextDecision,
    Conversation,
    Experiment,
    ExperimentItem,
    Judge,
    PrimitiveEvent,
    Run,
    Score,
    Step,
)
from traces.scores import actions as score_actions
from traces.scores import judging
from traces.scores.targets import Address

log = logging.getLogger(__name__)
State = ExperimentItem.State


def _lease_seconds() -> int:
    return int(settings.ARCANA_CONVERSATION_LEASE_SECONDS)


def claim_next(experiment_id: int, owner: str) -> ExperimentItem | None:
    """The next item to run, claimed for `owner`: pending, or running under an expired lease."""
    now = timezone.now()
    claimable = Q(state=State.PENDING) | Q(state=State.RUNNING, lease_expires_at__lt=now)
    for pk in ExperimentItem.objects.filter(claimable, experiment_id=experiment_id).values_list(
        "pk", flat=True
    )[:20]:
        took = ExperimentItem.objects.filter(claimable, pk=pk).update(
            state=State.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=_lease_seconds()),
            attempts=F("attempts") + 1,
            started_at=now,
        )
        if took:
            return ExperimentItem.objects.select_related("experiment", "item", "conversation").get(pk=pk)
    return None


class _Lease(threading.Thread):
    """Renews the item's lease every third of it; cancels its conversation when the experiment is
    cancelled (own DB connection)."""

    def __init__(self, item: ExperimentItem, owner: str) -> None:
        super().__init__(name=f"arcana-experiment-item-{item.pk}", daemon=True)
        self.item_pk, self.experiment_pk, self.owner = item.pk, item.experiment_id, owner
        self.lost, self._halt = threading.Event(), threading.Event()

    def run(self) -> None:
        waited = 0.0
        cancelled = False
        try:
            while not self._halt.wait(1.0):
                waited += 1.0
                if waited >= max(1.0, _lease_seconds() / 3):
                    waited = 0.0
                    expires = timezone.now() + timedelta(seconds=_lease_seconds())
                    mine = ExperimentItem.objects.filter(
                        pk=self.item_pk, lease_owner=self.owner, state=State.RUNNING
                    )
                    if mine.update(lease_expires_at=expires) != 1:
                        self.lost.set()
                if (
                    not cancelled
                    and Experiment.objects.filter(pk=self.experiment_pk, cancel_requested=True).exists()
                ):
                    cancelled = True
                    conv = ExperimentItem.objects.get(pk=self.item_pk).conversation
                    if conv is not None:
                        cancel_conversation(conv)
        except Exception:
            log.exception("lease renewal of experiment item %s failed", self.item_pk)
        finally:
            db.connection.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def run_experiment(experiment_id: int) -> dict[str, Any]:
    """The body of `traces.tasks.run_experiment`: claim and run items until none is left."""
    owner = worker_name()
    now = timezone.now()
    Experiment.objects.filter(pk=experiment_id, status=Experiment.Status.QUEUED).update(
        status=Experiment.Status.RUNNING, started_at=now, updated_at=now
    )
    ran = 0
    while True:
        exp = Experiment.objects.filter(pk=experiment_id).first()
        if exp is None or exp.is_finished:
            break
        if exp.cancel_requested:
            service.skip_pending(exp.pk, "cancelled before it started")
        elif exp.tokens_used >= exp.max_tokens:
            service.skip_pending(exp.pk, f"token cap reached ({exp.max_tokens:,} tokens)")
            Experiment.objects.filter(pk=exp.pk, reason="").update(
                reason=f"token cap reached ({exp.max_tokens:,} tokens)"
            )
        if workers.stopping():
            service.enqueue(exp.pk)  # hand the rest to the next worker
            break
        item = claim_next(exp.pk, owner)
        if item is None:
            break
        Experiment.objects.filter(pk=exp.pk).update(updated_at=timezone.now())
        if exp.cancel_requested:  # an item a vanished worker held: not run again, its conversation stopped
            if item.conversation is not None and not item.conversation.is_finished:
                cancel_conversation(item.conversation)
            record_item(item, owner, State.SKIPPED, "cancelled by a user", "", {}, {}, {})
            continue
        run_item(item, owner)
        ran += 1
    service.finish_if_done(experiment_id)
    return {"experiment": experiment_id, "items": ran}


def run_item(it: ExperimentItem, owner: str) -> None:
    lease = _Lease(it, owner)
    lease.start()
    try:
        problem = service.check_script_limits(it)
        if problem:
            record_item(it, owner, State.FAILED, problem, "", {}, {}, {})
            return
        conv = _converse(service.item_conversation(it), lease)
        if conv is None:
            return  # the lease was lost: another worker has the item now
        run = Run.objects.filter(project_id=conv.project_id, run_id=conv.run_id).first()
        stats, output = _stats(run, conv)
        if conv.status == Conversation.Status.COMPLETED:
            state, error = State.DONE, ""
        elif conv.status == Conversation.Status.CANCELLED:
            state, error = State.SKIPPED, conv.reason or "cancelled"
        else:
            state, error = State.FAILED, conv.reason or "the conversation failed"
        scores, judge_errors = _judge(it, run) if run is not None and state == State.DONE else ({}, {})
        record_item(it, owner, state, error, output, stats, scores, judge_errors)
    except Exception as exc:
        log.exception("experiment item %s failed", it.pk)
        record_item(it, owner, State.FAILED, f"{type(exc).__name__}: {exc}", "", {}, {}, {})
    finally:
        lease.stop()


def _converse(conv: Conversation, lease: _Lease) -> Conversation | None:
    """Run the conversation here (the conversations' own claim and lease), or wait for the worker
    that runs it (the conversations' sweeper may have given it to one); its finished row."""
    while not lease.lost.is_set():
        conv.refresh_from_db()
        if conv.is_finished:
            return conv
        if conv.status == Conversation.Status.QUEUED or conv.lease_expired:
            run_pending_turns(conv.pk)
            continue
        time.sleep(0.5)
    return None


def _stats(run: Run | None, conv: Conversation) -> tuple[dict[str, Any], str]:
    """What the item's run did, and its last answer."""
    if run is None:
        return {"tokens": conv.tokens_used}, ""
    decisions = ContextDecision.objects.filter(step__run=run)
    compactions = decisions.filter(Q(compressed_count__gt=0) | Q(dropped_count__gt=0)).count()
    cost = run_cost(run)
    done = Counter(
        PrimitiveEvent.objects.filter(run=run, ok=True).values_list("primitive", flat=True)
    )  # calls that did what they asked (a refused pin is no pin)
    last = (
        Step.objects.filter(run=run).exclude(assistant_text=None).order_by("-turn_number", "-number").first()
    )
    return {
        "tokens": int(run.tokens),
        "prompt_tokens": int(run.prompt_tokens),
        "completion_tokens": int(run.completion_tokens),
        "cost": round(cost.cost, 6) if cost.priced_tokens else None,
        "compactions": compactions,
        "recalls": done.get("recall", 0),
        "pins": done.get("pin", 0),
        "primitive_calls": int(run.primitives),
        "steps": int(run.steps),
        "turns": int(run.turns),
        "errors": int(run.errors),
    }, ((last.assistant_text or "") if last else "")[:20_000]


def _judge(it: ExperimentItem, run: Run) -> tuple[dict[str, Any], dict[str, str]]:
    """Each judge of the experiment scores the item's run (one score per judge and item: its client
    id is fixed, so a repeat after a lost worker writes nothing twice)."""
    scores: dict[str, Any] = {}
    errors: dict[str, str] = {}
    judges = Judge.objects.filter(experiments=it.experiment_id).select_related("config")
    for judge in judges:
        config = judge.config
        client_id = f"experiment:{it.experiment_id}:{it.position}:{judge.pk}"
        known = Score.objects.filter(project_id=run.project_id, client_id=client_id).first()
        if known is not None:
            scores[config.name] = known.value if known.label == "" else known.label
            continue
        values = judging.variables(run)
        try:
            call = judging.call_model(
                judge.provider, judge.model, config, judging.render(judge.prompt, values), values
            )
            value, label, reasoning = judging.parse_answer(config, call.text)
        except (ProviderError, judging.JudgeAnswerError) as exc:
            errors[judge.name] = str(exc)[:500]
            continue
        item = score_actions.ScoreInput(
            config=config,
            address=Address(run_id=run.run_id),
            value=value,
            label=label,
            client_id=client_id,
            judge={
                "judge_name": judge.name,
                "judge_model": f"{judge.provider}/{judge.model}",
                "reasoning": reasoning,
                "tokens": call.tokens,
            },
        )
        result = score_actions.do_write_scores(run.project, f"judge {judge.name}", [item], Score.Source.JUDGE)
        outcome = result.results[0]
        if outcome.error is not None:
            errors[judge.name] = outcome.error.message
        else:
            scores[config.name] = value if label == "" else label
    return scores, errors


def record_item(
    it: ExperimentItem,
    owner: str,
    state: str,
    error: str,
    output: str,
    stats: dict[str, Any],
    scores: dict[str, Any],
    judge_errors: dict[str, str],
) -> bool:
    """The item's result and the experiment's counters in one transaction, while the lease is ours."""
    now = timezone.now()
    with transaction.atomic():
        done = ExperimentItem.objects.filter(pk=it.pk, lease_owner=owner, state=State.RUNNING).update(
            state=state,
            error=error[:2000],
            output=output,
            stats=stats,
            scores=scores,
            judge_errors=judge_errors,
            lease_owner="",
            lease_expires_at=None,
            finished_at=now,
        )
        if not done:
            return False
        Experiment.objects.filter(pk=it.experiment_id).update(
            items_done=F("items_done") + 1,
            items_failed=F("items_failed") + (1 if state == State.FAILED else 0),
            tokens_used=F("tokens_used") + int(stats.get("tokens") or 0),
            updated_at=now,
        )
    return True


def judge_tokens(experiment: Experiment) -> int:
    """The judges' tokens spent on the experiment's items."""
    prefix = f"experiment:{experiment.pk}:"
    total = Score.objects.filter(project_id=experiment.project_id, client_id__startswith=prefix).aggregate(
        t=Sum("tokens")
    )["t"]
    return int(total or 0)
