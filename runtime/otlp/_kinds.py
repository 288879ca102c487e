"""What a span is: its operation and kind (a model call, a tool call, an agent, other), its agent and
hand-off, its tool call, its error. The GenAI names come first, then OpenInference's
(`openinference.span.kind`, `agent.name`, `graph.node.*`, `tool.*`, the `input.value` /
`output.value` of TOOL spans), then Pydantic AI's and openai-agents' particular ones (`agent_name`,
`tool_arguments`, `tool_response`; `handoff to <Agent>` spans)."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from ._types import ErrorInfo, Event, GraphNode, Handoff, Span, SpanKind, ToolInfo
from ._values import first_str, str_or_none

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
_HANDOFF_NAME = re.compile(r"^handoff to (.+)$")
_NAME_SUFFIX = re.compile(r"^(?:invoke_agent|execute_tool|chat|agent run|running tool)\s+(.+)$")
_EXCEPTION_KEYS = frozenset({"exception.type", "exception.message", "exception.stacktrace"})


def operation(rest: dict[str, Any]) -> tuple[str | None, str | None]:
    """(operation, OpenInference span kind upper-cased): `gen_ai.operation.name`, else the operation
    `openinference.span.kind` stands for."""
    found = str_or_none(rest.pop("gen_ai.operation.name", None))
    oi_kind = str_or_none(rest.pop("openinference.span.kind", None))
    oi_kind = oi_kind.upper() if oi_kind else None
    if found is None and oi_kind is not None:
        found = _OPENINFERENCE_OPERATIONS.get(oi_kind)
    return found, oi_kind


class AgentInfo(NamedTuple):
    """The agent a span names, and the hand-off it is, if any."""

    name: str | None
    id: str | None
    graph_node: GraphNode | None
    handoff: Handoff | None


def agent(rest: dict[str, Any], span_name: str) -> AgentInfo:
    """`gen_ai.agent.name` (or `agent.name`, `agent_name`), `gen_ai.agent.id`, OpenInference's
    `graph.node.*`; a `handoff to X` span is a hand-off from its agent (or graph parent) to X."""
    agent_name = first_str(rest, ("gen_ai.agent.name", "agent.name", "agent_name"))
    agent_id = str_or_none(rest.pop("gen_ai.agent.id", None))
    graph_node: GraphNode | None = None
    if "graph.node.id" in rest or "graph.node.parent_id" in rest:
        graph_node = {
            "id": str_or_none(rest.pop("graph.node.id", None)),
            "parent_id": str_or_none(rest.pop("graph.node.parent_id", None)),
        }
    handoff: Handoff | None = None
    handoff_match = _HANDOFF_NAME.match(span_name)
    if handoff_match:
        source = agent_name if agent_name is not None else graph_node["parent_id"] if graph_node else None
        handoff = {"source": source, "target": handoff_match[1]}
    return AgentInfo(agent_name, agent_id, graph_node, handoff)


def kind(
    found_operation: str | None, agent: AgentInfo, has_messages: bool, rest: dict[str, Any], span_name: str
) -> tuple[SpanKind, str | None]:
    """(kind, operation): from the operation when there is one (a hand-off is `other`, its
    `execute_tool` operation becoming `handoff`), else from what the span holds (messages: a model
    call; a tool name or call id: a tool call; an agent name on an agent-run span: an agent)."""
    if agent.handoff is not None:
        return "other", found_operation if found_operation != "execute_tool" else "handoff"
    if found_operation in _MODEL_OPERATIONS:
        return "model_call", found_operation
    if found_operation in _TOOL_OPERATIONS:
        return "tool_call", found_operation
    if found_operation in _AGENT_OPERATIONS:
        return "agent", found_operation
    if found_operation is not None:
        return "other", found_operation
    if has_messages:
        return "model_call", None
    if "gen_ai.tool.name" in rest or "gen_ai.tool.call.id" in rest or span_name.startswith("running tool"):
        return "tool_call", None
    if agent.name is not None and (span_name.startswith(("agent run", "invoke_agent"))):
        return "agent", None
    return "other", None


def agent_name(span_kind: SpanKind, agent: AgentInfo, span_name: str) -> str | None:
    """The span's agent name; an agent span that names none is named by its graph node id, else by
    its span name (`invoke_agent X`, `agent run X`)."""
    if span_kind != "agent" or agent.name is not None:
        return agent.name
    if agent.graph_node and agent.graph_node["id"]:
        return agent.graph_node["id"]
    suffix = _NAME_SUFFIX.match(span_name)
    return suffix[1] if suffix else None


def error(
    rest: dict[str, Any], span: Span, exception: dict[str, Any] | None, other_events: list[Event]
) -> ErrorInfo | None:
    """The span's error: `error.type`, the first `exception` event, an error status; what the
    exception event said beyond type / message / stacktrace is kept in `other_events`."""
    error_type = str_or_none(rest.pop("error.type", None))
    if exception is None and error_type is None and span["status"]["code"] != "error":
        return None
    exc = exception or {}
    info: ErrorInfo = {
        "type": error_type or str_or_none(exc.get("exception.type")),
        "message": str_or_none(exc.get("exception.message")) or span["status"]["message"] or None,
        "stacktrace": str_or_none(exc.get("exception.stacktrace")),
    }
    if exception is not None:
        # Keep what the exception event said beyond type / message / stacktrace.
        extra = {k: v for k, v in exception.items() if k not in _EXCEPTION_KEYS}
        if extra:
            other_events.append({"name": "exception", "time": None, "attributes": extra})
    return info


def tool(rest: dict[str, Any], name: str, openinference_tool: bool) -> ToolInfo:
    """The tool call of a tool span: its name (else from the span name), call id, arguments, result
    and description; an OpenInference TOOL span's `input.value` / `output.value` are its arguments
    and result when no other attribute gives them."""
    pop = rest.pop
    tool_name = first_str(rest, ("gen_ai.tool.name", "tool.name", "tool_call.function.name"))
    if tool_name is None:
        suffix = _NAME_SUFFIX.match(name)
        tool_name = suffix[1] if suffix else None
    call_id = first_str(rest, ("gen_ai.tool.call.id", "tool_call.id", "tool_call_id"))
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
        "description": first_str(rest, ("gen_ai.tool.description", "tool.description")),
    }
