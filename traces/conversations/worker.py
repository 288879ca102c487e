"""The worker side: claim a conversation under a lease, run its pending turns, save its state; the sweeper."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django import db
from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from runtime import (
    ChatSession,
    ConfigError,
    ContextOverflowError,
    ContextStrategy,
    ProviderError,
    Runtime,
    RuntimeConfig,
    TraceWriter,
)
from runtime.scenarios import get_scenario
from traces.conversations.providers import SCRIPTED, server_providers
from traces.conversations.service import enqueue
from traces.conversations.sink import StoreSink, record_cancellation
from traces.core import workers
from traces.models import Conversation

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def claim(conversation_id: int, owner: str) -> bool:
    """Take a conversation to run its pending turns: `queued`, or `running` under an expired lease
    (its worker vanished). A conditional update, so two deliveries of one task never both run."""
    now = timezone.now()
    lease = timedelta(seconds=int(settings.ARCANA_CONVERSATION_LEASE_SECONDS))
    claimable = Q(status=Conversation.Status.QUEUED) | Q(
        status=Conversation.Status.RUNNING, lease_expires_at__lt=now
    )
    return (
        Conversation.objects.filter(claimable, pk=conversation_id).update(
            status=Conversation.Status.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + lease,
            attempts=F("attempts") + 1,
            updated_at=now,
        )
        == 1
    )


class _Lease(threading.Thread):
    """Renews the lease while a turn runs and reads the cancel flag, once a second (own DB connection).

    `lost` is set when the row is no longer ours (the sweeper re-queued it after a stall)."""

    TICK = 1.0

    def __init__(self, conversation_id: int, owner: str) -> None:
        super().__init__(name=f"arcana-lease-{conversation_id}", daemon=True)
        self.conversation_id = conversation_id
        self.owner = owner
        self.lease = int(settings.ARCANA_CONVERSATION_LEASE_SECONDS)
        self.renew_every = max(self.TICK, self.lease / 3)
        self.cancelled = threading.Event()
        self.lost = threading.Event()
        self._halt = threading.Event()

    def run(self) -> None:
        since_renewal = 0.0
        try:
            while not self._halt.wait(self.TICK):
                since_renewal += self.TICK
                mine = Conversation.objects.filter(pk=self.conversation_id, lease_owner=self.owner)
                if since_renewal >= self.renew_every:
                    since_renewal = 0.0
                    expires = timezone.now() + timedelta(seconds=self.lease)
                    if mine.update(lease_expires_at=expires) != 1:
                        self.lost.set()
                if mine.filter(cancel_requested=True).exists():
                    self.cancelled.set()
        except Exception:
            log.exception("lease renewal of conversation %s failed", self.conversation_id)
        finally:
            db.connection.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def _pin_ids(run_id: str, agent: str | None, fixed: Sequence[str], session: ChatSession) -> Any:
    """Deterministic pin ids: a re-run turn (after a lost worker) makes the same pin ids as the first
    attempt, whose events the store kept. The scenario's fixed ids come first (a scripted `unpin`
    names them)."""
    counter = [0]

    def next_id() -> str:
        n = len(session.cognitive.pins.entries) + counter[0]
        counter[0] += 1
        if n < len(fixed):
            return fixed[n]
        return "p_" + hashlib.sha256(f"{run_id}/{agent or ''}/{n}".encode()).hexdigest()[:8]

    return next_id


@dataclass
class _Engine:
    """The runtime objects of one task: the `Runtime`, and the chat session or the pool."""

    runtime: Runtime
    chat: ChatSession | None
    pool: Any
    store: StoreSink

    def session_for(self, agent: str | None) -> ChatSession:
        if self.pool is not None:
            return self.pool[agent] if agent else next(iter(self.pool.agents.values()))
        assert self.chat is not None
        return self.chat

    def export(self) -> dict[str, Any]:
        if self.pool is not None:
            return self.pool.export_state()
        assert self.chat is not None
        return self.chat.export_state()

    def tokens_used(self) -> int:
        writer = self.pool.writer if self.pool is not None else self.chat.writer  # type: ignore[union-attr]
        return int(writer.budgets.tokens_used)

    async def aclose(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()
        elif self.chat is not None:
            await self.chat.aclose()
        for p in self.runtime.providers.values():
            await p.aclose()


def build_engine(conv: Conversation, store: StoreSink) -> _Engine:
    """The runtime for `conv` from its row alone (config, saved state): no file, no local folder."""
    cfg = conv.config
    scenario = get_scenario(conv.model) if conv.provider == SCRIPTED else None
    if scenario is not None:
        # ARCANA_SCRIPTED_STEP_MS paces the offline demo like a real model (scripts/run: a new user
        # watches its pin, compression and recall arrive step by step instead of all at once).
        delay = int(settings.ARCANA_SCRIPTED_STEP_MS) / 1000
        providers: dict[str, Any] = {SCRIPTED: scenario.provider(delay=delay)}
        tools: list[Any] = list(scenario.tools)
    else:
        sp = server_providers().get(conv.provider)
        if sp is None:
            raise ConfigError(f"provider {conv.provider!r} is no longer configured (ARCANA_PROVIDERS)")
        spec: dict[str, Any] = {"base_url": sp.base_url, "model": conv.model, "stream": sp.stream}
        key = sp.api_key
        if key:
            spec["api_key"] = key
        if sp.timeout is not None:
            spec["timeout"] = sp.timeout
        if sp.max_retries is not None:
            spec["max_retries"] = sp.max_retries
        providers = {conv.provider: spec}
        tools = []
    window = cfg.get("context_window") or (scenario.context_window if scenario else None) or 128_000
    reserve = scenario.response_reserve if scenario is not None and not cfg.get("context_window") else None
    config = RuntimeConfig(
        context_window=window,
        response_reserve=reserve,
        context_strategy=(scenario.strategy if scenario and scenario.strategy else ContextStrategy()),
        trace_dir=None,
        trace_include_prompt_snapshots=bool(cfg.get("prompt_snapshots", True)),
        cognitive_primitives=cfg.get("cognitive_primitives") or [],
        pin_budget_fraction=float(cfg.get("pin_budget_fraction") or 0.5),
        max_steps_per_turn=int(settings.ARCANA_MAX_STEPS_PER_TURN),
        deterministic_step_ids=True,
    )
    rt = Runtime(providers, config=config, tools=tools, trace_sinks=[store])
    fixed = scenario.pin_ids if scenario is not None else ()
    if cfg.get("agents"):
        pool = rt.collaborate(
            cognitive_primitives=cfg.get("cognitive_primitives") or [], state=conv.state, run_id=conv.run_id
        )
        for a in cfg["agents"]:
            session = pool.add(
                a["name"],
                system=a.get("system") or (scenario.agents.get(a["name"]) if scenario else None),
                cognitive_primitives=a.get("cognitive_primitives"),
            )
            session.cognitive.id_factory = _pin_ids(conv.run_id, a["name"], fixed, session)
            if cfg.get("name"):
                session.writer.labels["run_name"] = cfg["name"]
            if cfg.get("tags"):
                session.writer.labels["run_tags"] = list(cfg["tags"])
        return _Engine(rt, None, pool, store)
    # The run's name and tags go into its trace (`metadata.run_name` / `run_tags` on each `turn` event).
    labels = {"name": cfg.get("name") or None, "tags": cfg.get("tags") or None}
    if conv.state:
        chat = rt.chat(state=conv.state, **labels)
    else:
        chat = rt.chat(system=cfg.get("system"), run_id=conv.run_id, **labels)
    chat.cognitive.id_factory = _pin_ids(conv.run_id, None, fixed, chat)
    return _Engine(rt, chat, None, store)


def run_pending_turns(conversation_id: int) -> dict[str, Any]:
    """The body of `traces.tasks.run_conversation`: claim the row, run every message after its cursor
    (one turn each), saving the session state, transcript and cursor after each turn, then leave it
    `waiting_for_user` (playground) or `completed` (script) — or `failed` / `cancelled` with a reason.

    The turn runs in an event loop of this thread while the ORM is used only between turns (never
    inside the loop); events reach the store through `StoreSink`'s thread as they are written."""
    owner = worker_name()
    if not claim(conversation_id, owner):
        return {"conversation": conversation_id, "skipped": "not claimable"}
    conv = Conversation.objects.select_related("project").get(pk=conversation_id)
    max_attempts = int(settings.ARCANA_CONVERSATION_MAX_ATTEMPTS)
    if conv.attempts > max_attempts:
        _finish(
            conv,
            owner,
            Conversation.Status.FAILED,
            f"worker lost {max_attempts} times while running this turn",
        )
        return {"conversation": conversation_id, "status": "failed"}
    if conv.started_at is None:
        Conversation.objects.filter(pk=conv.pk, started_at__isnull=True).update(started_at=timezone.now())
    lease = _Lease(conv.pk, owner)
    lease.start()
    store = StoreSink(conv.project)
    loop = asyncio.new_event_loop()
    status: str | None = Conversation.Status.FAILED
    reason = ""
    engine: _Engine | None = None
    try:
        engine = build_engine(conv, store)
        status, reason = _run_turns(conv, engine, lease, loop, owner)
    except ProviderError as exc:
        # The runtime already wrote the `error` event (stop_reason "error") of the failed step.
        status, reason = Conversation.Status.FAILED, f"provider error: {exc}"
    except Exception as exc:
        if isinstance(exc, ConfigError | ContextOverflowError):  # bad settings or a message too big
            log.warning("conversation %s failed: %s", conversation_id, exc)
        else:
            log.exception("conversation %s failed", conversation_id)
        status, reason = Conversation.Status.FAILED, f"{type(exc).__name__}: {exc}"
        if store.errors_written == 0:
            _record_failure(store, conv, exc)
    finally:
        try:
            if engine is not None:
                loop.run_until_complete(engine.aclose())
        finally:
            loop.close()
            store.close()
            lease.stop()
    if status is not None:
        _finish(conv, owner, status, reason[:2000])
    return {"conversation": conversation_id, "status": str(status) if status else "lost lease"}


