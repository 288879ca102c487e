"""Conversations run by our own workers, streamed into the store as they happen (issue 12).

The worker runs `runtime` in-process and hands each trace event to `traces.ingest` through
`StoreSink`, so pages show the run while it is still going (the one ingest path, DESIGN.md §3).
Nothing else is shared between worker processes: the session state is saved on the `Conversation`
row after every turn, and no trace file is needed to continue (DESIGN.md §7).

Interface (for the pages and the API; the model is `traces.models.Conversation`):

* `available_providers() -> list[ProviderChoice]` — what the operator configured
  (`settings.ARCANA_PROVIDERS`, from the `ARCANA_PROVIDERS` env JSON) plus the built-in offline
  `scripted` provider whose models are the named scenarios (`pin-recall-demo`, ...). Each
  `ProviderChoice` is `{"name", "models": [str], "default_model", "kind": "scripted" | "openai"}`;
  API keys never appear (they stay in the env vars the config names).
* `check_conversation_request(data) -> ConversationSpec` — validates the body of
  `POST /api/v1/conversations` (the same dict the new-run form should build: provider, model,
  system, cognitive_primitives, context_window, pin_budget_fraction, prompt_snapshots, script,
  agents); raises `ConversationInputError` with `.detail = [{"field", "message"}]`.
* `start_conversation(project, spec, *, user=None) -> Conversation` — creates the row (`queued`,
  with its `run_id`) and enqueues `traces.tasks.run_conversation` on commit. Raises
  `ConversationLimitError` when the project already runs `ARCANA_MAX_CONCURRENT_CONVERSATIONS`.
* `post_message(conversation, content, *, agent=None) -> Conversation` — a playground turn; raises
  `ConversationBusyError` (409) unless the conversation is `waiting_for_user`.
* `cancel_conversation(conversation) -> Conversation` — queued/waiting: cancelled at once; running:
  stops after the current step.
* `sweep_conversations() -> dict` — the periodic sweeper (re-queues rows whose lease expired).

Pages read: `conversation.status` (`Conversation.Status`), `.reason`, `.transcript`
(`[{"index", "agent", "turn", "user", "assistant", "outcome", "steps"}]`), `.active_pins()`,
`.accepts_messages`, `.created_at/.started_at/.finished_at`, and from a run `run.conversation`
(None for imported runs). Token counts that are calibrated estimates (a model whose tokenizer
tiktoken does not have) are marked by `ContextDecision.estimated` / `Run.tokens_estimated`
(show "≈").
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypedDict

from django import db
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime import (
    ChatSession,
    ConfigError,
    ContextStrategy,
    JsonlFileSink,
    ProviderError,
    Runtime,
    RuntimeConfig,
    TraceEvent,
)
from runtime.demo import run_demo
from runtime.scenarios import SCENARIOS, Scenario, get_scenario
from traces import ingest
from traces.models import Conversation, Project

log = logging.getLogger(__name__)

SCRIPTED = "scripted"
PRIMITIVES = ("recall", "pin")
MAX_MESSAGE_CHARS = 100_000
MAX_SYSTEM_CHARS = 20_000
MAX_AGENTS = 8


# --------------------------------------------------------------------------------------------------
# Providers the operator configured


class ProviderChoice(TypedDict):
    name: str
    kind: str  # "scripted" | "openai"
    models: list[str]
    default_model: str


@dataclass(frozen=True)
class ServerProvider:
    """One entry of `ARCANA_PROVIDERS`: an OpenAI-compatible endpoint. `api_key_env` names the
    environment variable holding its key (read when a worker builds the provider, never stored)."""

    name: str
    base_url: str
    models: tuple[str, ...]
    api_key_env: str | None = None
    stream: bool = False
    timeout: float | None = None
    max_retries: int | None = None

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


def parse_providers(raw: str) -> dict[str, ServerProvider]:
    """`ARCANA_PROVIDERS` (JSON text) → providers by name. Raises `ImproperlyConfigured` naming the entry.

        >>> parse_providers('{"local": {"base_url": "http://127.0.0.1:8001/v1", "models": ["llama3"]}}')
        {'local': ServerProvider(name='local', base_url='http://127.0.0.1:8001/v1', models=('llama3',), ...)}

    A name that is a runtime preset (`openai`, `deepseek`, ...) may omit `base_url` and `model`: the
    preset's are used, and its key variable (`OPENAI_API_KEY`, ...) unless `api_key_env` says otherwise.
    """
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"ARCANA_PROVIDERS is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ImproperlyConfigured("ARCANA_PROVIDERS must be a JSON object: name -> {base_url, model, ...}")
    presets = _presets()
    out: dict[str, ServerProvider] = {}
    for name, entry in data.items():
        where = f"ARCANA_PROVIDERS[{name!r}]"
        if not isinstance(name, str) or not name or len(name) > 100 or name == SCRIPTED:
            raise ImproperlyConfigured(
                f"{where}: a provider name must be 1-100 characters and not {SCRIPTED!r}"
            )
        if not isinstance(entry, dict):
            raise ImproperlyConfigured(f"{where} must be an object")
        unknown = set(entry) - {
            "base_url",
            "model",
            "models",
            "api_key_env",
            "stream",
            "timeout",
            "max_retries",
        }
        if unknown:
            raise ImproperlyConfigured(f"{where}: unknown keys {sorted(unknown)}")
        preset = presets.get(name)
        base_url = entry.get("base_url") or (preset.base_url if preset else None)
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ImproperlyConfigured(f"{where}: 'base_url' must be an http(s) URL")
        models = entry.get("models")
        if models is None:
            model = entry.get("model") or (preset.model if preset else None)
            models = [model] if model else []
        if (
            not isinstance(models, list)
            or not models
            or not all(isinstance(m, str) and 0 < len(m) <= 200 for m in models)
        ):
            raise ImproperlyConfigured(f"{where}: give 'model' (a string) or 'models' (a list of strings)")
        key_env = entry.get("api_key_env")
        if key_env is None and preset is not None:
            key_env = preset.api_key_env
        if key_env is not None and (not isinstance(key_env, str) or not key_env):
            raise ImproperlyConfigured(f"{where}: 'api_key_env' must name an environment variable")
        stream = entry.get("stream", False)
        if not isinstance(stream, bool):
            raise ImproperlyConfigured(f"{where}: 'stream' must be true or false")
        timeout = entry.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
            raise ImproperlyConfigured(f"{where}: 'timeout' must be a number of seconds")
        retries = entry.get("max_retries")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ImproperlyConfigured(f"{where}: 'max_retries' must be an integer >= 0")
        out[name] = ServerProvider(name, base_url, tuple(models), key_env, stream, timeout, retries)
    return out


def _presets() -> Mapping[str, Any]:
    import runtime

    return runtime.PRESETS


def server_providers() -> dict[str, ServerProvider]:
    """The configured OpenAI-compatible providers (`settings.ARCANA_PROVIDERS`), parsed."""
    return parse_providers(str(getattr(settings, "ARCANA_PROVIDERS", "") or ""))


def available_providers() -> list[ProviderChoice]:
    """What the new-run form and `GET /api/v1/conversations/providers` offer: `scripted` (its
    scenarios as models) first, then the configured endpoints. No key, no base URL."""
    scenarios = sorted(SCENARIOS)
    out: list[ProviderChoice] = [
        ProviderChoice(name=SCRIPTED, kind="scripted", models=scenarios, default_model="pin-recall-demo")
    ]
    for p in server_providers().values():
        out.append(
            ProviderChoice(name=p.name, kind="openai", models=list(p.models), default_model=p.models[0])
        )
    return out


def scenario_details() -> dict[str, dict[str, Any]]:
    """Each scripted scenario's suggested script and settings (to prefill a form)."""
    return {name: s.describe() for name, s in SCENARIOS.items()}


