"""Short builders for hand-written runs in the parts form, and a compact view of a call's states."""

from __future__ import annotations

from typing import Any

from runtime.reconstruct import CallReconstruction, Reconstruction


def text(role: str, *contents: str) -> dict[str, Any]:
    """A message of one text part per content (several contents: a message split into parts)."""
    return {"role": role, "parts": [{"type": "text", "content": c} for c in contents]}


def system(content: str) -> dict[str, Any]:
    return text("system", content)


def user(*contents: str) -> dict[str, Any]:
    return text("user", *contents)


def assistant(*contents: str) -> dict[str, Any]:
    return text("assistant", *contents)


def tool_call(
    name: str, arguments: Any, call_id: str = "call_1", content: str | None = None
) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if content:
        parts.append({"type": "text", "content": content})
    parts.append({"type": "tool_call", "id": call_id, "name": name, "arguments": arguments})
    return {"role": "assistant", "parts": parts}


def tool_result(result: Any, call_id: str = "call_1", name: str | None = None) -> dict[str, Any]:
    """The Chat Completions convention: a `tool` message."""
    part: dict[str, Any] = {"type": "tool_call_response", "id": call_id, "result": result}
    if name:
        part["name"] = name
    return {"role": "tool", "parts": [part]}


def user_tool_result(result: Any, call_id: str = "call_1", name: str = "fetch") -> dict[str, Any]:
    """The Pydantic AI convention: a `user` message with a `tool_call_response` part."""
    return {
        "role": "user",
        "parts": [{"type": "tool_call_response", "id": call_id, "name": name, "result": result}],
    }


def call(
    call_id: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"id": call_id, "input_messages": inputs, "output_messages": outputs or [], **extra}


def view(c: CallReconstruction) -> list[tuple[str, str, int | None]]:
    """(message id, status, position) of each state, in history order."""
    return [(s.message_id, s.status, s.position) for s in c.states]


def statuses(r: Reconstruction, call_id: str) -> dict[str, str]:
    return {s.message_id: s.status for s in r.call(call_id).states}


def ids_of(r: Reconstruction, text_start: str) -> list[str]:
    """The ids of the messages whose text starts with `text_start`."""
    return [m.message_id for m in r.messages if m.text.startswith(text_start)]


def one_id(r: Reconstruction, text_start: str) -> str:
    found = ids_of(r, text_start)
    assert len(found) == 1, (text_start, found)
    return found[0]
