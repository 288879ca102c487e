"""The GenAI semantic conventions' span events: the per-message events of earlier versions
(`gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message`,
`gen_ai.choice`), those of the versions before them (`gen_ai.content.prompt` /
`gen_ai.content.completion` holding `gen_ai.prompt` / `gen_ai.completion`), and `exception`."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._parts import chat_message, messages_value, parts_message
from ._types import Event, Message
from ._values import json_or_text

_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_CONTENT_EVENTS = ("gen_ai.choice", "gen_ai.content.prompt", "gen_ai.content.completion")


class SpanEvents(NamedTuple):
    """A span's events, read: the messages they carry, the first `exception`, and the others."""

    input: list[Message]
    output: list[tuple[int, int, Message]]  # (choice index, event position, message)
    exception: dict[str, Any] | None
    other: list[Event]

    def output_messages(self) -> list[Message]:
        """The output messages in choice order (then event order)."""
        return [m for _, _, m in sorted(self.output, key=lambda t: (t[0], t[1]))]


def read_events(events: list[Event], unparsed: list[str]) -> SpanEvents:
    """Messages, exceptions, the rest: each event read once, in order."""
    event_input: list[Message] = []
    event_output: list[tuple[int, int, Message]] = []
    exception: dict[str, Any] | None = None
    other_events: list[Event] = []
    for position, event in enumerate(events):
        ename = event["name"]
        role = _MESSAGE_EVENTS.get(ename)
        if role is not None:
            event_input.append(_event_message(event, role, unparsed))
        elif ename == "gen_ai.choice":
            index = event["attributes"].get("index")
            event_output.append(
                (index if type(index) is int else position, position, _choice_message(event, unparsed))
            )
        elif ename == "gen_ai.content.prompt" and "gen_ai.prompt" in event["attributes"]:
            event_input.extend(
                messages_value(event["attributes"]["gen_ai.prompt"], "user", f"event:{ename}", unparsed)
            )
        elif ename == "gen_ai.content.completion" and "gen_ai.completion" in event["attributes"]:
            msgs = messages_value(
                event["attributes"]["gen_ai.completion"], "assistant", f"event:{ename}", unparsed
            )
            event_output.extend((len(event_output), position, m) for m in msgs)
        elif ename == "exception" and exception is None:
            exception = event["attributes"]
        else:
            other_events.append(event)
    return SpanEvents(event_input, event_output, exception, other_events)


def message_events(events: list[Event]) -> list[Event]:
    """The events of the message names, to keep when another form of the messages won."""
    return [e for e in events if e["name"] in _MESSAGE_EVENTS or e["name"] in _CONTENT_EVENTS]


def _event_message(event: Event, role: str, unparsed: list[str]) -> Message:
    """A `gen_ai.<role>.message` event: its attributes (`content`, `tool_calls`, `id`, `role`) are
    the message; some instrumentations put the whole body as JSON in one attribute."""
    attrs = event["attributes"]
    body = attrs.get("gen_ai.event.content", attrs.get("body"))
    fields: dict[str, Any] = {}
    if body is not None:
        parsed = json_or_text(body, f"event:{event['name']}", unparsed)
        fields = dict(parsed) if isinstance(parsed, dict) else {"content": parsed}
    for key, value in attrs.items():
        if key in ("gen_ai.event.content", "body", "gen_ai.system", "event.name"):
            continue
        fields.setdefault(key.removeprefix("gen_ai."), value)
    content = fields.get("content")
    if type(content) is str and content[:1] in ("[", "{"):
        parsed = json_or_text(content, f"event:{event['name']}", None)
        if isinstance(parsed, list | dict):
            fields["content"] = parsed
    fields.setdefault("role", role)
    return parts_message(fields, role) if "parts" in fields else chat_message(fields, role)


def _choice_message(event: Event, unparsed: list[str]) -> Message:
    attrs = event["attributes"]
    body = attrs.get("gen_ai.event.content", attrs.get("body"))
    fields: dict[str, Any] = {}
    if body is not None:
        parsed = json_or_text(body, "event:gen_ai.choice", unparsed)
        if isinstance(parsed, dict):
            fields = dict(parsed)
    for key, value in attrs.items():
        if key not in ("gen_ai.event.content", "body", "gen_ai.system", "event.name", "index"):
            fields.setdefault(key, value)
    message = fields.pop("message", None)
    if type(message) is str:
        message = json_or_text(message, "event:gen_ai.choice", unparsed)
    if not isinstance(message, dict):
        message = {k: fields.pop(k) for k in ("content", "tool_calls", "role") if k in fields}
    message = dict(message)
    message.setdefault("role", "assistant")
    finish = fields.pop("finish_reason", None)
    out = parts_message(message, "assistant") if "parts" in message else chat_message(message, "assistant")
    if finish is not None:
        out["finish_reason"] = finish
    for key, value in fields.items():
        out.setdefault(key, value)  # type: ignore[misc]
    return out