def _record_failure(store: StoreSink, conv: Conversation, exc: BaseException) -> None:
    """An `error` event for a failure the runtime did not record (a provider that cannot be built, a
    message too big for the window), so the run shows why it stopped, like a provider error."""
    category = "context_overflow" if isinstance(exc, ContextOverflowError) else "worker"
    TraceWriter(store, conv.run_id).emit(
        "error",
        turn=conv.cursor + 1,
        step=1,
        stop_reason="error",
        stop_detail=str(exc)[:500],
        metadata={"error": type(exc).__name__, "message": str(exc), "error_category": category},
    )


def _stop_before_turn(
    conv: Conversation, engine: _Engine, lease: _Lease, owner: str
) -> tuple[str | None, str] | None:
    """Why the conversation must not run its next turn (its final status and reason; None as the status
    when this worker just lets go of it), or None to run it. Reads the row afresh."""
    max_turns = int(settings.ARCANA_MAX_TURNS_PER_CONVERSATION)
    max_tokens = int(settings.ARCANA_MAX_TOKENS_PER_CONVERSATION)
    conv.refresh_from_db(fields=["script", "cursor", "cancel_requested", "status", "lease_owner"])
    if conv.lease_owner != owner or conv.status != Conversation.Status.RUNNING:
        return None, ""  # the sweeper gave the work to someone else, or it was cancelled
    if conv.cancel_requested or lease.cancelled.is_set():
        return Conversation.Status.CANCELLED, "cancelled by a user"
    if conv.cursor >= len(conv.script):
        if conv.mode == Conversation.Mode.PLAYGROUND:
            return Conversation.Status.WAITING_FOR_USER, ""
        return Conversation.Status.COMPLETED, ""
    if workers.stopping():  # hand the rest back: a stop waits for one turn, not the conversation
        _hand_back(conv, owner)
        return None, ""
    if conv.cursor >= max_turns:
        return (
            Conversation.Status.FAILED,
            f"turn limit reached ({max_turns} turns, ARCANA_MAX_TURNS_PER_CONVERSATION)",
        )
    if engine.tokens_used() >= max_tokens:
        return (
            Conversation.Status.FAILED,
            f"token limit reached ({max_tokens:,} tokens, ARCANA_MAX_TOKENS_PER_CONVERSATION)",
        )
    return None