# --------------------------------------------------------------------------------------------------
# Checking a request


class ConversationInputError(ValueError):
    """Bad input for a conversation; `detail` is `[{"field", "message"}]` (the API's error shape)."""

    def __init__(self, detail: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{d['field']}: {d['message']}" for d in detail))
        self.detail = detail


class ConversationBusyError(Exception):
    """The conversation cannot take a message now (a turn is running, or it has finished): 409."""


class ConversationLimitError(Exception):
    """An operator limit refuses the request (concurrent conversations of a project): 429."""


@dataclass
class ConversationSpec:
    """A checked request: what `start_conversation` stores."""

    provider: str
    model: str
    system: str | None
    cognitive_primitives: list[str]
    context_window: int | None
    pin_budget_fraction: float
    prompt_snapshots: bool
    script: list[dict[str, Any]] | None  # [{"agent": str | None, "content": str}]; None = playground
    agents: list[dict[str, Any]] | None  # [{"name", "system", "cognitive_primitives": list | None}]
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "cognitive_primitives": self.cognitive_primitives,
            "context_window": self.context_window,
            "pin_budget_fraction": self.pin_budget_fraction,
            "prompt_snapshots": self.prompt_snapshots,
            "agents": self.agents,
        }


REQUEST_FIELDS = (
    "project",
    "team",
    "provider",
    "model",
    "system",
    "cognitive_primitives",
    "context_window",
    "pin_budget_fraction",
    "prompt_snapshots",
    "script",
    "agents",
)


