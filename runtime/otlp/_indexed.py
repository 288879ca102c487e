"""Indexed attributes, `<prefix>N.<field>`: the messages of OpenLLMetry (`gen_ai.prompt.N.*`,
`gen_ai.completion.N.*`) and of OpenInference (`llm.input_messages.N.message.*`,
`llm.output_messages.N.message.*`, with `tool_calls` and `contents`), and OpenInference's tool
definitions (`llm.tools.N.tool.json_schema`).

They are taken out of the span's attributes first (`group`), grouped by prefix then N; the groups
no reading used go back where they were (`restore`)."""

from __future__ import annotations

from typing import Any

from ._parts import content_parts
from ._types import Message, MessagesFormat
from ._values import json_or_text

_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.tools.",
)

Groups = dict[str, dict[int, dict[str, Any]]]  # prefix -> N -> field -> value


def group(rest: dict[str, Any]) -> Groups:
    """Take `<prefix>N.<field>` attributes out of `rest`, grouped by prefix then N (the OpenInference
    `message.` / `tool.`-less field names are kept as they are: `message.role`, `tool.json_schema`)."""
    groups: Groups = {}
    if not any(k.startswith(_PREFIXES) for k in rest):
        return groups
    for key in [k for k in rest if k.startswith(_PREFIXES)]:
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                break
        number, dot, field = key[len(prefix) :].partition(".")
        if not dot or not number.isascii() or not number.isdigit() or len(number) > 9:
            continue  # e.g. gen_ai.prompt.template: not indexed, stays where it is
        groups.setdefault(prefix, {}).setdefault(int(number), {})[field] = rest.pop(key)
    return groups


def messages(
    groups: Groups,
) -> tuple[MessagesFormat | None, list[Message] | None, list[Message] | None]:
    """(format, input, output) from the indexed messages, OpenLLMetry's before OpenInference's (the
    group used is taken out of `groups`); (None, None, None) when there are none."""
    if "gen_ai.prompt." in groups or "gen_ai.completion." in groups:
        return (
            "gen_ai.prompt",
            _messages(groups.pop("gen_ai.prompt.", {}), "gen_ai.prompt."),
            _messages(groups.pop("gen_ai.completion.", {}), "gen_ai.completion."),
        )
    if "llm.input_messages." in groups or "llm.output_messages." in groups:
        return (
            "openinference",
            _messages(groups.pop("llm.input_messages.", {}), "llm.input_messages."),
            _messages(groups.pop("llm.output_messages.", {}), "llm.output_messages."),
        )
    return None, None, None


def tool_definitions(
    rest: dict[str, Any], groups: Groups, found: list[Any] | None, unparsed: list[str]
) -> list[Any] | None:
    """OpenInference's `llm.tools.N.tool.json_schema` (JSON) as the tool definitions when `found`
    (`gen_ai.tool.definitions`) is None; their other fields, or all of them when `found` is not
    None, go back into `rest`. Returns the tool definitions."""
    tools = groups.pop("llm.tools.", None)
    if tools and found is None:
        found = []
        for n in sorted(tools):
            fields = tools[n]
            schema = fields.pop("tool.json_schema", None)
            for key in list(fields):
                rest[f"llm.tools.{n}.{key}"] = fields.pop(key)
            if schema is not None:
                found.append(json_or_text(schema, f"llm.tools.{n}.tool.json_schema", unparsed))
    elif tools:
        _restore_group(rest, "llm.tools.", tools)
    return found


def restore(rest: dict[str, Any], groups: Groups) -> None:
    """Indexed groups no reading used (a second message form) go back where they were."""
    for prefix, fields_by_n in groups.items():
        _restore_group(rest, prefix, fields_by_n)


def _restore_group(rest: dict[str, Any], prefix: str, fields_by_n: dict[int, dict[str, Any]]) -> None:
    for n, fields in fields_by_n.items():
        for key, value in fields.items():
            rest[f"{prefix}{n}.{key}"] = value


def _messages(fields_by_n: dict[int, dict[str, Any]], prefix: str) -> list[Message] | None:
    """Messages from `gen_ai.prompt.N.*` (OpenLLMetry) or `llm.input_messages.N.message.*`
    (OpenInference) fields; a field that is not part of the parts form (`name`, ...) stays on its
    message as it came."""
    if not fields_by_n:
        return None
    messages: list[Message] = []
    for n in sorted(fields_by_n):
        fields = fields_by_n[n]
        openinference = prefix.startswith("llm.")
        if openinference:
            fields = {k[8:] if k.startswith("message.") else k: v for k, v in fields.items()}
        role = fields.pop("role", None)
        message: dict[str, Any] = {"role": role if type(role) is str and role else "unknown"}
        parts: list[Any] = []
        tool_call_id = fields.pop("tool_call_id", None)
        content = fields.pop("content", None)
        contents = _subgroups(fields, "contents.")
        tool_calls = _subgroups(fields, "tool_calls.")
        if contents:
            for m in sorted(contents):
                c = contents[m]
                c = {k[16:] if k.startswith("message_content.") else k: v for k, v in c.items()}
                ctype = c.pop("type", None)
                if ctype == "text" or (ctype is None and "text" in c):
                    parts.append({"type": "text", "content": c.pop("text", "")} | c)
                else:
                    parts.append({"type": ctype or "unknown"} | c)
        elif content is not None:
            if message["role"] == "tool" or tool_call_id is not None:
                result: dict[str, Any] = {"type": "tool_call_response", "id": tool_call_id}
                name = fields.pop("name", None)
                if name is not None:
                    result["name"] = name
                result["result"] = content
                parts.append(result)
                tool_call_id = None
            elif not (content == "" and tool_calls):
                parts.extend(content_parts(content))
        for m in sorted(tool_calls):
            call = tool_calls[m]
            call = {k[10:] if k.startswith("tool_call.") else k: v for k, v in call.items()}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.pop("id", None),
                    "name": call.pop("function.name", call.pop("name", None)),
                    "arguments": call.pop("function.arguments", call.pop("arguments", None)),
                }
                | call
            )
        fn_name = fields.pop("function_call.name", None)
        if fn_name is not None:
            parts.append(
                {
                    "type": "tool_call",
                    "id": None,
                    "name": fn_name,
                    "arguments": fields.pop("function_call.arguments", None),
                }
            )
        if tool_call_id is not None:
            message["tool_call_id"] = tool_call_id
        message["parts"] = parts
        finish = fields.pop("finish_reason", None)
        if finish is not None:
            message["finish_reason"] = finish
        # Anything else about the message (name, ...) stays on it as it came.
        for key, value in fields.items():
            message.setdefault(key, value)
        messages.append(message)  # type: ignore[arg-type]
    return messages


def _subgroups(fields: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for key in [k for k in fields if k.startswith(prefix)]:
        number, dot, field = key[len(prefix) :].partition(".")
        if dot and number.isascii() and number.isdigit() and len(number) <= 9:
            out.setdefault(int(number), {})[field] = fields.pop(key)
    return out
