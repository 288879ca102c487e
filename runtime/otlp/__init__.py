"""Reading OpenTelemetry traces (OTLP) of LLM agents: shared by the server's `/v1/traces` endpoint and
the CLI. Pure Python; protobuf bodies need the `otlp` extra (`pip install "arcana-console[otlp]"`),
OTLP/JSON needs nothing more.

Three steps, each a pure function:

    decoded = decode_request(body, "application/x-protobuf")   # -> DecodedRequest
    decoded.spans, decoded.rejections                          # [Span], [SpanRejection]
    spans = [normalize_span(s) for s in decoded.spans]         # -> [NormalizedSpan]
    for key, run_spans in group_runs(spans).items():           # a run: conversation, session or trace
        run = assemble_run(run_spans)                          # -> OtlpRun: turns, steps, tools, agents

- `decode_request` reads an `ExportTraceServiceRequest` (protobuf or JSON, gzip or not) into plain
  spans, refusing bad spans one by one (`DecodedRequest.rejections`, OTLP's `partial_success`) and
  raising `OtlpDecodeError` only for a body that cannot be read at all; `encode_response` writes the
  answer.
- `normalize_span` reads one span through every GenAI convention in use (the GenAI semantic
  conventions in their successive forms, OpenInference) into one model whose messages are all in the
  GenAI "parts" form.
- `assemble_run` turns the spans of one run, in any order, into its turns, steps (model calls, by
  end time), tool calls and agents.
- `events_for_run` writes an assembled run as trace events in our own dialect (derived: the same
  spans always give the same events), which the server ingests and the CLI reads like any trace.

The shapes are TypedDicts (plain dicts at run time, JSON as they are): see `_types.py`, and
docs/guide/otlp-mapping.md for which attribute becomes what.
"""

from __future__ import annotations

from .._trace import OTLP_PRODUCER
from ..errors import OtlpBodyTooLargeError, OtlpContentTypeError, OtlpDecodeError, OtlpDependencyError
from ._conventions import normalize_span, run_key_of
from ._decode import decode_request, encode_response
from ._events import chat_messages, events_for_run, run_id_for
from ._run import assemble_run, group_runs
from ._types import (
    DecodedRequest,
    DecodeLimits,
    ErrorInfo,
    Event,
    Link,
    Message,
    NormalizedSpan,
    OtlpAgent,
    OtlpHandoff,
    OtlpRun,
    OtlpSpanError,
    OtlpStep,
    OtlpToolCall,
    OtlpTurn,
    Part,
    Scope,
    Span,
    SpanRejection,
    Status,
    ToolInfo,
    Usage,
)

__all__ = [
    "OTLP_PRODUCER",
    "DecodeLimits",
    "DecodedRequest",
    "ErrorInfo",
    "Event",
    "Link",
    "Message",
    "NormalizedSpan",
    "OtlpAgent",
    "OtlpBodyTooLargeError",
    "OtlpContentTypeError",
    "OtlpDecodeError",
    "OtlpDependencyError",
    "OtlpHandoff",
    "OtlpRun",
    "OtlpSpanError",
    "OtlpStep",
    "OtlpToolCall",
    "OtlpTurn",
    "Part",
    "Scope",
    "Span",
    "SpanRejection",
    "Status",
    "ToolInfo",
    "Usage",
    "assemble_run",
    "chat_messages",
    "decode_request",
    "encode_response",
    "events_for_run",
    "group_runs",
    "normalize_span",
    "run_key_of",
    "run_id_for",
]