def check_conversation_request(data: Any) -> ConversationSpec:
    """Validate the body of `POST /api/v1/conversations` (or the new-run form's data).

    Fields: `provider`, `model` (one `available_providers()` offers); `system` (str or null);
    `cognitive_primitives` (subset of ["recall", "pin"]; default: the scenario's for `scripted`, else
    []); `context_window` (256..2,000,000 or null: the scenario's, else 128,000);
    `pin_budget_fraction` (0 < f <= 1, default 0.5); `prompt_snapshots` (bool, default true);
    `script` (list of messages, or null for a playground; for a pool each item is
    `{"agent": name, "content": text}` or a plain string for the first agent); `agents` (null for a
    chat, or `[{"name", "system", "cognitive_primitives": null (inherit) | [...] (override) | [] (opt
    out)}]`). Every problem is reported, not just the first."""
    errors: list[dict[str, str]] = []

    def bad(name: str, message: str) -> None:
        errors.append({"field": name, "message": message})

    if not isinstance(data, Mapping):
        raise ConversationInputError([{"field": "body", "message": "must be a JSON object"}])
    unknown = sorted(set(data) - set(REQUEST_FIELDS))
    if unknown:
        bad("body", f"unknown fields: {', '.join(map(str, unknown))}")

    provider = data.get("provider", SCRIPTED)
    model = data.get("model")
    choices = {c["name"]: c for c in available_providers()}
    scenario: Scenario | None = None
    if not isinstance(provider, str) or provider not in choices:
        bad("provider", f"unknown provider {provider!r}; configured: {', '.join(choices)}")
        provider = ""
    else:
        if model is None:
            model = choices[provider]["default_model"]
        if not isinstance(model, str) or model not in choices[provider]["models"]:
            bad(
                "model",
                f"unknown model {model!r} for {provider!r}; offered: {', '.join(choices[provider]['models'])}",
            )
            model = ""
        elif provider == SCRIPTED:
            scenario = get_scenario(model)

    system = data.get("system")
    if system is not None and (
        not isinstance(system, str) or len(system) > MAX_SYSTEM_CHARS or "\x00" in system
    ):
        bad("system", f"must be a string of at most {MAX_SYSTEM_CHARS:,} characters, or null")
        system = None
    if system is None and scenario is not None:
        system = scenario.system

    primitives = _check_primitives(data.get("cognitive_primitives", None), "cognitive_primitives", bad)
    if primitives is None:
        primitives = list(scenario.cognitive_primitives) if scenario is not None else []

    window = data.get("context_window")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or not 256 <= window <= 2_000_000
    ):
        bad("context_window", "must be an integer from 256 to 2,000,000, or null")
        window = None

    fraction = data.get("pin_budget_fraction", 0.5)
    if fraction is None:
        fraction = 0.5
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        bad("pin_budget_fraction", "must be a number in (0, 1]")
        fraction = 0.5

    snapshots = data.get("prompt_snapshots", True)
    if not isinstance(snapshots, bool):
        bad("prompt_snapshots", "must be true or false")
        snapshots = True

    agents = _check_agents(data.get("agents"), bad)
    names = [a["name"] for a in agents] if agents else []
    script = _check_script(data.get("script"), names, bad)

    if errors:
        raise ConversationInputError(errors)
    return ConversationSpec(
        provider=provider,
        model=str(model),
        system=system,
        cognitive_primitives=primitives,
        context_window=window,
        pin_budget_fraction=float(fraction),
        prompt_snapshots=snapshots,
        script=script,
        agents=agents,
    )


