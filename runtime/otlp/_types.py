"""The shapes `runtime.otlp` reads into: plain dicts (TypedDicts), so a caller can store or send them
as JSON as they are, and a frozen dataclass for the limits and the decoded request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict

# --------------------------------------------------------------------------------------------------
# Decoding


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What one request and one span may hold before they are refused.

        DecodeLimits()                                  # the defaults below
        DecodeLimits(max_value_chars=65_536)            # stricter on large attribute values
        DecodeLimits(max_attributes=10_000, max_depth=32)

    - `max_body_bytes`: the body once gunzipped; past it the whole request is refused (413).
    - `max_attributes`: attributes of one span (and of one event, link, resource or kvlist value).
    - `max_events` / `max_links`: per span.
    - `max_value_chars`: one string value (characters) or bytes value (bytes), anywhere in a span.
    - `max_depth`: how deep arrays and kvlists may nest inside one attribute value (a plain value is
      depth 0, a list of strings depth 1).

    Past any of the last five, the span is refused and the other spans of the request are kept.
    """

    max_body_bytes: int = 64 * 1024 * 1024
    max_attributes: int = 4096
    max_events: int = 1024
    max_links: int = 1024
    max_value_chars: int = 2 * 1024 * 1024
    max_depth: int = 16


class Status(TypedDict):
    code: Literal["unset", "ok", "error"]
    message: str


class Scope(TypedDict):
    name: str
    version: str


class Event(TypedDict):
    name: str
    time: int | None  # Unix nanoseconds; None when the event had none (0)
    attributes: dict[str, Any]


class Link(TypedDict):
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


class Span(TypedDict):
    """One decoded span. Ids are lowercase hex; times are Unix nanoseconds. Attribute values are
    plain JSON values: str, bool, int (64-bit), float (finite; NaN and ±Infinity become the strings
    "NaN", "Infinity", "-Infinity" as in the proto3 JSON mapping), list, dict (a kvlist), bytes as
    base64 text, None (an empty AnyValue). `resource` (the resource's attributes) is one dict shared by
    the spans of that resource: treat it as read-only."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: Literal["unspecified", "internal", "server", "client", "producer", "consumer"]
    start_time: int
    end_time: int
    status: Status
    attributes: dict[str, Any]
    events: list[Event]
    links: list[Link]
    resource: dict[str, Any]
    scope: Scope


RejectReason = Literal[
    "undecodable",  # the span's protobuf bytes cannot be parsed on their own
    "invalid_id",  # trace / span / parent id missing, of the wrong length, all zero, or not hex
    "invalid_value",  # a field of the wrong type (JSON), an integer out of 64-bit range, bad base64
    "invalid_text",  # invalid UTF-8, a lone surrogate or a NUL character in a string
    "value_too_large",  # a string or bytes value past DecodeLimits.max_value_chars
    "too_many_items",  # attributes, events or links past their limit
    "nesting_too_deep",  # AnyValue arrays / kvlists nested past DecodeLimits.max_depth
    "invalid_timestamp",  # start or end time 0, or past the year 9999
]


class SpanRejection(TypedDict):
    """One refused span: its position in the request (0-based, counting every span of every
    resource and scope in order), its ids when they could be read, a stable `reason` code, the field
    to blame when one is, and a message a person understands."""

    index: int
    trace_id: str | None
    span_id: str | None
    reason: RejectReason
    field: str | None
    message: str


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    """What `decode_request` read: the valid spans, in request order, and the refused ones.
    `rejected_spans` and `error_message` are what OTLP's `partial_success` answers."""

    spans: list[Span]
    rejections: list[SpanRejection]

    @property
    def rejected_spans(self) -> int:
        return len(self.rejections)

    @property
    def error_message(self) -> str:
        """ "" when every span was taken; else a summary naming the first few refusals, e.g.
        `2 of 5 spans rejected: span 1 (trace 0af7…, span b7ad…): attributes.x: contains a NUL
        character; span 3: ...`."""
        if not self.rejections:
            return ""
        total = len(self.spans) + len(self.rejections)
        shown = []
        for r in self.rejections[:5]:
            ids = f" (trace {r['trace_id']}, span {r['span_id']})" if r["trace_id"] and r["span_id"] else ""
            where = f"{r['field']}: " if r["field"] else ""
            shown.append(f"span {r['index']}{ids}: {where}{r['message']}")
        more = f"; and {len(self.rejections) - 5} more" if len(self.rejections) > 5 else ""
        return f"{len(self.rejections)} of {total} spans rejected: " + "; ".join(shown) + more


# --------------------------------------------------------------------------------------------------
# Normalizing


class Part(TypedDict, total=False):
    """One part of a message, in the GenAI "parts" form. The three known types are
    `{"type": "text", "content"}`, `{"type": "tool_call", "id", "name", "arguments"}` and
    `{"type": "tool_call_response", "id", "name"?, "result"}`; any other part (reasoning, images,
    files, a type we do not know) is kept exactly as it came."""

    type: str
    content: Any
    id: str | None
    name: str | None
    arguments: Any
    result: Any


class Message(TypedDict, total=False):
    """`{"role", "parts": [Part, ...], "finish_reason"?, "name"?}`; keys a convention carried that
    the parts form has no place for are kept on the message as they came. A message read from an
    attribute that was not JSON is `{"role": "unknown", "parts": [text], "unparsed": True}`."""

    role: str
    parts: list[Part]
    finish_reason: str
    name: str
    unparsed: bool


