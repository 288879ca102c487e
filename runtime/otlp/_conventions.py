"""One span read through the GenAI conventions in use, into one model (`NormalizedSpan`).

`normalize_span` lists the readings in order; each convention family is read in its own module
(the only modules that know attribute names):

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

- `_genai_attributes`: the GenAI attributes (messages, system instructions, tool definitions,
  models, usage, the conversation; with the other conventions' names for the same fields);
- `_genai_events`: the GenAI span events (per-message events, `gen_ai.content.*`, `exception`);
- `_indexed`: the indexed attributes (`gen_ai.prompt.N.*`, OpenInference's `llm.*.N.*`);
- `_kinds`: operation and kind, agents and hand-offs, tools, errors;
- `_arcana`: our own `arcana.*`;
- `_parts`: messages in any shape into the parts form; `_values`: small readers they share.
"""

from __future__ import annotations

from typing import Any

from . import _genai_attributes as genai
from . import _indexed as indexed
from . import _kinds as kinds
from ._arcana import arcana_attributes
from ._genai_events import SpanEvents, message_events, read_events
from ._types import Message, MessagesFormat, NormalizedSpan, RunKeySource, Span

__all__ = ["normalize_span", "run_key_of"]


def run_key_of(span: Span) -> tuple[str, RunKeySource]:
    """The run key `normalize_span` gives the span, and its source, without reading the rest of it
    (its messages above all): what a server needs to file a span before it derives its run."""
    attributes = span["attributes"]
    keys = {k: attributes[k] for k in ("gen_ai.conversation.id", "session.id") if k in attributes}
    run_key, source, _ = genai.conversation(keys, span["trace_id"])
    return run_key, source


def normalize_span(span: Span) -> NormalizedSpan:
    """Read one decoded span through the conventions. Pure, and it never raises on a span that
    `decode_request` produced: anything it cannot map stays in `other_attributes` / `other_events`,
    and a message attribute that is not JSON is kept as text (`unparsed`).

    Each reading takes what it maps out of `rest` (the attributes not mapped yet), in this order."""
    rest = dict(span["attributes"])
    unparsed: list[str] = []
    name = span["name"]
    operation, oi_kind = kinds.operation(rest)
    groups = indexed.group(rest)
    events = read_events(span["events"], unparsed)
    messages_format, input_messages, output_messages = _messages(rest, events, groups, unparsed)
    other_events = events.other
    if messages_format != "gen_ai.events":
        other_events.extend(message_events(span["events"]))  # another form won: the events are kept
    system_instructions = genai.system_instructions(rest, unparsed)
    tool_definitions = genai.tool_definitions(rest, unparsed)
    tool_definitions = indexed.tool_definitions(rest, groups, tool_definitions, unparsed)
    indexed.restore(rest, groups)
    arcana = arcana_attributes(rest, other_events, unparsed)
    model = genai.model_info(rest)
    usage = genai.usage(rest)
    run_key, run_key_source, conversation_id = genai.conversation(rest, span["trace_id"])
    agent = kinds.agent(rest, name)
    has_messages = input_messages is not None or output_messages is not None
    kind, operation = kinds.kind(operation, agent, has_messages, rest, name)
    tool = kinds.tool(rest, name, oi_kind == "TOOL") if kind == "tool_call" else None
    error = kinds.error(rest, span, events.exception, other_events)
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
        "agent_name": kinds.agent_name(kind, agent, name),
        "agent_id": agent.id,
        "graph_node": agent.graph_node,
        "handoff": agent.handoff,
        "provider": model.provider,
        "request_model": model.request_model,
        "response_model": model.response_model,
        "model": model.model,
        "response_id": model.response_id,
        "finish_reasons": model.finish_reasons,
        "request_parameters": model.request_parameters,
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


def _messages(
    rest: dict[str, Any], events: SpanEvents, groups: indexed.Groups, unparsed: list[str]
) -> tuple[MessagesFormat | None, list[Message] | None, list[Message] | None]:
    """(format, input, output): the first form of the messages present wins, in this order (the
    others stay in `other_attributes` / `other_events`)."""
    if genai.has_attribute_messages(rest):
        return ("gen_ai.messages", *genai.attribute_messages(rest, unparsed))
    if events.input or events.output:
        return "gen_ai.events", events.input or None, events.output_messages() or None
    found = indexed.messages(groups)
    if found[0] is not None:
        return found
    return genai.single_attribute_messages(rest, unparsed)
