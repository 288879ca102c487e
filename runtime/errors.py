"""Every exception the runtime raises, in one place.

ArcanaRuntimeError                 base class: catch this to catch anything the runtime raises
├── ConfigError                    a Runtime / RuntimeConfig / pool argument is invalid
├── ProviderError                  the model provider failed
│   ├── ProviderTimeout            no answer within the configured timeout (after retries)
│   ├── ProviderConnectionError    the endpoint could not be reached (after retries)
│   ├── ProviderHTTPError          the endpoint answered with an error status (after retries)
│   └── ProviderResponseError      the endpoint answered 2xx with a body we cannot read
├── ContextOverflowError           a message cannot fit the context window even on its own
├── ToolDefinitionError            a tool function cannot be described to the model
├── TraceFormatError               a trace line or event is not a valid TraceEvent
│   └── RerunEditError             an edit of a step's context names no message it can change
├── OtlpDecodeError                an OTLP/HTTP request body cannot be read at all (HTTP 400)
│   ├── OtlpContentTypeError       its content type is neither protobuf nor JSON (HTTP 415)
│   └── OtlpBodyTooLargeError      it is (or inflates to) more than the size limit (HTTP 413)
└── OtlpDependencyError            OTLP protobuf needs the `otlp` extra, OtlpExportSink `otlp-export`

(An OTLP span that is wrong on its own is not an exception: `runtime.otlp.decode_request` keeps the
valid spans and lists the refused ones in `DecodedRequest.rejections`.)

And the one shape of an error answer, shared by the server's API, its uploads and the CLI (a runtime
module because the CLI cannot import the server): `error_body(error, [error_detail(...), ...])` gives
`{"error": "...", "detail": [{"index"|"line": n, "field": "metadata.turn", "message": "..."}]}`.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class ArcanaRuntimeError(Exception):
    """Base class of every error raised by `runtime`."""


class ConfigError(ArcanaRuntimeError, ValueError):
    """Raised at construction when a configuration value is invalid (unknown primitive name,
    negative window, a user tool named like an enabled primitive, ...)."""


class ProviderError(ArcanaRuntimeError):
    """Raised when the model provider fails. `provider` names the provider that failed."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider


class ProviderTimeout(ProviderError):
    """Raised when the provider did not answer within the timeout, after all retries."""


class ProviderConnectionError(ProviderError):
    """Raised when the provider endpoint could not be reached, after all retries."""


class ProviderHTTPError(ProviderError):
    """Raised when the provider answered with a non-2xx status (after retries for 429 and 5xx).
    `status_code` and `body` (truncated) say what it answered."""

    def __init__(
        self, message: str, *, status_code: int, body: str = "", provider: str | None = None
    ) -> None:
        super().__init__(message, provider=provider)
        self.status_code = status_code
        self.body = body


class ProviderResponseError(ProviderError):
    """Raised when a 2xx response cannot be parsed as a chat completion (or SSE stream)."""


class ContextOverflowError(ArcanaRuntimeError):
    """Raised by `ChatSession.send()` when a message is too large to fit the context window even
    alone (identity and tool schemas included). Nothing is silently truncated."""


class ToolDefinitionError(ArcanaRuntimeError, TypeError):
    """Raised when a tool function lacks what is needed to build its JSON schema."""


class TraceFormatError(ArcanaRuntimeError, ValueError):
    """Raised when a trace event is not a valid Arcana TraceEvent. `line` is the 1-based line number
    when it came from a file; `field` the dotted path of the offending value (`"metadata.turn"`,
    `"tool_call.args[2]"`) when one value is to blame."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line
        self.reason = message
        self.field = field


class RerunEditError(TraceFormatError):
    """Raised by `runtime.rerun.apply_edits` for an edit that cannot apply: an unknown operation, a
    message index the step does not have, a restore of a message that has no original to restore, an
    unpin of a message that is no pinned block. `field` is `edits[i].index` (or `.op`, `.content`)."""


class OtlpDecodeError(ArcanaRuntimeError, ValueError):
    """Raised by `runtime.otlp.decode_request` when a request body cannot be read as a whole: not
    protobuf / not JSON, or an envelope (`resourceSpans`, `scopeSpans`) of the wrong shape. `status`
    is the HTTP status the OTLP specification names for it (400 here, 413 / 415 in the subclasses)."""

    status = 400


class OtlpContentTypeError(OtlpDecodeError):
    """Raised when the content type is neither `application/x-protobuf` nor `application/json`, or
    the content encoding is neither gzip nor identity."""

    status = 415


class OtlpBodyTooLargeError(OtlpDecodeError):
    """Raised when the body, once gunzipped, is longer than `DecodeLimits.max_body_bytes`."""

    status = 413


class OtlpDependencyError(ArcanaRuntimeError, ImportError):
    """Raised when an OTLP protobuf body is read without the `protobuf` and `opentelemetry-proto`
    packages (`pip install "arcana-console[otlp]"`; OTLP/JSON needs neither), or an `OtlpExportSink`
    is made without `opentelemetry-sdk` and `opentelemetry-exporter-otlp-proto-http`
    (`pip install "arcana-console[otlp-export]"`)."""


# --------------------------------------------------------------------------------------------------
# The one error shape


class ErrorDetail(TypedDict):
    """One item of an error answer's `detail`: where (`index` in a batch, or 1-based `line` of a file;
    `field`, a dotted path, when one value is to blame) and what, in words a person understands."""

    message: str
    index: NotRequired[int]
    line: NotRequired[int]
    field: NotRequired[str]


class ErrorBody(TypedDict):
    error: str
    detail: list[ErrorDetail]


def error_detail(
    message: str, *, index: int | None = None, line: int | None = None, field: str | None = None
) -> ErrorDetail:
    """Build one `ErrorDetail`; absent parts are left out (never `null`).

    >>> error_detail("is in year 10000 once converted to UTC", index=3, field="timestamp")
    {'index': 3, 'field': 'timestamp', 'message': 'is in year 10000 once converted to UTC'}
    """
    out: dict[str, Any] = {}
    if index is not None:
        out["index"] = index
    if line is not None:
        out["line"] = line
    if field:
        out["field"] = field
    out["message"] = message
    return out  # type: ignore[return-value]


def error_body(error: str, detail: list[ErrorDetail] | None = None) -> ErrorBody:
    """The one error shape: `{"error": summary, "detail": [ErrorDetail, ...]}`."""
    return {"error": error, "detail": list(detail or [])}


def detail_text(d: Any) -> str:
    """One detail item as a line of text: `line 4: 'metadata.turn' is -1; ...` (the message names the
    field itself). Tolerates the `{"line", "error"}` items of uploads stored before this shape."""
    if not isinstance(d, dict):
        return str(d)
    if d.get("line") is not None:
        where = f"line {d['line']}: "
    elif d.get("index") is not None:
        where = f"event {d['index']}: "
    else:
        where = ""
    return f"{where}{d.get('message', d.get('error', ''))}"
