"""Cognitive primitives: `recall`, `pin` and `unpin`, serviced by the runtime for the model.

The seed (`cognitive-primitives.md`) is the specification. In short:

* Opt-in. Schemas are offered only for enabled primitives; with none enabled nothing changes at all.
* The runtime intercepts calls to these names before tool dispatch and answers with a JSON tool
  result. Every failure is a structured result; the runtime never raises, never injects a message,
  never calls a primitive itself, never hints, never auto-unpins, never truncates a pin.
* Turns are the session's 1-based conversational turns (one `send()` each), the same numbers the
  trace carries in `metadata.turn`.

`CognitiveHandler` holds one session's (or one pool agent's) `PinState` and recall log. Its history
comes from two lookups the session provides: the live history first, then the session's trace (via
`TraceReader`, the product's one trace parser) for turns that are not in memory.

    >>> handler = CognitiveHandler(["recall", "pin"], counter=default_counter(), context_window=8000)
    >>> [s["function"]["name"] for s in handler.schemas()]
    ['recall', 'pin', 'unpin']
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ._config import ALL_PRIMITIVE_TOOL_NAMES, normalize_primitives, pin_cap, primitive_tool_names
from ._tokens import TokenCounter
from ._tools import json_schema_type
from ._working_set import PinBlock, render_pin

__all__ = [
    "INCLUDE_VALUES",
    "CognitiveHandler",
    "PinEntry",
    "PinState",
    "PrimitiveOutcome",
    "RecallRecord",
    "primitive_schemas",
]

INCLUDE_VALUES: tuple[str, ...] = ("all", "assistant_only", "tool_calls")

_SCHEMAS: dict[str, dict[str, Any]] = {
    "recall": {
        "type": "function",
        "function": {
            "name": "recall",
            "description": (
                "Retrieve the full original messages of an earlier turn of this conversation, bypassing "
                "any working-set compression. Turns are numbered from 1 (the first user message and "
                "everything it caused). Returns {turn, found, messages, note}; when found is false, "
                "note says why."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "turn": {"type": "integer", "description": "Turn number (1-indexed) to recall."},
                    "include": {
                        "type": "string",
                        "enum": list(INCLUDE_VALUES),
                        "description": (
                            "Which messages of that turn: all (default), assistant_only, or tool_calls "
                            "(assistant messages that called tools, and the tool results)."
                        ),
                    },
                },
                "required": ["turn"],
            },
        },
    },
    "pin": {
        "type": "function",
        "function": {
            "name": "pin",
            "description": (
                "Keep content at full fidelity in every later working set, as its own block, until you "
                "unpin it or until_turn passes. Pinned tokens are capped; over the cap the call is "
                "refused with a diagnosis. Pinning the same content again returns the existing pin_id."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "Exact content to pin at full fidelity."},
                    "label": {"type": "string", "description": "Optional readable label for the pin."},
                    "until_turn": {
                        "type": "integer",
                        "description": "Keep the pin through this turn, not after. Omit for the whole session.",
                    },
                },
                "required": ["content"],
            },
        },
    },
    "unpin": {
        "type": "function",
        "function": {
            "name": "unpin",
            "description": "Remove a pin by the pin_id that pin returned; its content stops being kept.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pin_id": {"type": "string", "description": "The pin_id returned by a prior pin call."}
                },
                "required": ["pin_id"],
            },
        },
    },
}


def primitive_schemas(enabled: Sequence[str]) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas for the enabled primitives ("pin" brings "unpin"), fresh copies."""
    return [json.loads(json.dumps(_SCHEMAS[name])) for name in primitive_tool_names(enabled)]


@dataclass
class PinEntry:
    """One pin, kept for the whole session even after it expires or is unpinned (its history)."""

    pin_id: str
    content: str
    label: str | None
    until_turn: int | None
    created_turn: int
    created_step: int
    tokens: int
    sha256: str
    unpinned_turn: int | None = None
    unpinned_step: int | None = None

    def is_active_at(self, turn: int) -> bool:
        """Rendered in working sets of `turn`: not unpinned, and `until_turn` not passed."""
        return (
            self.unpinned_turn is None
            and self.created_turn <= turn
            and (self.until_turn is None or turn <= self.until_turn)
        )

    def block(self) -> PinBlock:
        return PinBlock(pin_id=self.pin_id, label=self.label, content=self.content)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PinEntry:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


