"""The input of a reconstruction: a run as the model calls it made, in the OpenTelemetry GenAI
"parts" form (`gen_ai.input.messages` / `gen_ai.output.messages` / `gen_ai.system_instructions`).

The dict shapes are `TypedDict`s (what a decoder hands over, what a JSON file holds); the parsed
shapes are frozen dataclasses that keep every part as it came (a part type we do not know is kept
as it is and still matched, by its JSON).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from ..errors import TraceFormatError

__all__ = [
    "Message",
    "MessageDict",
    "ModelCall",
    "ModelCallDict",
    "PartDict",
    "TextPartDict",
    "ToolCallPartDict",
    "ToolCallResponsePartDict",
    "calls_from_dicts",
]

Role = Literal["system", "user", "assistant", "tool"]


class TextPartDict(TypedDict):
    type: Literal["text"]
    content: str


class ToolCallPartDict(TypedDict):
    type: Literal["tool_call"]
    id: NotRequired[str | None]
    name: str
    arguments: NotRequired[Any]  # a JSON text or the decoded value


class ToolCallResponsePartDict(TypedDict):
    type: Literal["tool_call_response"]
    id: NotRequired[str | None]
    name: NotRequired[str | None]
    result: NotRequired[Any]  # a text or any JSON value


#: Any part: the three above, or another type (`reasoning`, `blob`, `uri`, …) kept as it is.
PartDict = Mapping[str, Any]


class MessageDict(TypedDict):
    role: str
    parts: list[PartDict]


class ModelCallDict(TypedDict):
    id: str
    input_messages: list[MessageDict]
    output_messages: NotRequired[list[MessageDict]]
    system_instructions: NotRequired[list[PartDict] | None]
    input_tokens: NotRequired[int | None]
    output_tokens: NotRequired[int | None]
    context_window: NotRequired[int | None]
    agent: NotRequired[str | None]


@dataclass(frozen=True)
class Message:
    """One message: its role and its parts, each a mapping as received.

    >>> Message.from_dict({"role": "user", "parts": [{"type": "text", "content": "hi"}]}).text()
    'hi'
    >>> Message.from_dict({"role": "user", "content": "plain"}).parts
    ({'type': 'text', 'content': 'plain'},)
    """

    role: str
    parts: tuple[PartDict, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        """A message from its parts form. A plain `content` string (the Chat Completions form) is
        read as one text part, so hand-written inputs stay short."""
        if not isinstance(d, Mapping):
            raise TraceFormatError(f"a message must be an object, got {type(d).__name__}")
        role = d.get("role")
        if not isinstance(role, str) or not role:
            raise TraceFormatError(f"a message needs a role, got {role!r}")
        parts = d.get("parts")
        if parts is None:
            content = d.get("content")
            parts = [] if content is None else [{"type": "text", "content": str(content)}]
        if not isinstance(parts, list | tuple):
            raise TraceFormatError(f"a message's parts must be a list, got {type(parts).__name__}")
        for part in parts:
            if part.__class__ is not dict and not isinstance(part, Mapping):
                raise TraceFormatError(f"a part must be an object, got {type(part).__name__}")
        return cls(role, tuple(parts))

    def text(self) -> str:
        """The text parts joined by newlines (tool calls and results left out)."""
        return "\n".join(str(p.get("content") or "") for p in self.parts if p.get("type") == "text")

    def to_dict(self) -> MessageDict:
        return {"role": self.role, "parts": [dict(p) for p in self.parts]}


@dataclass(frozen=True)
class ModelCall:
    """One model call of a run: what it received (`system_instructions`, `input_messages`), what it
    answered (`output_messages`), and the figures the span gave, when it gave them."""

    id: str
    input_messages: tuple[Message, ...]
    output_messages: tuple[Message, ...] = ()
    system_instructions: tuple[PartDict, ...] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    context_window: int | None = None
    agent: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelCall:
        """A call from its dict shape (`ModelCallDict`); raises `TraceFormatError` on a wrong shape."""
        if not isinstance(d, Mapping):
            raise TraceFormatError(f"a model call must be an object, got {type(d).__name__}")
        call_id = d.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise TraceFormatError(f"a model call needs a string id, got {call_id!r}")
        instructions = d.get("system_instructions")
        if instructions is not None:
            if not isinstance(instructions, list | tuple) or not all(
                isinstance(p, Mapping) for p in instructions
            ):
                raise TraceFormatError(f"call {call_id}: system_instructions must be a list of parts")
            instructions = tuple(instructions)
        agent = d.get("agent")
        return cls(
            id=call_id,
            input_messages=_messages(call_id, "input_messages", d.get("input_messages")),
            output_messages=_messages(call_id, "output_messages", d.get("output_messages")),
            system_instructions=instructions or None,
            input_tokens=_count(call_id, "input_tokens", d.get("input_tokens")),
            output_tokens=_count(call_id, "output_tokens", d.get("output_tokens")),
            context_window=_count(call_id, "context_window", d.get("context_window")),
            agent=str(agent) if agent is not None else None,
        )

    def to_dict(self) -> ModelCallDict:
        d: ModelCallDict = {
            "id": self.id,
            "input_messages": [m.to_dict() for m in self.input_messages],
            "output_messages": [m.to_dict() for m in self.output_messages],
        }
        if self.system_instructions is not None:
            d["system_instructions"] = [dict(p) for p in self.system_instructions]
        for key in ("input_tokens", "output_tokens", "context_window", "agent"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        return d


def calls_from_dicts(calls: Iterable[Mapping[str, Any] | ModelCall]) -> list[ModelCall]:
    """`ModelCall`s from plain dicts (or calls already parsed), in the order given (a run's calls
    ordered by end time). Call ids must be unique."""
    out = [c if isinstance(c, ModelCall) else ModelCall.from_dict(c) for c in calls]
    seen: set[str] = set()
    for c in out:
        if c.id in seen:
            raise TraceFormatError(f"model call id {c.id!r} appears twice")
        seen.add(c.id)
    return out


def _messages(call_id: str, key: str, value: Any) -> tuple[Message, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise TraceFormatError(f"call {call_id}: {key} must be a list of messages")
    try:
        return tuple(Message.from_dict(m) for m in value)
    except TraceFormatError as exc:
        raise TraceFormatError(f"call {call_id}: {key}: {exc}") from None


def _count(call_id: str, key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TraceFormatError(f"call {call_id}: {key} must be an integer, got {value!r}")
    try:
        n = int(value)  # OTLP JSON writes 64-bit integers as strings
    except ValueError:
        raise TraceFormatError(f"call {call_id}: {key} must be an integer, got {value!r}") from None
    if n < 0:
        raise TraceFormatError(f"call {call_id}: {key} must be >= 0, got {n}")
    return n
