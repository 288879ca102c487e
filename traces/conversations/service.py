"""Starting, messaging and cancelling conversations (the web side; the worker side is `worker`)."""

from __future__ import annotations

import uuid
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from traces.conversations.sink import record_cancellation
from traces.conversations.spec import (
    ConversationBusyError,
    ConversationInputError,
    ConversationLimitError,
    ConversationSpec,
    ConversationTooLarge,
    check_message,
    max_conversation_bytes,
    script_bytes,
)
from traces.models import Conversation, Project


def active_conversations(project: Project) -> int:
    return Conversation.objects.filter(
        project=project, status__in=[Conversation.Status.QUEUED, Conversation.Status.RUNNING]
    ).count()


def start_conversation(project: Project, spec: ConversationSpec, *, user: Any = None) -> Conversation:
    """Create the conversation (`queued`, with its run id) and enqueue its task on commit.

    Raises `ConversationLimitError` when the project already has
    `ARCANA_MAX_CONCURRENT_CONVERSATIONS` queued or running conversations."""
    playground = spec.script is None
    with transaction.atomic():
        if not playground:  # a playground holds no worker until its first message
            _check_concurrency(project)
        conv = Conversation.objects.create(
            project=project,
            run_id=str(uuid.uuid4()),
            mode=Conversation.Mode.PLAYGROUND if playground else Conversation.Mode.SCRIPT,
            provider=spec.provider,
            model=spec.model,
            config=spec.config(),
            script=[] if playground else spec.script,
            # A playground has nothing to do until the first message.
            status=Conversation.Status.WAITING_FOR_USER if playground else Conversation.Status.QUEUED,
            created_by=user if getattr(user, "pk", None) is not None else None,
        )
        if not playground:
            enqueue(conv.pk)
    return conv


def _check_concurrency(project: Project) -> None:
    """`ConversationLimitError` when `project` already has `ARCANA_MAX_CONCURRENT_CONVERSATIONS`
    conversations queued or running. Call inside a transaction: the project row is locked so two
    requests cannot both pass the check."""
    limit = int(settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS)
    Project.objects.select_for_update().filter(pk=project.pk).first()
    if active_conversations(project) >= limit:
        raise ConversationLimitError(
            f"this project already runs {limit} conversations (ARCANA_MAX_CONCURRENT_CONVERSATIONS); "
            "wait for one to finish or cancel one"
        )


def enqueue(conversation_id: int) -> None:
    """Send `run_conversation(conversation_id)` to `ARCANA_AGENTS_QUEUE` once the current transaction
    commits (at once outside one): the worker must see the committed row."""
    queue_name = str(settings.ARCANA_AGENTS_QUEUE)
    # By the task's name (traces/tasks.py imports this package): no import circle.
    transaction.on_commit(
        lambda: current_app.send_task(
            "traces.tasks.run_conversation", (conversation_id,), queue=queue_name, ignore_result=True
        )
    )


def post_message(conversation: Conversation, content: Any, *, agent: Any = None) -> Conversation:
    """Queue one playground turn. `ConversationBusyError` unless it is `waiting_for_user`;
    `ConversationInputError` for a bad message; `ConversationTooLarge` when the conversation's messages
    would pass `ARCANA_MAX_CONVERSATION_BYTES`; `ConversationLimitError` when the project already runs
    its maximum of conversations."""
    if conversation.mode != Conversation.Mode.PLAYGROUND:
        raise ConversationBusyError("a scripted conversation takes no messages")
    names = conversation.agent_names
    if names and agent is None:
        agent = names[0]
    problem = check_message(content, agent, names)
    if problem is not None:
        raise ConversationInputError(
            [{"field": "content" if "message" in problem else "agent", "message": problem}]
        )
    limit = max_conversation_bytes()
    with transaction.atomic():
        _check_concurrency(conversation.project)
        conv = Conversation.objects.select_for_update().get(pk=conversation.pk)
        if conv.status != Conversation.Status.WAITING_FOR_USER:
            raise ConversationBusyError(
                f"the conversation is {conv.status.replace('_', ' ')}; "
                + ("wait for the turn to finish" if conv.is_active else "it takes no more messages")
            )
        if conv.cursor >= int(settings.ARCANA_MAX_TURNS_PER_CONVERSATION):
            raise ConversationBusyError(
                f"turn limit reached ({settings.ARCANA_MAX_TURNS_PER_CONVERSATION} turns, "
                "ARCANA_MAX_TURNS_PER_CONVERSATION)"
            )
        script = [*conv.script, {"agent": agent if names else None, "content": content}]
        if script_bytes(script) > limit:
            raise ConversationTooLarge(limit, "content")
        conv.script = script
        conv.status = Conversation.Status.QUEUED
        conv.attempts = 0
        conv.updated_at = timezone.now()
        conv.save(update_fields=["script", "status", "attempts", "updated_at"])
        enqueue(conv.pk)
    return conv


def cancel_conversation(conversation: Conversation) -> Conversation:
    """Cancel: a queued or waiting conversation at once; a running one after its current step
    (the worker sees `cancel_requested` within a lease renewal and the runtime stops before the next
    step). A finished conversation is left as it is."""
    now = timezone.now()
    cancelled = False
    with transaction.atomic():
        conv = Conversation.objects.select_for_update().get(pk=conversation.pk)
        if conv.status in (Conversation.Status.QUEUED, Conversation.Status.WAITING_FOR_USER):
            conv.status = Conversation.Status.CANCELLED
            conv.reason = "cancelled before the next turn started"
            conv.finished_at = now
            cancelled = True
        elif conv.status == Conversation.Status.RUNNING:
            conv.cancel_requested = True
        conv.updated_at = now
        conv.save()
    if cancelled:  # the run says so too (a running one: the worker writes it when it stops)
        record_cancellation(conv, conv.reason)
    return conv