class Usage(TypedDict):
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cached_input_tokens: int | None  # read from a prompt cache (part of input_tokens)
    cache_creation_input_tokens: int | None  # written to a prompt cache
    reasoning_tokens: int | None  # part of output_tokens


class ToolInfo(TypedDict):
    name: str | None
    call_id: str | None
    arguments: Any  # as sent: usually a JSON text or an object
    result: Any
    description: str | None


class ErrorInfo(TypedDict):
    type: str | None  # `error.type`, else the `exception` event's `exception.type`
    message: str | None  # the `exception` event's message, else the span status message
    stacktrace: str | None


class GraphNode(TypedDict):
    id: str | None
    parent_id: str | None


class Handoff(TypedDict):
    source: str | None  # the agent handing off, when the span says
    target: str


SpanKind = Literal["model_call", "tool_call", "agent", "other"]
RunKeySource = Literal["gen_ai.conversation.id", "session.id", "trace_id"]
MessagesFormat = Literal["gen_ai.messages", "gen_ai.events", "gen_ai.prompt", "openinference"]


class NormalizedSpan(TypedDict):
    """One span read through the conventions. Every key is always present (None when the span does
    not say). `other_attributes` holds every attribute not mapped to a field (never dropped);
    `other_events` every event that is neither a message nor an `exception`; `unparsed` the
    attributes (or `event:<name>`) that should have held JSON and did not (their text is kept)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind
    operation: str | None
    start_time: int
    end_time: int
    status: Status
    run_key: str
    run_key_source: RunKeySource
    conversation_id: str | None
    agent_name: str | None
    agent_id: str | None
    graph_node: GraphNode | None
    handoff: Handoff | None
    provider: str | None
    request_model: str | None
    response_model: str | None
    model: str | None
    response_id: str | None
    finish_reasons: list[str] | None
    request_parameters: dict[str, Any]
    usage: Usage | None
    messages_format: MessagesFormat | None
    system_instructions: list[Part] | None
    input_messages: list[Message] | None
    output_messages: list[Message] | None
    tool_definitions: list[Any] | None
    tool: ToolInfo | None
    error: ErrorInfo | None
    unparsed: list[str]
    arcana: dict[str, Any] | None  # our runtime's `arcana.*` attributes, prefix dropped (None: none)
    other_attributes: dict[str, Any]
    other_events: list[Event]
    resource: dict[str, Any]
    scope: Scope


# --------------------------------------------------------------------------------------------------
# Assembling a run


class OtlpToolCall(TypedDict):
    """One tool call of a step: asked for in the step's output (`tool_call` part) and / or run as a
    tool span. `result` comes from the tool span, else from a later call's input
    (`tool_call_response` part with the same id)."""

    call_id: str | None
    name: str | None
    arguments: Any
    result: Any
    span_id: str | None  # the tool span, when one was seen
    error: ErrorInfo | None
    start_time: int | None  # of the tool span
    end_time: int | None
    arcana: dict[str, Any] | None  # of the tool span


class OtlpStep(TypedDict):
    """One model call. `index` counts the run's model calls in the order they ended (0-based);
    `nested_in` is the index of the step whose span encloses this one (a summarizer called from a
    history processor inside a chat span), else None."""

    index: int
    turn: int
    trace_id: str
    span_id: str
    agent: str | None
    model: str | None
    start_time: int
    end_time: int
    system_instructions: list[Part] | None
    input_messages: list[Message] | None
    output_messages: list[Message] | None
    usage: Usage | None
    finish_reasons: list[str] | None
    error: ErrorInfo | None
    tool_calls: list[OtlpToolCall]
    nested_in: int | None
    provider: str | None
    request_model: str | None
    tool_definitions: list[Any] | None
    arcana: dict[str, Any] | None  # `arcana.*` of the model call's span: recorded by our runtime


class OtlpTurn(TypedDict):
    """One agent invocation (a top-level agent span, with the agents it handed off to) or, for
    model calls under no agent span, one new user message. `user_message` is the last user message
    with text in the turn's first model call's input."""

    index: int
    trace_id: str
    span_id: str | None  # the agent span, None for a turn started by a user message
    agent: str | None
    start_time: int
    end_time: int
    user_message: Message | None
    steps: list[int]
    error: ErrorInfo | None
    arcana: dict[str, Any] | None  # of the agent span


class OtlpAgent(TypedDict):
    """One agent by name. `via` says how it came in: `root` (invoked by no other agent), `subagent`
    (its span is inside another agent's) or `handoff`; `parent` names that other agent."""

    name: str
    span_ids: list[str]
    parent: str | None
    via: Literal["root", "subagent", "handoff"]


class OtlpHandoff(TypedDict):
    source: str | None
    target: str
    span_id: str | None  # the hand-off span, None when read from graph.node.parent_id
    time: int


class OtlpSpanError(TypedDict):
    span_id: str
    name: str
    kind: SpanKind
    error: ErrorInfo


class OtlpRun(TypedDict):
    """The structure of one run, as far as its spans tell it. `missing_parents` lists parent span
    ids no span of the run has (a run still arriving, or a parent exported elsewhere)."""

    run_key: str
    run_key_source: RunKeySource
    trace_ids: list[str]
    span_count: int
    start_time: int
    end_time: int
    turns: list[OtlpTurn]
    steps: list[OtlpStep]
    agents: list[OtlpAgent]
    handoffs: list[OtlpHandoff]
    unattached_tool_calls: list[OtlpToolCall]
    usage: Usage
    errors: list[OtlpSpanError]
    missing_parents: list[str]