@dataclass
class PinState:
    """Every pin of one session or pool agent, in creation order."""

    entries: list[PinEntry] = field(default_factory=list)

    def active(self, turn: int) -> list[PinEntry]:
        return [e for e in self.entries if e.is_active_at(turn)]

    def blocks(self, turn: int) -> list[PinBlock]:
        """The blocks the working set of `turn` must carry, in creation order."""
        return [e.block() for e in self.active(turn)]

    def active_tokens(self, turn: int) -> int:
        return sum(e.tokens for e in self.active(turn))

    def get(self, pin_id: str) -> PinEntry | None:
        return next((e for e in self.entries if e.pin_id == pin_id), None)

    def to_list(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.entries]

    @classmethod
    def from_list(cls, items: Sequence[Mapping[str, Any]]) -> PinState:
        return cls([PinEntry.from_dict(i) for i in items])


@dataclass
class RecallRecord:
    """One recall call, as logged per session / pool agent."""

    turn: int
    step: int
    requested_turn: int | None
    include: str | None
    found: bool
    source: str | None  # "history", "trace", or None when nothing was found
    message_count: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PrimitiveOutcome:
    """What one intercepted call produced: the result object, the tool-message text, trace facts."""

    primitive: str
    args: dict[str, Any]
    result: dict[str, Any]
    tokens: int | None = None
    raw_arguments: str | None = None  # set only when the arguments were not a JSON object

    @property
    def content(self) -> str:
        """The tool message content the model receives (exactly what the trace rebuild produces)."""
        return json.dumps(self.result, ensure_ascii=False)


#: Looks up the messages of a 1-based turn; returns None when it does not hold that turn.
TurnLookup = Callable[[int], "list[dict[str, Any]] | None"]


class _InvalidArguments(Exception):
    pass


