"""One span read through the GenAI conventions in use, into one model (`NormalizedSpan`).

The one module that knows attribute names. It reads:

- the GenAI semantic conventions: `gen_ai.operation.name`; `gen_ai.input.messages`,
  `gen_ai.output.messages`, `gen_ai.system_instructions` (JSON, the "parts" form); the per-message
  span events of earlier versions (`gen_ai.system.message`, `gen_ai.user.message`,
  `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`) and of the versions before
  them (`gen_ai.content.prompt` / `gen_ai.content.completion` holding `gen_ai.prompt` /
  `gen_ai.completion`); the indexed `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` (OpenLLMetry);
  models, usage, tools, agents, errors, the conversation;
- OpenInference: `openinference.span.kind`, `llm.input_messages.N.message.*` /
  `llm.output_messages.N.message.*` (with `tool_calls` and `contents`), `llm.model_name`,
  `llm.token_count.*`, `llm.tools.N.tool.json_schema`, `tool.*`, `input.value` / `output.value` of
  TOOL spans, `agent.name`, `graph.node.*`, `session.id`;
- Pydantic AI's and openai-agents' particular names (`agent_name`, `tool_arguments`,
  `tool_response`; `handoff to <Agent>` spans);
- our own `arcana.*` attributes and `arcana.event` span events (what our runtime's OTLP export adds:
  context decisions, pins, primitive calls, numbering; docs/trace-format.md), into `arcana`.

Every message ends in the GenAI "parts" form: `{"role", "parts": [...], "finish_reason"?}` with
`text`, `tool_call` and `tool_call_response` parts; a part of any other type is kept as it came. A
message attribute that is not JSON is kept as text (`unparsed`). Every attribute not mapped to a
field is kept in `other_attributes`, every other event in `other_events`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._types import (
    ErrorInfo,
    Event,
    GraphNode,
    Handoff,
    Message,
    MessagesFormat,
    NormalizedSpan,
    Part,
    RunKeySource,
    Span,
    SpanKind,
    ToolInfo,
    Usage,
)

__all__ = ["normalize_span"]

# gen_ai.operation.name values that are one call generating from messages: a step.
_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion", "responses"})
_AGENT_OPERATIONS = frozenset({"invoke_agent"})
_TOOL_OPERATIONS = frozenset({"execute_tool"})
# openinference.span.kind -> the operation it stands for.
_OPENINFERENCE_OPERATIONS = {
    "LLM": "chat",
    "TOOL": "execute_tool",
    "AGENT": "invoke_agent",
    "EMBEDDING": "embeddings",
    "RETRIEVER": "retrieve",
    "RERANKER": "rerank",
}

_USAGE_KEYS: dict[str, str] = {
    "gen_ai.usage.input_tokens": "input_tokens",
    "gen_ai.usage.prompt_tokens": "input_tokens",
    "llm.token_count.prompt": "input_tokens",
    "gen_ai.usage.output_tokens": "output_tokens",
    "gen_ai.usage.completion_tokens": "output_tokens",
    "llm.token_count.completion": "output_tokens",
    "gen_ai.usage.total_tokens": "total_tokens",
    "llm.usage.total_tokens": "total_tokens",
    "llm.token_count.total": "total_tokens",
    "gen_ai.usage.cache_read.input_tokens": "cached_input_tokens",
    "gen_ai.usage.cache_read_input_tokens": "cached_input_tokens",
    "gen_ai.usage.cached_tokens": "cached_input_tokens",
    "llm.token_count.prompt_details.cache_read": "cached_input_tokens",
    "gen_ai.usage.cache_creation.input_tokens": "cache_creation_input_tokens",
    "gen_ai.usage.cache_creation_input_tokens": "cache_creation_input_tokens",
    "llm.token_count.prompt_details.cache_write": "cache_creation_input_tokens",
    "gen_ai.usage.reasoning.output_tokens": "reasoning_tokens",
    "gen_ai.usage.reasoning_tokens": "reasoning_tokens",
    "llm.token_count.completion_details.reasoning": "reasoning_tokens",
}

_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_INDEXED_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.tools.",
)
_HANDOFF_NAME = re.compile(r"^handoff to (.+)$")
_NAME_SUFFIX = re.compile(r"^(?:invoke_agent|execute_tool|chat|agent run|running tool)\s+(.+)$")


def normalize_span(span: Span) -> NormalizedSpan:
    """Read one decoded span through the conventions. Pure, and it never raises on a span that
    `decode_request` produced: anything it cannot map stays in `other_attributes` / `other_events`,
    and a message attribute that is not JSON is kept as text (`unparsed`)."""
    rest = dict(span["attributes"])
    pop = rest.pop
    unparsed: list[str] = []

    operation = _str(pop("gen_ai.operation.name", None))
    oi_kind = _str(pop("openinference.span.kind", None))
    oi_kind = oi_kind.upper() if oi_kind else None
    if operation is None and oi_kind is not None:
        operation = _OPENINFERENCE_OPERATIONS.get(oi_kind)

    # Indexed attributes (gen_ai.prompt.N.*, llm.input_messages.N.message.*, ...), grouped.
    indexed: dict[str, dict[int, dict[str, Any]]] = {}
    if any(k.startswith(_INDEXED_PREFIXES) for k in rest):
        indexed = _group_indexed(rest)

    # Events: messages, exceptions, the rest.
    event_input: list[Message] = []
    event_output: list[tuple[int, int, Message]] = []
    exception: dict[str, Any] | None = None
    other_events: list[Event] = []
    for position, event in enumerate(span["events"]):
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
                _messages_value(event["attributes"]["gen_ai.prompt"], "user", f"event:{ename}", unparsed)
            )
        elif ename == "gen_ai.content.completion" and "gen_ai.completion" in event["attributes"]:
            msgs = _messages_value(
                event["attributes"]["gen_ai.completion"], "assistant", f"event:{ename}", unparsed
            )
            event_output.extend((len(event_output), position, m) for m in msgs)
        elif ename == "exception" and exception is None:
            exception = event["attributes"]
        else:
            other_events.append(event)

    # Messages: the first convention present wins; the others stay in other_attributes.
    messages_format: MessagesFormat | None = None
    input_messages: list[Message] | None = None
    output_messages: list[Message] | None = None
    if "gen_ai.input.messages" in rest or "gen_ai.output.messages" in rest:
        messages_format = "gen_ai.messages"
        if "gen_ai.input.messages" in rest:
            input_messages = _messages_value(
                pop("gen_ai.input.messages"), "user", "gen_ai.input.messages", unparsed
            )
        if "gen_ai.output.messages" in rest:
            output_messages = _messages_value(
                pop("gen_ai.output.messages"), "assistant", "gen_ai.output.messages", unparsed
            )
    elif event_input or event_output:
        messages_format = "gen_ai.events"
        input_messages = event_input or None
        output_messages = [m for _, _, m in sorted(event_output, key=lambda t: (t[0], t[1]))] or None
    elif "gen_ai.prompt." in indexed or "gen_ai.completion." in indexed:
        messages_format = "gen_ai.prompt"
        input_messages = _indexed_messages(indexed.pop("gen_ai.prompt.", {}), rest, "gen_ai.prompt.")
        output_messages = _indexed_messages(indexed.pop("gen_ai.completion.", {}), rest, "gen_ai.completion.")
    elif "llm.input_messages." in indexed or "llm.output_messages." in indexed:
        messages_format = "openinference"
        input_messages = _indexed_messages(
            indexed.pop("llm.input_messages.", {}), rest, "llm.input_messages."
        )
        output_messages = _indexed_messages(
            indexed.pop("llm.output_messages.", {}), rest, "llm.output_messages."
        )
    else:
        # Older single-attribute forms: a JSON list of messages in gen_ai.prompt / gen_ai.completion.
        if "gen_ai.prompt" in rest and not isinstance(rest["gen_ai.prompt"], int | float | bool):
            messages_format = "gen_ai.prompt"
            input_messages = _messages_value(pop("gen_ai.prompt"), "user", "gen_ai.prompt", unparsed)
        if "gen_ai.completion" in rest and not isinstance(rest["gen_ai.completion"], int | float | bool):
            messages_format = "gen_ai.prompt"
            output_messages = _messages_value(
                pop("gen_ai.completion"), "assistant", "gen_ai.completion", unparsed
            )
    if messages_format != "gen_ai.events":
        # Message events not used (another form won) are kept, not dropped.
        for event in span["events"]:
            if event["name"] in _MESSAGE_EVENTS or event["name"] in (
                "gen_ai.choice",
                "gen_ai.content.prompt",
                "gen_ai.content.completion",
            ):
                other_events.append(event)

    system_instructions: list[Part] | None = None
    if "gen_ai.system_instructions" in rest:
        system_instructions = _parts_value(
            pop("gen_ai.system_instructions"), "gen_ai.system_instructions", unparsed
        )

    tool_definitions: list[Any] | None = None
    if "gen_ai.tool.definitions" in rest:
        tool_definitions = _json_list(pop("gen_ai.tool.definitions"), "gen_ai.tool.definitions", unparsed)
    tools_indexed = indexed.pop("llm.tools.", None)
    if tools_indexed and tool_definitions is None:
        tool_definitions = []
        for n in sorted(tools_indexed):
            fields = tools_indexed[n]
            schema = fields.pop("tool.json_schema", None)
            for key in list(fields):
                _restore(rest, f"llm.tools.{n}.{key}", fields.pop(key))
            if schema is not None:
                tool_definitions.append(_json_or_text(schema, f"llm.tools.{n}.tool.json_schema", unparsed))
    elif tools_indexed:
        _restore_group(rest, "llm.tools.", tools_indexed)
    # Indexed groups no convention above used (a second message form) go back where they were.
    for prefix, group in indexed.items():
        _restore_group(rest, prefix, group)

    arcana = _arcana(rest, other_events, unparsed)

    # Models, provider, response.
    request_model = _str(pop("gen_ai.request.model", None))
    response_model = _str(pop("gen_ai.response.model", None))
    llm_model = _str(pop("llm.model_name", None))
    provider = _first_str(rest, ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"))
    response_id = _str(pop("gen_ai.response.id", None))
    finish_reasons: list[str] | None = None
    reasons = rest.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and all(type(r) is str for r in reasons):
        finish_reasons = pop("gen_ai.response.finish_reasons")
    elif type(reasons) is str:
        pop("gen_ai.response.finish_reasons")
        finish_reasons = [reasons]
    if finish_reasons is None and type(rest.get("llm.finish_reason")) is str:
        finish_reasons = [pop("llm.finish_reason")]
    request_parameters: dict[str, Any] = {}
    for key in [k for k in rest if k.startswith("gen_ai.request.")]:
        request_parameters[key[15:]] = pop(key)
    if "llm.invocation_parameters" in rest:
        params = _json_or_text(rest["llm.invocation_parameters"], "llm.invocation_parameters", None)
        if isinstance(params, dict):
            pop("llm.invocation_parameters")
            for key, value in params.items():
                request_parameters.setdefault(key, value)

    usage = _usage(rest)

    # Conversation.
    conversation_id = _str(pop("gen_ai.conversation.id", None))
    session_id = _str(pop("session.id", None))
    run_key_source: RunKeySource
    if conversation_id:
        run_key, run_key_source = conversation_id, "gen_ai.conversation.id"
    elif session_id:
        run_key, run_key_source = session_id, "session.id"
        conversation_id = session_id
    else:
        run_key, run_key_source = span["trace_id"], "trace_id"
        conversation_id = None

    # Agents.
    name = span["name"]
    agent_name = _first_str(rest, ("gen_ai.agent.name", "agent.name", "agent_name"))
    agent_id = _str(pop("gen_ai.agent.id", None))
    graph_node: GraphNode | None = None
    if "graph.node.id" in rest or "graph.node.parent_id" in rest:
        graph_node = {
            "id": _str(pop("graph.node.id", None)),
            "parent_id": _str(pop("graph.node.parent_id", None)),
        }
    handoff: Handoff | None = None
    handoff_match = _HANDOFF_NAME.match(name)
    if handoff_match:
        source = agent_name if agent_name is not None else graph_node["parent_id"] if graph_node else None
        handoff = {"source": source, "target": handoff_match[1]}

    # Kind.
    kind: SpanKind
    if handoff is not None:
        kind = "other"
        operation = operation if operation != "execute_tool" else "handoff"
    elif operation in _MODEL_OPERATIONS:
        kind = "model_call"
    elif operation in _TOOL_OPERATIONS:
        kind = "tool_call"
    elif operation in _AGENT_OPERATIONS:
        kind = "agent"
    elif operation is not None:
        kind = "other"
    elif input_messages is not None or output_messages is not None:
        kind = "model_call"
    elif "gen_ai.tool.name" in rest or "gen_ai.tool.call.id" in rest or name.startswith("running tool"):
        kind = "tool_call"
    elif agent_name is not None and (name.startswith(("agent run", "invoke_agent"))):
        kind = "agent"
    else:
        kind = "other"
    if kind == "agent" and agent_name is None:
        if graph_node and graph_node["id"]:
            agent_name = graph_node["id"]
        else:
            suffix = _NAME_SUFFIX.match(name)
            agent_name = suffix[1] if suffix else None

    # Tools.
    tool: ToolInfo | None = None
    if kind == "tool_call":
        tool = _tool(rest, name, oi_kind == "TOOL", unparsed)

    # Errors.
    error: ErrorInfo | None = None
    error_type = _str(pop("error.type", None))
    if exception is not None or error_type is not None or span["status"]["code"] == "error":
        exc = exception or {}
        error = {
            "type": error_type or _str(exc.get("exception.type")),
            "message": _str(exc.get("exception.message")) or span["status"]["message"] or None,
            "stacktrace": _str(exc.get("exception.stacktrace")),
        }
        if exception is not None:
            # Keep what the exception event said beyond type / message / stacktrace.
            extra = {k: v for k, v in exception.items() if k not in _EXCEPTION_KEYS}
            if extra:
                other_events.append({"name": "exception", "time": None, "attributes": extra})

    return {
        "trace_id": span["trace_id"],
        "span_id": span["span_id"],
        "parent_span_id": span["parent_span_id"],
        "name": name,
        "kind": kind,
        "operation": operation,
        "start_time": span["start_time"],
        "end_time": span["end_time"],
        "status": span["status"],
        "run_key": run_key,
        "run_key_source": run_key_source,
        "conversation_id": conversation_id,
        "agent_name": agent_name,
        "agent_id": agent_id,
        "graph_node": graph_node,
        "handoff": handoff,
        "provider": provider,
        "request_model": request_model,
        "response_model": response_model,
        "model": response_model or request_model or llm_model,
        "response_id": response_id,
        "finish_reasons": finish_reasons,
        "request_parameters": request_parameters,
        "usage": usage,
        "messages_format": messages_format,
        "system_instructions": system_instructions,
        "input_messages": input_messages,
        "output_messages": output_messages,
        "tool_definitions": tool_definitions,
        "tool": tool,
        "error": error,
        "unparsed": unparsed,
        "arcana": arcana,
        "other_attributes": rest,
        "other_events": other_events,
        "resource": span["resource"],
        "scope": span["scope"],
    }


_EXCEPTION_KEYS = frozenset({"exception.type", "exception.message", "exception.stacktrace"})

# --------------------------------------------------------------------------------------------------
# Our runtime's attributes (`arcana.*`, docs/trace-format.md "OTLP export")

#: `arcana.*` attributes that hold JSON text (the others are plain values).
ARCANA_JSON = frozenset(
    {
        "context_decision",
        "pins",
        "messages",
        "budget_snapshot",
        "llm_call",
        "error",
        "tool_call",
        "primitive.args",
        "primitive.result",
    }
)


def _arcana(rest: dict[str, Any], other_events: list[Event], unparsed: list[str]) -> dict[str, Any] | None:
    """The span's `arcana.*` attributes (prefix dropped, JSON ones parsed) and its `arcana.event`
    span events (`events`: each one's parsed `arcana.event` attribute), taken out of `rest` /
    `other_events`; None when the span has neither (it was not exported by our runtime)."""
    out: dict[str, Any] = {}
    for key in [k for k in rest if k.startswith("arcana.")]:
        name = key[7:]
        value = rest.pop(key)
        out[name] = _json_or_text(value, key, unparsed) if name in ARCANA_JSON else value
    events = [e for e in other_events if e["name"] == "arcana.event"]
    if events:
        other_events[:] = [e for e in other_events if e["name"] != "arcana.event"]
        out["events"] = [
            _json_or_text(e["attributes"].get("arcana.event"), "event:arcana.event", unparsed) for e in events
        ]
    return out or None


# --------------------------------------------------------------------------------------------------
# Small readers


def _str(value: Any) -> str | None:
    return value if type(value) is str and value else None


def _first_str(rest: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of `keys` holding a non-empty string; that one is taken out of `rest`."""
    for key in keys:
        value = rest.get(key)
        if type(value) is str and value:
            del rest[key]
            return value
    return None


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is str and value.isascii() and value.isdigit() and len(value) < 20:
        return int(value)
    return None


def _usage(rest: dict[str, Any]) -> Usage | None:
    usage: dict[str, int | None] = {}
    for key in [k for k in rest if k in _USAGE_KEYS]:
        n = _int(rest[key])
        if n is None:
            continue  # not a count: kept in other_attributes
        del rest[key]
        usage.setdefault(_USAGE_KEYS[key], n)
    if not usage:
        return None
    return {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "total_tokens": usage.get("total_tokens"),
        "cached_input_tokens": usage.get("cached_input_tokens"),
        "cache_creation_input_tokens": usage.get("cache_creation_input_tokens"),
        "reasoning_tokens": usage.get("reasoning_tokens"),
    }


def _json_or_text(value: Any, where: str, unparsed: list[str] | None) -> Any:
    """A value that should hold JSON: parsed when it is a JSON text, as it is when it is already a
    structure; a text that is not JSON stays text (and `where` is noted in `unparsed`)."""
    if type(value) is not str:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        if unparsed is not None:
            unparsed.append(where)
        return value


def _json_list(value: Any, where: str, unparsed: list[str]) -> list[Any]:
    parsed = _json_or_text(value, where, unparsed)
    return parsed if isinstance(parsed, list) else [parsed]


def _restore(rest: dict[str, Any], key: str, value: Any) -> None:
    rest[key] = value


def _restore_group(rest: dict[str, Any], prefix: str, group: dict[int, dict[str, Any]]) -> None:
    for n, fields in group.items():
        for key, value in fields.items():
            rest[f"{prefix}{n}.{key}"] = value


def _group_indexed(rest: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """Take `<prefix>N.<field>` attributes out of `rest`, grouped by prefix then N (the OpenInference
    `message.` / `tool.`-less field names are kept as they are: `message.role`, `tool.json_schema`)."""
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for key in [k for k in rest if k.startswith(_INDEXED_PREFIXES)]:
        for prefix in _INDEXED_PREFIXES:
            if key.startswith(prefix):
                break
        number, dot, field = key[len(prefix) :].partition(".")
        if not dot or not number.isascii() or not number.isdigit() or len(number) > 9:
            continue  # e.g. gen_ai.prompt.template: not indexed, stays where it is
        groups.setdefault(prefix, {}).setdefault(int(number), {})[field] = rest.pop(key)
    return groups


def _indexed_messages(
    group: dict[int, dict[str, Any]], rest: dict[str, Any], prefix: str
) -> list[Message] | None:
    """Messages from `gen_ai.prompt.N.*` (OpenLLMetry) or `llm.input_messages.N.message.*`
    (OpenInference) fields; fields that are not part of a message go back into `rest`."""
    if not group:
        return None
    messages: list[Message] = []
    for n in sorted(group):
        fields = group[n]
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
                parts.extend(_content_parts(content))
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


# --------------------------------------------------------------------------------------------------
# Messages in any shape -> the parts form


def _messages_value(value: Any, default_role: str, where: str, unparsed: list[str]) -> list[Message]:
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
        return [{"role": default_role, "parts": _content_parts(value)}]
    return [_message(m, default_role) for m in value]


def _message(m: Any, default_role: str) -> Message:
    if not isinstance(m, dict):
        return {"role": default_role, "parts": _content_parts(m)}
    parts = m.get("parts")
    if isinstance(parts, list) and "role" in m:
        # The parts form already: checked, not rebuilt (the common case, kept fast).
        for p in parts:
            if not (isinstance(p, dict) and type(p.get("type")) is str):
                fixed = [
                    q if isinstance(q, dict) and type(q.get("type")) is str else _content_parts(q)[0]
                    for q in parts
                ]
                return {**m, "parts": fixed}  # type: ignore[typeddict-item]
        return m  # type: ignore[return-value]
    return _chat_message(m, default_role)


def _chat_message(m: dict[str, Any], default_role: str) -> Message:
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
        parts.extend(_content_parts(content))
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


def _content_parts(content: Any) -> list[Part]:
    """Message content in any shape -> parts: a string is one text part; a list holds parts (the
    OpenAI `{"type": "text", "text"}` content parts become text parts; others are kept)."""
    if type(content) is str:
        if content[:2] == "[{" and '"type"' in content:
            try:
                parsed = json.loads(content)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, list) and all(isinstance(p, dict) and "type" in p for p in parsed):
                return _content_parts(parsed)
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
        return _content_parts([content])
    return [{"type": "unknown", "content": content}]


def _parts_value(value: Any, where: str, unparsed: list[str]) -> list[Part]:
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
            return _content_parts(parsed)
        return [{"type": "text", "content": value}]
    return _content_parts(value)


def _event_message(event: Event, role: str, unparsed: list[str]) -> Message:
    """A `gen_ai.<role>.message` event: its attributes (`content`, `tool_calls`, `id`, `role`) are
    the message; some instrumentations put the whole body as JSON in one attribute."""
    attrs = event["attributes"]
    body = attrs.get("gen_ai.event.content", attrs.get("body"))
    fields: dict[str, Any] = {}
    if body is not None:
        parsed = _json_or_text(body, f"event:{event['name']}", unparsed)
        fields = dict(parsed) if isinstance(parsed, dict) else {"content": parsed}
    for key, value in attrs.items():
        if key in ("gen_ai.event.content", "body", "gen_ai.system", "event.name"):
            continue
        fields.setdefault(key.removeprefix("gen_ai."), value)
    content = fields.get("content")
    if type(content) is str and content[:1] in ("[", "{"):
        parsed = _json_or_text(content, f"event:{event['name']}", None)
        if isinstance(parsed, list | dict):
            fields["content"] = parsed
    fields.setdefault("role", role)
    return _message(fields, role) if "parts" in fields else _chat_message(fields, role)


def _choice_message(event: Event, unparsed: list[str]) -> Message:
    attrs = event["attributes"]
    body = attrs.get("gen_ai.event.content", attrs.get("body"))
    fields: dict[str, Any] = {}
    if body is not None:
        parsed = _json_or_text(body, "event:gen_ai.choice", unparsed)
        if isinstance(parsed, dict):
            fields = dict(parsed)
    for key, value in attrs.items():
        if key not in ("gen_ai.event.content", "body", "gen_ai.system", "event.name", "index"):
            fields.setdefault(key, value)
    message = fields.pop("message", None)
    if type(message) is str:
        message = _json_or_text(message, "event:gen_ai.choice", unparsed)
    if not isinstance(message, dict):
        message = {k: fields.pop(k) for k in ("content", "tool_calls", "role") if k in fields}
    message = dict(message)
    message.setdefault("role", "assistant")
    finish = fields.pop("finish_reason", None)
    out = _message(message, "assistant") if "parts" in message else _chat_message(message, "assistant")
    if finish is not None:
        out["finish_reason"] = finish
    for key, value in fields.items():
        out.setdefault(key, value)  # type: ignore[misc]
    return out


def _tool(rest: dict[str, Any], name: str, openinference_tool: bool, unparsed: list[str]) -> ToolInfo:
    pop = rest.pop
    tool_name = _first_str(rest, ("gen_ai.tool.name", "tool.name", "tool_call.function.name"))
    if tool_name is None:
        suffix = _NAME_SUFFIX.match(name)
        tool_name = suffix[1] if suffix else None
    call_id = _first_str(rest, ("gen_ai.tool.call.id", "tool_call.id", "tool_call_id"))
    arguments: Any = None
    result: Any = None
    for key in ("gen_ai.tool.call.arguments", "tool_call.function.arguments", "tool_arguments"):
        if key in rest:
            arguments = pop(key)
            break
    for key in ("gen_ai.tool.call.result", "tool_response"):
        if key in rest:
            result = pop(key)
            break
    if openinference_tool:
        if arguments is None and "input.value" in rest:
            arguments = pop("input.value")
            pop("input.mime_type", None)
        if result is None and "output.value" in rest:
            result = pop("output.value")
            pop("output.mime_type", None)
    return {
        "name": tool_name,
        "call_id": call_id,
        "arguments": arguments,
        "result": result,
        "description": _first_str(rest, ("gen_ai.tool.description", "tool.description")),
    }
