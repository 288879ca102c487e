"""What the protobuf and JSON readers share: the refusal of one span (`Reject`), the limits and
checks every value goes through (`SpanReader`: length, NUL, surrogates, timestamps, counts), and the
values both write the same way (kinds, status codes, doubles, bytes)."""

from __future__ import annotations

import base64
import re
from typing import Any

from ._types import DecodeLimits, Event, Link, RejectReason, Scope, Span, SpanRejection

KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
STATUS = ("unset", "ok", "error")
# 9999-12-31T23:59:59.999999999Z: the last instant Python's datetime (and PostgreSQL) can show.
MAX_TIME_NS = 253_402_300_799_999_999_999
_SURROGATE = re.compile("[\ud800-\udfff]")


class Reject(Exception):
    """One span is refused (internal: becomes a SpanRejection)."""

    def __init__(self, reason: RejectReason, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason: RejectReason = reason
        self.message = message
        self.field = field

    def within(self, prefix: str) -> Reject:
        self.field = prefix if self.field is None else f"{prefix}.{self.field}"
        return self


class SpanReader:
    """Decodes one request; collects spans and rejections. The protobuf and JSON readers are its
    subclasses; it holds the limits and the checks they share."""

    def __init__(self, limits: DecodeLimits) -> None:
        self.max_attributes = limits.max_attributes
        self.max_events = limits.max_events
        self.max_links = limits.max_links
        self.max_chars = limits.max_value_chars
        self.max_depth = limits.max_depth
        self.check_surrogates = False
        self.spans: list[Span] = []
        self.rejections: list[SpanRejection] = []
        self.index = 0

    def read(self, body: bytes) -> None:
        raise NotImplementedError

    def accept(
        self,
        ids: tuple[str, str, str | None],
        name: str,
        kind: int,
        times: tuple[int, int],
        status: tuple[int, str],
        parts: tuple[dict[str, Any], list[Event], list[Link], dict[str, Any], Scope],
    ) -> None:
        """Keep one valid span: `ids` (trace, span, parent) in lowercase hex, `kind` and `status`'s
        code as OTLP's numbers, `parts` its attributes, events, links, resource and scope."""
        (trace_id, span_id, parent), (code, message) = ids, status
        attributes, events, links, resource, scope = parts
        self.spans.append(
            {
                "trace_id": trace_id,
                "span_id": span_id,
                "parent_span_id": parent,
                "name": name,
                "kind": KINDS[kind] if 0 <= kind < 6 else "unspecified",  # type: ignore[typeddict-item]
                "start_time": times[0],
                "end_time": times[1],
                "status": {"code": STATUS[code] if 0 <= code < 3 else "unset", "message": message},  # type: ignore[typeddict-item]
                "attributes": attributes,
                "events": events,
                "links": links,
                "resource": resource,
                "scope": scope,
            }
        )
        self.index += 1

    def reject(self, r: Reject, trace_id: str | None = None, span_id: str | None = None) -> None:
        self.rejections.append(
            {
                "index": self.index,
                "trace_id": trace_id,
                "span_id": span_id,
                "reason": r.reason,
                "field": r.field,
                "message": r.message,
            }
        )
        self.index += 1

    def text(self, s: str) -> str:
        if len(s) > self.max_chars:
            raise Reject(
                "value_too_large", f"is {len(s)} characters long, past the limit of {self.max_chars}"
            )
        if "\x00" in s:
            raise Reject("invalid_text", "contains a NUL character")
        if self.check_surrogates and _SURROGATE.search(s) is not None:
            raise Reject("invalid_text", "is not valid UTF-8 (or holds a lone surrogate)")
        return s

    def timestamps(self, start: int, end: int) -> None:
        if start == 0:
            raise Reject("invalid_timestamp", "is 0", "start_time_unix_nano")
        if end == 0:
            raise Reject("invalid_timestamp", "is 0", "end_time_unix_nano")
        if start > MAX_TIME_NS:
            raise Reject("invalid_timestamp", "is past the year 9999", "start_time_unix_nano")
        if end > MAX_TIME_NS:
            raise Reject("invalid_timestamp", "is past the year 9999", "end_time_unix_nano")

    def count(self, n: int, limit: int, what: str) -> None:
        if n > limit:
            raise Reject("too_many_items", f"has {n} {what}, past the limit of {limit}")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def float_value(value: float) -> float | str:
    # NaN and ±Infinity are not JSON: they become the proto3 JSON mapping's strings.
    if value - value == 0.0:
        return value
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