def _run_turns(
    conv: Conversation, engine: _Engine, lease: _Lease, loop: asyncio.AbstractEventLoop, owner: str
) -> tuple[str | None, str]:
    max_tokens = int(settings.ARCANA_MAX_TOKENS_PER_CONVERSATION)

    def stop_check() -> tuple[str, str] | None:
        if lease.cancelled.is_set():
            return ("user_cancelled", "cancelled by a user")
        if engine.tokens_used() >= max_tokens:
            return (
                "max_tokens",
                f"token limit reached ({max_tokens:,} tokens, ARCANA_MAX_TOKENS_PER_CONVERSATION)",
            )
        return None

    sessions = list(engine.pool.agents.values()) if engine.pool is not None else [engine.chat]
    for s in sessions:
        assert s is not None
        s.stop_check = stop_check

    while True:
        if (stop := _stop_before_turn(conv, engine, lease, owner)) is not None:
            return stop
        message = conv.script[conv.cursor]
        session = engine.session_for(message.get("agent"))
        reply = loop.run_until_complete(session.send(message["content"]))
        # Every event of the turn is in the store before the cursor moves past it: a worker lost
        # after this point re-runs nothing; lost before it, the turn re-runs with the same step ids.
        engine.store.flush()
        entry = {
            "index": conv.cursor,
            "agent": reply.agent,
            "turn": reply.turn,
            "user": message["content"],
            "assistant": reply.content,
            "outcome": reply.outcome,
            "steps": reply.steps,
            "worker": owner,  # which worker process ran the turn (turns may move between machines)
        }
        saved = Conversation.objects.filter(pk=conv.pk, lease_owner=owner, cursor=conv.cursor).update(
            state=engine.export(),
            cursor=conv.cursor + 1,
            transcript=[*_transcript(conv.pk), entry],
            tokens_used=engine.tokens_used(),
            attempts=0,
            updated_at=timezone.now(),
        )
        if saved != 1:
            return None, ""
        if reply.outcome == "stopped":
            if lease.cancelled.is_set():
                return Conversation.Status.CANCELLED, "cancelled by a user after a step"
            return (
                Conversation.Status.FAILED,
                f"token limit reached ({max_tokens:,} tokens, ARCANA_MAX_TOKENS_PER_CONVERSATION)",
            )
        if reply.outcome == "max_steps":
            return Conversation.Status.FAILED, (
                f"step limit reached in turn {reply.turn} ({settings.ARCANA_MAX_STEPS_PER_TURN} steps, "
                "ARCANA_MAX_STEPS_PER_TURN)"
            )