def _check_primitives(value: Any, where: str, bad: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        bad(where, 'must be a list such as ["recall", "pin"], or null')
        return []
    unknown = [v for v in value if v not in PRIMITIVES]
    if unknown:
        bad(where, f"unknown primitives {unknown}; known: recall, pin")
        return []
    return [p for p in PRIMITIVES if p in value]


def _check_agents(value: Any, bad: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_AGENTS:
        bad("agents", f"must be a list of 1 to {MAX_AGENTS} agents, or null")
        return None
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, a in enumerate(value):
        where = f"agents[{i}]"
        if isinstance(a, str):
            a = {"name": a}
        if not isinstance(a, Mapping):
            bad(where, "must be an object {name, system, cognitive_primitives}")
            continue
        extra = set(a) - {"name", "system", "cognitive_primitives"}
        if extra:
            bad(where, f"unknown fields {sorted(extra)}")
        name = a.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 100 or name in seen:
            bad(f"{where}.name", "must be a unique non-empty name of at most 100 characters")
            continue
        seen.add(name)
        system = a.get("system")
        if system is not None and (not isinstance(system, str) or len(system) > MAX_SYSTEM_CHARS):
            bad(f"{where}.system", "must be a string or null")
            system = None
        prims = _check_primitives(a.get("cognitive_primitives"), f"{where}.cognitive_primitives", bad)
        out.append({"name": name, "system": system, "cognitive_primitives": prims})
    return out


def _check_script(value: Any, agents: list[str], bad: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        bad("script", "must be a non-empty list of messages, or null for a playground")
        return None
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        agent: Any = None
        content: Any = item
        if isinstance(item, Mapping):
            agent, content = item.get("agent"), item.get("content")
        message = _check_message(content, agent, agents)
        if message is not None:
            bad(f"script[{i}]", message)
            continue
        out.append({"agent": agent if agents else None, "content": content})
    return out


def _check_message(content: Any, agent: Any, agents: Sequence[str]) -> str | None:
    """Why a user message is unacceptable, or None."""
    if not isinstance(content, str) or not content.strip():
        return "a message must be a non-empty string"
    if len(content) > MAX_MESSAGE_CHARS or "\x00" in content:
        return f"a message must be at most {MAX_MESSAGE_CHARS:,} characters, without NUL"
    if agent is not None:
        if not agents:
            return "names an agent, but the conversation has no agents"
        if agent not in agents:
            return f"unknown agent {agent!r}; agents: {', '.join(agents)}"
    return None


# --------------------------------------------------------------------------------------------------
# Starting, messaging, cancelling


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
    from traces.tasks import run_conversation

    queue_name = str(settings.ARCANA_AGENTS_QUEUE)
    transaction.on_commit(lambda: run_conversation.apply_async((conversation_id,), queue=queue_name))


def post_message(conversation: Conversation, content: Any, *, agent: Any = None) -> Conversation:
    """Queue one playground turn. `ConversationBusyError` unless it is `waiting_for_user`;
    `ConversationInputError` for a bad message; `ConversationLimitError` when the project already runs
    its maximum of conversations."""
    if conversation.mode != Conversation.Mode.PLAYGROUND:
        raise ConversationBusyError("a scripted conversation takes no messages")
    names = conversation.agent_names
    if names and agent is None:
        agent = names[0]
    problem = _check_message(content, agent, names)
    if problem is not None:
        raise ConversationInputError(
            [{"field": "content" if "message" in problem else "agent", "message": problem}]
        )
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
        conv.script = [*conv.script, {"agent": agent if names else None, "content": content}]
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
    with transaction.atomic():
        conv = Conversation.objects.select_for_update().get(pk=conversation.pk)
        if conv.status in (Conversation.Status.QUEUED, Conversation.Status.WAITING_FOR_USER):
            conv.status = Conversation.Status.CANCELLED
            conv.reason = "cancelled before the next turn started"
            conv.finished_at = now
        elif conv.status == Conversation.Status.RUNNING:
            conv.cancel_requested = True
        conv.updated_at = now
        conv.save()
    return conv


# --------------------------------------------------------------------------------------------------
# The worker side


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
        providers: dict[str, Any] = {SCRIPTED: scenario.provider()}
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
        return _Engine(rt, None, pool, store)
    if conv.state:
        chat = rt.chat(state=conv.state)
    else:
        chat = rt.chat(system=cfg.get("system"), run_id=conv.run_id)
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
        log.exception("conversation %s failed", conversation_id)
        status, reason = Conversation.Status.FAILED, f"{type(exc).__name__}: {exc}"
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


def _run_turns(
    conv: Conversation, engine: _Engine, lease: _Lease, loop: asyncio.AbstractEventLoop, owner: str
) -> tuple[str | None, str]:
    max_turns = int(settings.ARCANA_MAX_TURNS_PER_CONVERSATION)
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
        conv.refresh_from_db(fields=["script", "cursor", "cancel_requested", "status", "lease_owner"])
        if conv.lease_owner != owner or conv.status != Conversation.Status.RUNNING:
            return None, ""  # the sweeper gave the work to someone else, or it was cancelled
        if conv.cancel_requested or lease.cancelled.is_set():
            return Conversation.Status.CANCELLED, "cancelled by a user"
        if conv.cursor >= len(conv.script):
            if conv.mode == Conversation.Mode.PLAYGROUND:
                return Conversation.Status.WAITING_FOR_USER, ""
            return Conversation.Status.COMPLETED, ""
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
    Conversation.objects.filter(pk=conv.pk, lease_owner=owner).update(**fields)


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


# --------------------------------------------------------------------------------------------------
# The in-process sink


class StoreSink:
    """Streams the runtime's events into the store as they happen.

    The runtime calls sinks from inside its event loop, where Django's ORM must not block, so
    `write()` only enqueues; one writer thread ingests whatever has queued up, waiting up to `linger`
    seconds after an event for the rest of its step (one transaction per batch: a step's handful of
    events costs one ingest call instead of one each, and pages still see them well within a second).
    `flush()` waits until everything written so far is stored (and raises if a batch failed);
    `close()` drains the queue and waits for the writer.
    """

    def __init__(self, project: Project, *, max_batch: int = 500, linger: float = 0.05) -> None:
        self.project = project
        self.max_batch = max_batch
        self.linger = linger
        self.accepted = 0
        self.duplicates = 0
        self.rejected = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="arcana-store-sink", daemon=True)
        self._thread.start()

    def write(self, event: TraceEvent) -> None:
        self._queue.put(event.to_dict())

    def flush(self) -> None:
        self._queue.join()
        if self.error is not None:
            raise RuntimeError(f"storing the conversation's events failed: {self.error}") from self.error

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _drain(self) -> None:
        try:
            done = False
            while not done:
                batch: list[dict[str, Any]] = []
                taken = 0
                item = self._queue.get()
                taken += 1
                deadline = time.monotonic() + self.linger
                while True:
                    if item is None:
                        done = True
                        break
                    batch.append(item)
                    if len(batch) >= self.max_batch:
                        break
                    try:
                        item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                        taken += 1
                    except queue.Empty:
                        break
                try:
                    if batch:
                        result = ingest.ingest_events(self.project, batch, source="worker")
                        self.accepted += result.accepted
                        self.duplicates += result.duplicates
                        self.rejected += result.rejected
                except Exception as exc:  # keep draining; flush() reports it
                    log.exception("storing %d events failed", len(batch))
                    self.error = exc
                finally:
                    for _ in range(taken):
                        self._queue.task_done()
        finally:
            # This thread opened its own database connection; give it back.
            db.connection.close()


def run_demo_conversation(project: Project) -> dict[str, Any]:
    """Play the runtime's scripted demo (a chat with pins, compression and recall, and a pool of two
    agents) and stream its events into `project`. Returns the run ids and ingest counts."""
    store = StoreSink(project)
    try:
        summary = asyncio.run(run_demo(None, trace_sinks=[JsonlFileSink(settings.ARCANA_TRACE_DIR), store]))
    finally:
        store.close()
    return {
        "chat_run_id": summary["chat"]["run_id"],
        "pool_run_id": summary["pool"]["run_id"],
        "accepted": store.accepted,
        "rejected": store.rejected,
    }
