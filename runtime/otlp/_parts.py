"""Messages in any shape -> the GenAI "parts" form: `{"role", "parts": [...], "finish_reason"?}`
with `text`, `tool_call` and `tool_call_response` parts (a part of any other type is kept as it
came). Every convention's messages end here: the parts form itself (checked, not rebuilt), the
OpenAI chat shape older conventions carry, and message content in any shape."""

from __future__ import annotations

import json
from typing import Any

from ._types import Message, Part


def messages_value(value: Any, default_role: str, where: str, unparsed: list[str]) -> list[Message]:
    """A message-list attribute (or event attribute): JSON text or already a structure."""
    if type(value) is str:
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            unparsed.append(where)
            return [{"role": "unknown", "parts": [{"type": "text", "content": value}], "unparsed": True}]
    if isinstance(value, dict):
        # One message, or {"messages": [...]}.
        inner = value.get("messages")
        value = inner if isinstance(inner, list) else [value]
    if not isinstance(value, list):
        return [{"role": default_role, "parts": content_parts(value)}]
    return [parts_message(m, default_role) for m in value]


def parts_message(m: Any, default_role: str) -> Message:
    """One message of a list: the parts form already (checked, not rebuilt), else the chat shape."""
    if not isinstance(m, dict):
        return {"role": default_role, "parts": content_parts(m)}
    parts = m.get("parts")
    if isinstance(parts, list) and "role" in m:
        # The parts form already: checked, not rebuilt (the common case, kept fast).
        for p in parts:
            if not (isinstance(p, dict) and type(p.get("type")) is str):
                fixed = [
                    q if isinstance(q, dict) and type(q.get("type")) is str else content_parts(q)[0]
                    for q in parts
                ]
                return {**m, "parts": fixed}  # type: ignore[typeddict-item]
        return m  # type: ignore[return-value]
    return chat_message(m, default_role)


def chat_message(m: dict[str, Any], default_role: str) -> Message:
    """A message in the OpenAI chat shape (`role`, `content`, `tool_calls`, `tool_call_id`,
    `function_call`), as older conventions carry it, into the parts form."""
    m = dict(m)
    role = m.pop("role", None)
    out: dict[str, Any] = {"role": role if type(role) is str and role else default_role}
    parts: list[Any] = []
    content = m.pop("content", None)
    tool_calls = m.pop("tool_calls", None)
    tool_call_id = m.pop("tool_call_id", None)
    if tool_call_id is None and out["role"] == "tool":
        tool_call_id = m.pop("id", None)
    if isinstance(m.get("parts"), list):
        parts.extend(m.pop("parts"))
    if tool_call_id is not None or out["role"] == "tool":
        response: dict[str, Any] = {"type": "tool_call_response", "id": tool_call_id}
        if "name" in m:
            response["name"] = m.pop("name")
        response["result"] = content
        parts.append(response)
    elif content is not None and not (content == "" and tool_calls):
        parts.extend(content_parts(content))
    if type(tool_calls) is str:
        try:
            tool_calls = json.loads(tool_calls)
        except (ValueError, RecursionError):
            tool_calls = [tool_calls]
    if isinstance(tool_calls, list):
        for call in tool_calls:
            parts.append(_tool_call_part(call))
    elif tool_calls is not None:
        parts.append(_tool_call_part(tool_calls))
    function_call = m.pop("function_call", None)
    if isinstance(function_call, dict):
        parts.append(
            {
                "type": "tool_call",
                "id": None,
                "name": function_call.get("name"),
                "arguments": function_call.get("arguments"),
            }
        )
    out["parts"] = parts
    for key, value in m.items():
        out.setdefault(key, value)
    return out  # type: ignore[return-value]


def _tool_call_part(call: Any) -> Part:
    if not isinstance(call, dict):
        return {"type": "tool_call", "id": None, "name": None, "arguments": call}
    call = dict(call)
    function = call.pop("function", None)
    call.pop("type", None)
    if isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name, arguments = call.pop("name", None), call.pop("arguments", None)
    out: dict[str, Any] = {
        "type": "tool_call",
        "id": call.pop("id", None),
        "name": name,
        "arguments": arguments,
    }
    for key, value in call.items():
        out.setdefault(key, value)
    return out  # type: ignore[return-value]


def content_parts(content: Any) -> list[Part]:
    """Message content in any shape -> parts: a string is one text part; a list holds parts (the
    OpenAI `{"type": "text", "text"}` content parts become text parts; others are kept)."""
    if type(content) is str:
        if content[:2] == "[{" and '"type"' in content:
            try:
                parsed = json.loads(content)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, list) and all(isinstance(p, dict) and "type" in p for p in parsed):
                return content_parts(parsed)
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        parts: list[Part] = []
        for p in content:
            if isinstance(p, dict):
                ptype = p.get("type")
                if ptype == "text" and "content" not in p and "text" in p:
                    q = dict(p)
                    q["content"] = q.pop("text")
                    parts.append(q)  # type: ignore[arg-type]
                elif type(ptype) is str:
                    parts.append(p)  # type: ignore[arg-type]
                elif "text" in p or "content" in p:
                    q = dict(p)
                    text = q.pop("text") if "text" in q else q.pop("content")
                    parts.append({"type": "text", "content": text} | q)  # type: ignore[arg-type]
                else:
                    parts.append({"type": "unknown", "content": p})
            elif type(p) is str:
                parts.append({"type": "text", "content": p})
            else:
                parts.append({"type": "unknown", "content": p})
        return parts
    if isinstance(content, dict):
        return content_parts([content])
    return [{"type": "unknown", "content": content}]


def parts_value(value: Any, where: str, unparsed: list[str]) -> list[Part]:
    """System instructions: a JSON list of parts, or a plain text (kept as one text part; that is
    an allowed form, not an unparsed one, unless it looks like JSON and is not)."""
    if type(value) is str:
        stripped = value.lstrip()
        if stripped[:1] in ("[", "{", '"'):
            try:
                parsed = json.loads(value)
            except (ValueError, RecursionError):
                unparsed.append(where)
                return [{"type": "text", "content": value}]
            return content_parts(parsed)
        return [{"type": "text", "content": value}]
    return content_parts(value)