def _hand_back(conv: Conversation, owner: str) -> None:
    """Give a conversation with turns left back to the queue (this worker is stopping): `queued`, no
    lease, and a new task, which the next worker to start runs from the saved state and cursor."""
    handed = Conversation.objects.filter(
        pk=conv.pk, lease_owner=owner, status=Conversation.Status.RUNNING
    ).update(
        status=Conversation.Status.QUEUED,
        lease_owner="",
        lease_expires_at=None,
        updated_at=timezone.now(),
    )
    if handed:
        log.info("conversation %s handed back to the queue at turn %s", conv.pk, conv.cursor + 1)
        enqueue(conv.pk)


def _transcript(pk: int) -> list[dict[str, Any]]:
    return list(Conversation.objects.filter(pk=pk).values_list("transcript", flat=True).first() or [])


def _finish(conv: Conversation, owner: str, status: str, reason: str) -> None:
    """Leave the row in `status` (only while this worker still holds it)."""
    now = timezone.now()
    fields: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "lease_owner": "",
        "lease_expires_at": None,
        "updated_at": now,
    }
    if status in Conversation.FINISHED:
        fields["finished_at"] = now
    if status == Conversation.Status.WAITING_FOR_USER:
        fields["attempts"] = 0
    finished = Conversation.objects.filter(pk=conv.pk, lease_owner=owner).update(**fields)
    if finished and status == Conversation.Status.CANCELLED:
        record_cancellation(conv, reason)  # the run's status is its events': `cancelled` too


def sweep_conversations() -> dict[str, int]:
    """Find conversations whose worker vanished and queue them again (or fail them).

    A `running` row whose lease expired lost its worker (killed, machine gone): back to `queued`
    and a new task, which re-runs the unfinished turn from the saved state (same step ids, so the
    store keeps one copy); after `ARCANA_CONVERSATION_MAX_ATTEMPTS` lost attempts it fails. A
    `queued` row untouched for 5 leases lost its message (a broker that dropped it): sent again
    (harmless if the first is still coming: the claim lets one run)."""
    now = timezone.now()
    lease = int(settings.ARCANA_CONVERSATION_LEASE_SECONDS)
    max_attempts = int(settings.ARCANA_CONVERSATION_MAX_ATTEMPTS)
    requeued = failed = resent = 0
    for conv in Conversation.objects.filter(status=Conversation.Status.RUNNING, lease_expires_at__lt=now):
        if conv.attempts >= max_attempts:
            n = Conversation.objects.filter(
                pk=conv.pk, status=Conversation.Status.RUNNING, lease_expires_at__lt=now
            ).update(
                status=Conversation.Status.FAILED,
                reason=f"worker lost {conv.attempts} times while running this turn",
                lease_owner="",
                lease_expires_at=None,
                finished_at=now,
                updated_at=now,
            )
            failed += n
            continue
        n = Conversation.objects.filter(
            pk=conv.pk, status=Conversation.Status.RUNNING, lease_expires_at__lt=now
        ).update(status=Conversation.Status.QUEUED, lease_owner="", lease_expires_at=None, updated_at=now)
        if n:
            requeued += 1
            enqueue(conv.pk)
    stale = now - timedelta(seconds=5 * lease)
    for pk in Conversation.objects.filter(
        status=Conversation.Status.QUEUED, updated_at__lt=stale
    ).values_list("pk", flat=True):
        Conversation.objects.filter(pk=pk).update(updated_at=now)
        enqueue(pk)
        resent += 1
    return {"requeued": requeued, "failed": failed, "resent": resent}