class CognitiveHandler:
    """Services `recall`, `pin` and `unpin` for one session or one pool agent.

    `memory(turn)` returns that turn's messages from the live history (None if not in memory);
    `trace(turn)` returns them rebuilt from the session's trace (None if unavailable). Only enabled
    primitives are serviced; the others get a structured "not enabled" result."""

    def __init__(
        self,
        enabled: Sequence[str],
        *,
        counter: TokenCounter,
        context_window: int,
        pin_budget_fraction: float = 0.5,
        memory: TurnLookup | None = None,
        trace: TurnLookup | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.enabled: tuple[str, ...] = normalize_primitives(enabled)
        self.tool_names: tuple[str, ...] = primitive_tool_names(self.enabled)
        self.counter = counter
        self.context_window = context_window
        self.pin_budget_fraction = pin_budget_fraction
        self.memory = memory
        self.trace = trace
        self.id_factory = id_factory
        self.pins = PinState()
        self.recall_log: list[RecallRecord] = []

    # -- what the model sees -------------------------------------------------------------------
    @property
    def cap(self) -> int:
        """The pin budget: `int(context_window * pin_budget_fraction)` tokens, exact (see `pin_cap`)."""
        return pin_cap(self.context_window, self.pin_budget_fraction)

    def schemas(self) -> list[dict[str, Any]]:
        return primitive_schemas(self.enabled)

    def intercepts(self, name: str) -> bool:
        """True for every primitive name, enabled or not (a disabled one gets "not enabled")."""
        return name in ALL_PRIMITIVE_TOOL_NAMES

    def pin_blocks(self, turn: int) -> list[PinBlock]:
        return self.pins.blocks(turn)

    # -- dispatch ------------------------------------------------------------------------------
    def handle(self, name: str, raw_arguments: str, *, turn: int, step: int) -> PrimitiveOutcome:
        """Service one call made during step `step` of turn `turn` (the current, unfinished turn)."""
        args, raw = _parse_args(raw_arguments)
        if name not in self.tool_names:
            enabled = ", ".join(self.tool_names) or "none"
            result = {
                "error": "not_enabled",
                "detail": f"the '{name}' primitive is not enabled for this session (enabled: {enabled})",
            }
            return PrimitiveOutcome(name, args or {}, result, raw_arguments=raw)
        if args is None:
            result = {"error": "invalid_arguments", "detail": raw_error(raw_arguments)}
            return PrimitiveOutcome(name, {}, result, raw_arguments=raw)
        try:
            if name == "recall":
                return self._recall(args, turn=turn, step=step)
            if name == "pin":
                return self._pin(args, turn=turn, step=step)
            return self._unpin(args, turn=turn, step=step)
        except _InvalidArguments as exc:
            return PrimitiveOutcome(name, args, {"error": "invalid_arguments", "detail": str(exc)})

    # -- recall --------------------------------------------------------------------------------
    def _recall(self, args: dict[str, Any], *, turn: int, step: int) -> PrimitiveOutcome:
        _no_unknown(args, {"turn", "include"})
        wanted = _require_int(args, "turn")
        include = args.get("include", "all")
        if include is None:
            include = "all"
        if not isinstance(include, str) or include not in INCLUDE_VALUES:
            raise _InvalidArguments(
                f"include must be one of {', '.join(INCLUDE_VALUES)}; received: {json.dumps(include)}"
            )

        def done(
            found: bool, messages: list[dict[str, Any]], note: str | None, source: str | None
        ) -> PrimitiveOutcome:
            self.recall_log.append(RecallRecord(turn, step, wanted, include, found, source, len(messages)))
            result = {"turn": wanted, "found": found, "messages": messages, "note": note}
            return PrimitiveOutcome("recall", args, result)

        if wanted < 1:
            return done(
                False, [], f"turn must be 1 or greater (turns are 1-indexed). received: {wanted}", None
            )
        last_completed = turn - 1
        if wanted > turn:
            return done(False, [], f"turn out of range: {wanted}, max={last_completed}", None)
        messages = self.memory(wanted) if self.memory is not None else None
        source = "history"
        if messages is None:
            messages = self.trace(wanted) if self.trace is not None else None
            source = "trace"
        if messages is None:
            return done(
                False,
                [],
                f"trace not available for turn {wanted}: it is no longer in this session's in-memory "
                "history and no trace of this session could be read",
                None,
            )
        selected = _filter(messages, include)
        notes: list[str] = []
        if wanted == turn:
            notes.append(
                f"turn {wanted} is the current turn and has not finished; these are its messages so far"
            )
        if messages and not selected:
            notes.append(f"turn {wanted} has no messages matching include={include!r}")
        return done(True, selected, "; ".join(notes) or None, source)

    # -- pin -----------------------------------------------------------------------------------
    def _pin(self, args: dict[str, Any], *, turn: int, step: int) -> PrimitiveOutcome:
        _no_unknown(args, {"content", "label", "until_turn"})
        if "content" not in args:
            raise _InvalidArguments("missing required argument 'content' (string)")
        content = args["content"]
        if not isinstance(content, str):
            raise _InvalidArguments(f"'content' must be a string, got {json_schema_type(content)}")
        label = args.get("label")
        if label is not None and not isinstance(label, str):
            raise _InvalidArguments(f"'label' must be a string or null, got {json_schema_type(label)}")
        until_turn = args.get("until_turn")
        if until_turn is not None:
            until_turn = _require_int(args, "until_turn")
            if until_turn < turn:
                raise _InvalidArguments(
                    f"until_turn must be the current turn ({turn}) or later; received: {until_turn}"
                )
        if not content.strip():
            result = {
                "pinned": False,
                "reason": "empty_content",
                "suggestion": "pass non-empty content to pin.",
            }
            return PrimitiveOutcome("pin", args, result)
        sha = hashlib.sha256(content.encode("utf-8")).hexdigest()
        # Idempotency only among active pins: expired or unpinned content pins afresh.
        existing = next((e for e in self.pins.active(turn) if e.sha256 == sha), None)
        if existing is not None:
            result = {
                "pinned": True,
                "pin_id": existing.pin_id,
                "label": existing.label,
                "until_turn": existing.until_turn,
                "already_pinned": True,
            }
            return PrimitiveOutcome("pin", args, result, tokens=existing.tokens)
        pin_id = self._new_pin_id()
        # Counted exactly as the builder counts the rendered block (same render, same counter).
        requested = self.counter.count_message(
            render_pin(PinBlock(pin_id=pin_id, label=label, content=content))
        )
        current = self.pins.active_tokens(turn)
        if current + requested > self.cap:
            active = ", ".join(
                f"{e.pin_id} label={e.label!r} {e.tokens} tokens" for e in self.pins.active(turn)
            )
            result = {
                "pinned": False,
                "reason": "pin_budget_exceeded",
                "current_pin_tokens": current,
                "requested_tokens": requested,
                "cap": self.cap,
                "suggestion": (
                    f"unpin older content (active pins: {active or 'none'}) or pin a shorter excerpt."
                ),
            }
            return PrimitiveOutcome("pin", args, result, tokens=requested)
        self.pins.entries.append(PinEntry(pin_id, content, label, until_turn, turn, step, requested, sha))
        result = {
            "pinned": True,
            "pin_id": pin_id,
            "label": label,
            "until_turn": until_turn,
            "already_pinned": False,
        }
        return PrimitiveOutcome("pin", args, result, tokens=requested)

    def _new_pin_id(self) -> str:
        taken = {e.pin_id for e in self.pins.entries}
        while True:
            pin_id = self.id_factory() if self.id_factory is not None else "p_" + secrets.token_hex(4)
            if pin_id not in taken:
                return pin_id

    # -- unpin ---------------------------------------------------------------------------------
    def _unpin(self, args: dict[str, Any], *, turn: int, step: int) -> PrimitiveOutcome:
        _no_unknown(args, {"pin_id"})
        pin_id = args.get("pin_id")
        if not isinstance(pin_id, str):
            raise _InvalidArguments(
                "missing required argument 'pin_id' (string)"
                if pin_id is None
                else f"'pin_id' must be a string, got {json_schema_type(pin_id)}"
            )
        entry = self.pins.get(pin_id)
        if entry is None:
            note = "unknown pin_id (already removed or never existed)"
        elif entry.unpinned_turn is not None:
            note = f"pin {pin_id} was already unpinned at turn {entry.unpinned_turn}"
        elif not entry.is_active_at(turn):
            note = f"pin {pin_id} already expired after turn {entry.until_turn} (until_turn)"
        else:
            entry.unpinned_turn = turn
            entry.unpinned_step = step
            return PrimitiveOutcome("unpin", args, {"unpinned": True, "pin_id": pin_id})
        return PrimitiveOutcome("unpin", args, {"unpinned": False, "pin_id": pin_id, "note": note})

    # -- state ---------------------------------------------------------------------------------
    def export_state(self) -> dict[str, Any]:
        return {
            "enabled": list(self.enabled),
            "pins": self.pins.to_list(),
            "recall_log": [r.to_dict() for r in self.recall_log],
        }

    def restore_state(self, data: Mapping[str, Any]) -> None:
        self.pins = PinState.from_list(data.get("pins") or [])
        self.recall_log = [RecallRecord(**r) for r in data.get("recall_log") or []]


def _parse_args(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed object, None) or (None, the raw text) when it is not a JSON object."""
    text = raw if isinstance(raw, str) else ""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None, text
    if not isinstance(value, dict):
        return None, text
    return value, None


def raw_error(raw: str) -> str:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON: {exc}"
    return f"arguments must be a JSON object, got {json_schema_type(value)}"


def _require_int(args: Mapping[str, Any], key: str) -> int:
    if key not in args or args[key] is None:
        raise _InvalidArguments(f"missing required argument '{key}' (integer)")
    value: object = args[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _InvalidArguments(
            f"'{key}' must be an integer, got {json_schema_type(value)} {json.dumps(value)}"
        )
    return value


def _no_unknown(args: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(args) - allowed)
    if unknown:
        raise _InvalidArguments(
            f"unexpected argument(s): {', '.join(unknown)} (accepted: {', '.join(sorted(allowed))})"
        )


def _filter(messages: list[dict[str, Any]], include: str) -> list[dict[str, Any]]:
    if include == "assistant_only":
        return [m for m in messages if m.get("role") == "assistant"]
    if include == "tool_calls":
        call_ids = {
            tc.get("id")
            for m in messages
            if m.get("role") == "assistant"
            for tc in (m.get("tool_calls") or [])
            if isinstance(tc, Mapping)
        }
        return [
            m
            for m in messages
            if (m.get("role") == "assistant" and m.get("tool_calls"))
            or (m.get("role") == "tool" and m.get("tool_call_id") in call_ids)
        ]
    return list(messages)
