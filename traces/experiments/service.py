"""Experiments on the web side: checking a request, starting (items made with their run ids, tasks sent
on commit), cancelling, the sweeper; the worker side is `traces/experiments/worker.py`."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from traces.conversations import (
    ConversationInputError,
    ConversationLimitError,
    active_conversations,
    cancel_conversation,
    check_conversation_request,
)
from traces.experiments.datasets import DatasetError
from traces.models import Conversation, Dataset, Experiment, ExperimentItem, Judge, Project

MAX_ITEMS = 1_000  # items in one experiment
MAX_TOKENS = 100_000_000
SPEC_FIELDS = (
    "provider",
    "model",
    "system",
    "cognitive_primitives",
    "context_window",
    "pin_budget_fraction",
    "prompt_snapshots",
    "agents",
)
REQUEST_FIELDS = (
    "project",
    "dataset",
    "version",
    "name",
    "judges",
    "max_items",
    "max_tokens",
    "parallel",
    *SPEC_FIELDS,
)


def _whole(data: Mapping[str, Any], field: str, default: int, top: int) -> int:
    raw: Any = data.get(field)
    if raw in (None, ""):
        return default
    if isinstance(raw, bool):
        raise DatasetError(field, "a whole number")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise DatasetError(field, "a whole number") from None
    if not 1 <= value <= top:
        raise DatasetError(field, f"1 to {top:,}")
    return value


def check_experiment(project: Project, data: Any) -> dict[str, Any]:
    """An experiment request: `dataset` (an id of the project's), `version` (default the newest),
    the conversation spec's fields (`check_conversation_request`'s rules), `judges` (ids of the
    project's judges), `max_items`, `max_tokens`, `parallel`, `name`. `DatasetError` or
    `ConversationInputError` for bad input."""
    if not isinstance(data, Mapping):
        raise DatasetError("body", "must be a JSON object")
    unknown = sorted(set(map(str, data)) - set(REQUEST_FIELDS))
    if unknown:
        raise DatasetError("body", f"unknown fields: {', '.join(unknown)}")
    raw = str(data.get("dataset") or "")
    dataset = Dataset.objects.filter(project=project, pk=int(raw) if raw.isdigit() else 0).first()
    if dataset is None:
        raise DatasetError("dataset", "choose one of the project's datasets (its id)")
    version = _whole(data, "version", dataset.version, max(dataset.version, 1))
    if version < 1 or not dataset.items_at(version).exists():
        raise DatasetError("version", "this version of the dataset holds no items")
    spec = check_conversation_request({k: data[k] for k in SPEC_FIELDS if k in data})
    judge_ids = data.get("judges") or []
    if isinstance(judge_ids, str | int):
        judge_ids = [judge_ids]
    if not isinstance(judge_ids, list) or not all(str(j).isdigit() for j in judge_ids):
        raise DatasetError("judges", "a list of judge ids")
    judges = list(Judge.objects.filter(project=project, pk__in=[int(j) for j in judge_ids]))
    if len(judges) != len(set(map(int, judge_ids))):
        raise DatasetError("judges", "name judges of this project")
    name = data.get("name") or ""
    if not isinstance(name, str) or len(name) > 200 or "\x00" in name:
        raise DatasetError("name", "a text of at most 200 characters")
    limit = int(settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS)
    return {
        "dataset": dataset,
        "dataset_version": version,
        "name": name.strip(),
        "provider": spec.provider,
        "model": spec.model,
        "config": spec.config(),
        "judges": judges,
        "max_items": _whole(data, "max_items", 100, MAX_ITEMS),
        "max_tokens": _whole(data, "max_tokens", 1_000_000, MAX_TOKENS),
        "parallel": _whole(data, "parallel", 1, limit),
    }


def enqueue(experiment_id: int, count: int = 1) -> None:
    """Send `run_experiment(experiment_id)` `count` times to the agents queue once the transaction
    commits (each task claims items one at a time, so several work side by side)."""
    queue_name = str(settings.ARCANA_AGENTS_QUEUE)

    def send() -> None:
        for _ in range(count):
            current_app.send_task(
                "traces.tasks.run_experiment", (experiment_id,), queue=queue_name, ignore_result=True
            )

    transaction.on_commit(send)


def do_start_experiment(project: Project, user: Any, fields: dict[str, Any]) -> Experiment:
    """Make the experiment and its items (the first `max_items` of the version, each with its run id)
    and send its tasks. `ConversationLimitError` when the project's running conversations and this
    experiment's `parallel` would pass `ARCANA_MAX_CONCURRENT_CONVERSATIONS`."""
    fields = dict(fields)
    judges = fields.pop("judges", [])
    limit = int(settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        active = [Experiment.Status.QUEUED, Experiment.Status.RUNNING]
        # An experiment's item runs as a conversation: counted once, in the experiment's `parallel`.
        items_running = ExperimentItem.objects.filter(
            experiment__project=project,
            experiment__status__in=active,
            conversation__status__in=[Conversation.Status.QUEUED, Conversation.Status.RUNNING],
        ).count()
        busy = (
            active_conversations(project)
            - items_running
            + sum(
                Experiment.objects.filter(project=project, status__in=active).values_list(
                    "parallel", flat=True
                )
            )
        )
        if busy + fields["parallel"] > limit:
            raise ConversationLimitError(
                f"this project already runs {busy} conversations or experiment tasks and may run {limit} "
                "(ARCANA_MAX_CONCURRENT_CONVERSATIONS); wait for one to finish or cancel one"
            )
        exp = Experiment.objects.create(
            project=project, created_by=user if getattr(user, "pk", None) else None, **fields
        )
        exp.judges.set(judges)
        items = list(exp.dataset.items_at(exp.dataset_version)[: exp.max_items])
        ExperimentItem.objects.bulk_create(
            ExperimentItem(experiment=exp, item=it, position=i, run_id=f"exp{exp.pk}-{uuid.uuid4()}")
            for i, it in enumerate(items, start=1)
        )
        Experiment.objects.filter(pk=exp.pk).update(items_total=len(items))
        exp.items_total = len(items)
        enqueue(exp.pk, exp.parallel)
    return exp


def do_cancel_experiment(exp: Experiment) -> bool:
    """Cancel: the items not started are skipped, a running item's conversation stops after its
    current step. False when it had finished."""
    now = timezone.now()
    with transaction.atomic():
        if not Experiment.objects.filter(
            pk=exp.pk, status__in=[Experiment.Status.QUEUED, Experiment.Status.RUNNING]
        ).update(cancel_requested=True, updated_at=now):
            return False
        skip_pending(exp.pk, "cancelled before it started")
        running = list(
            ExperimentItem.objects.filter(experiment=exp, state=ExperimentItem.State.RUNNING).exclude(
                conversation=None
            ).select_related("conversation")
        )  # fmt: skip
    for it in running:
        assert it.conversation is not None
        cancel_conversation(it.conversation)
    finish_if_done(exp.pk)
    return True


def skip_pending(experiment_id: int, reason: str) -> int:
    """Skip the items no worker has started (counted as done)."""
    from django.db.models import F

    with transaction.atomic():
        n = ExperimentItem.objects.filter(
            experiment_id=experiment_id, state=ExperimentItem.State.PENDING
        ).update(state=ExperimentItem.State.SKIPPED, error=reason, finished_at=timezone.now())
        if n:
            Experiment.objects.filter(pk=experiment_id).update(items_done=F("items_done") + n)
    return n


def finish_if_done(experiment_id: int) -> bool:
    """Finish the experiment once no item is pending or running: `cancelled` when asked, else
    `completed` (a failed item fails alone)."""
    left = ExperimentItem.objects.filter(
        experiment_id=experiment_id,
        state__in=[ExperimentItem.State.PENDING, ExperimentItem.State.RUNNING],
    )
    if left.exists():
        return False
    now = timezone.now()
    active = Experiment.objects.filter(
        pk=experiment_id, status__in=[Experiment.Status.QUEUED, Experiment.Status.RUNNING]
    )
    exp = active.first()
    if exp is None:
        return False
    status = Experiment.Status.CANCELLED if exp.cancel_requested else Experiment.Status.COMPLETED
    reason = exp.reason or ("cancelled by a user" if exp.cancel_requested else "")
    return bool(active.update(status=status, reason=reason, finished_at=now, updated_at=now))


def sweep_experiments() -> dict[str, int]:
    """Periodic: send a task again to experiments with an item whose worker vanished (its lease ran
    out) or with pending items and no task heard of for 5 leases (a lost message)."""
    now = timezone.now()
    lease = int(settings.ARCANA_CONVERSATION_LEASE_SECONDS)
    stale = now - timedelta(seconds=5 * lease)
    resent = 0
    active = Experiment.objects.filter(status__in=[Experiment.Status.QUEUED, Experiment.Status.RUNNING])
    for exp in active:
        items = ExperimentItem.objects.filter(experiment=exp)
        lost = items.filter(state=ExperimentItem.State.RUNNING, lease_expires_at__lt=now).exists()
        idle = exp.updated_at < stale and items.filter(state=ExperimentItem.State.PENDING).exists()
        live = items.filter(state=ExperimentItem.State.RUNNING, lease_expires_at__gte=now).exists()
        if lost or (idle and not live):
            Experiment.objects.filter(pk=exp.pk).update(updated_at=now)
            enqueue(exp.pk)
            resent += 1
        elif not items.filter(
            Q(state=ExperimentItem.State.PENDING) | Q(state=ExperimentItem.State.RUNNING)
        ).exists():
            finish_if_done(exp.pk)
    return {"resent": resent}


def item_conversation(it: ExperimentItem) -> Conversation:
    """The conversation that writes the item's run (made once: the run id is the item's)."""
    exp = it.experiment
    item = it.item
    config = dict(exp.config)
    if not config.get("system") and item.system:
        config["system"] = item.system
    conv, _ = Conversation.objects.get_or_create(
        project_id=exp.project_id,
        run_id=it.run_id,
        defaults={
            "mode": Conversation.Mode.SCRIPT,
            "provider": exp.provider,
            "model": exp.model,
            "config": config,
            "script": [{"agent": None, "content": c} for c in item.user_messages],
            "status": Conversation.Status.QUEUED,
            "created_by_id": exp.created_by_id,
        },
    )
    if it.conversation_id != conv.pk:
        ExperimentItem.objects.filter(pk=it.pk).update(conversation=conv)
        it.conversation = conv
    return conv


def check_script_limits(it: ExperimentItem) -> str:
    """Why the item's input cannot run as a conversation (the operator's limits), or ""."""
    try:
        check_conversation_request({"script": it.item.user_messages})
    except ConversationInputError as e:
        return str(e)
    return ""
