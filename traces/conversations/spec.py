"""Checking a request to start a conversation: one set of rules for the API and the new-run form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from runtime.facts import TAGS_MAX, bad_tags, clean_name, clean_tags
from runtime.scenarios import Scenario, get_scenario
from traces.conversations.providers import PRIMITIVES, SCRIPTED, available_providers
from traces.ingest.validation import value_problem

MAX_MESSAGE_CHARS = 100_000
MAX_SYSTEM_CHARS = 20_000
MAX_AGENTS = 8


class ConversationInputError(ValueError):
    """Bad input for a conversation; `detail` is `[{"field", "message"}]` (the API's error shape)."""

    def __init__(self, detail: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{d['field']}: {d['message']}" for d in detail))
        self.detail = detail


class ConversationBusyError(Exception):
    """The conversation cannot take a message now (a turn is running, or it has finished): 409."""


class ConversationTooLarge(ConversationInputError):
    """A conversation's messages would hold more than `ARCANA_MAX_CONVERSATION_BYTES`: 413 in the API
    (a form, which catches `ConversationInputError`, shows it as any bad input)."""

    def __init__(self, limit: int, field: str = "script") -> None:
        self.message = (
            f"the conversation's messages would be larger than the {limit:,}-byte limit "
            "(ARCANA_MAX_CONVERSATION_BYTES); send less"
        )
        super().__init__([{"field": field, "message": self.message}])
        self.limit = limit


def max_conversation_bytes() -> int:
    return int(settings.ARCANA_MAX_CONVERSATION_BYTES)


def script_bytes(script: Sequence[Mapping[str, Any]]) -> int:
    """The bytes (UTF-8) of a checked script's messages."""
    return sum(len(str(m.get("content") or "").encode("utf-8", "replace")) for m in script)


class ConversationLimitError(Exception):
    """An operator limit refuses the request (concurrent conversations of a project): 429, with
    `retry_after` seconds for its `Retry-After` (a hint: a slot frees when a running conversation
    finishes, which no one can foretell; a turn takes seconds)."""

    retry_after = 30


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
    name: str = ""  # the run's name and tags (`chat(name=…, tags=…)`: written into its trace)
    tags: list[str] = field(default_factory=list)

    def config(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "cognitive_primitives": self.cognitive_primitives,
            "context_window": self.context_window,
            "pin_budget_fraction": self.pin_budget_fraction,
            "prompt_snapshots": self.prompt_snapshots,
            "agents": self.agents,
            "name": self.name,
            "tags": self.tags,
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
    "name",
    "tags",
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
    out)}]`); `name` (str or null) and `tags` (a list of tags, or null): the run's, written into its
    trace (`runtime.facts.run_labels`). Every problem is reported, not just the first."""
    errors: list[dict[str, str]] = []

    def bad(name: str, message: str) -> None:
        errors.append({"field": name, "message": message})

    if not isinstance(data, Mapping):
        raise ConversationInputError([{"field": "body", "message": "must be a JSON object"}])
    # The API's decoder refused these already; the new-run form's data gets the same rules here.
    problem = value_problem(dict(data))
    if problem is not None:
        raise ConversationInputError([{"field": problem[0] or "body", "message": problem[1]}])
    unknown = sorted(set(data) - set(REQUEST_FIELDS))
    if unknown:
        bad("body", f"unknown fields: {', '.join(map(str, unknown))}")

    provider, model, scenario = _check_provider(data.get("provider", SCRIPTED), data.get("model"), bad)

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

    window, fraction, snapshots = _check_numbers(data, bad)

    agents = _check_agents(data.get("agents"), bad)
    names = [a["name"] for a in agents] if agents else []
    script = _check_script(data.get("script"), names, bad)

    name, tags = _check_labels(data.get("name"), data.get("tags"), bad)

    if errors:
        raise ConversationInputError(errors)
    if script is not None and script_bytes(script) > max_conversation_bytes():
        raise ConversationTooLarge(max_conversation_bytes())
    return ConversationSpec(
        name=name,
        tags=tags,
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


def _check_numbers(data: Mapping[str, Any], bad: Any) -> tuple[int | None, float, bool]:
    """`context_window`, `pin_budget_fraction` and `prompt_snapshots`, each its default when bad
    (and reported)."""
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
    return window, float(fraction), snapshots


def _check_labels(name: Any, tags: Any, bad: Any) -> tuple[str, list[str]]:
    """The run's name and tags (`runtime.facts`' rule, as for `chat(name=…, tags=…)`)."""
    if name is not None and not isinstance(name, str):
        bad("name", "must be a string or null")
    for problem in bad_tags(tags) if tags is not None else []:
        bad("tags", problem)
    return clean_name(name), clean_tags(tags)[:TAGS_MAX] if tags is not None else []


def _check_provider(provider: Any, model: Any, bad: Any) -> tuple[str, str, Scenario | None]:
    """A provider and model `available_providers()` offers (the model defaults to the provider's
    first), and the scenario when the provider is `scripted`."""
    choices = {c["name"]: c for c in available_providers()}
    if not isinstance(provider, str) or provider not in choices:
        bad("provider", f"unknown provider {provider!r}; configured: {', '.join(choices)}")
        return "", "", None
    offered = choices[provider]["models"]
    if model is None:
        model = choices[provider]["default_model"]
    if not isinstance(model, str) or model not in offered:
        bad("model", f"unknown model {model!r} for {provider!r}; offered: {', '.join(offered)}")
        return provider, "", None
    return provider, model, get_scenario(model) if provider == SCRIPTED else None


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
    turns = int(settings.ARCANA_MAX_TURNS_PER_CONVERSATION)
    if len(value) > turns:  # a script of 10,000 messages is not read: it would stop at the limit
        bad(
            "script",
            f"at most {turns} messages: a conversation stops at {turns} turns (ARCANA_MAX_TURNS_PER_CONVERSATION)",
        )
        return None
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        agent: Any = None
        content: Any = item
        if isinstance(item, Mapping):
            agent, content = item.get("agent"), item.get("content")
        message = check_message(content, agent, agents)
        if message is not None:
            bad(f"script[{i}]", message)
            continue
        out.append({"agent": agent if agents else None, "content": content})
    return out


def check_message(content: Any, agent: Any, agents: Sequence[str]) -> str | None:
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
