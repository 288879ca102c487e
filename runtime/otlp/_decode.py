"""Reading an OTLP/HTTP `ExportTraceServiceRequest` body, protobuf or JSON, into plain spans.

What refuses the whole request (`OtlpDecodeError`, HTTP 400) and what refuses one span:

- the whole request: a content type or encoding we do not read (415), a body past the size limit once
  gunzipped (413), a body that is not protobuf / not JSON at all, or whose envelope (the lists of
  resource spans, scope spans and spans) is not of the OTLP shape (400);
- one span, the others kept: missing or invalid ids, invalid UTF-8 / a lone surrogate / a NUL in any
  of its strings, a value past the size limit, too many attributes / events / links, values nested
  too deep, a start or end time of 0 or past the year 9999, a field of the wrong type (JSON), and —
  protobuf — bytes that do not parse on their own. A resource that cannot be read refuses its spans.

Protobuf is parsed by the `protobuf` package (upb, in C) in one call; only when that fails is the body
split by hand at the wire level (request → resource spans → scope spans → span) so that each span
is parsed, and refused, on its own. JSON follows the OTLP/JSON rules: ids as hex, 64-bit integers as
strings or numbers, enums as integers (their names are read too), lowerCamelCase or snake_case keys.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Iterator
from typing import Any, NoReturn

from ..errors import OtlpBodyTooLargeError, OtlpContentTypeError, OtlpDecodeError, OtlpDependencyError
from ._types import DecodedRequest, DecodeLimits, RejectReason, Scope, Span, SpanRejection

__all__ = ["decode_request", "encode_response"]

_KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
_STATUS = ("unset", "ok", "error")
_KIND_NAMES = {f"SPAN_KIND_{k.upper()}": i for i, k in enumerate(_KINDS)}
_STATUS_NAMES = {f"STATUS_CODE_{k.upper()}": i for i, k in enumerate(_STATUS)}
# 9999-12-31T23:59:59.999999999Z: the last instant Python's datetime (and PostgreSQL) can show.
MAX_TIME_NS = 253_402_300_799_999_999_999
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ZERO16, _ZERO8 = bytes(16), bytes(8)
_DEFAULT_LIMITS = DecodeLimits()
_SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON escape of a UTF-16 surrogate (\uD800-\uDFFF); only bodies holding one need the per-string
# surrogate check (a false positive such as an escaped backslash followed by "ud800" only costs time).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB89a-fA-F]")
_PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")


class _Reject(Exception):
    """One span is refused (internal: becomes a SpanRejection)."""

    def __init__(self, reason: RejectReason, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason: RejectReason = reason
        self.message = message
        self.field = field

    def within(self, prefix: str) -> _Reject:
        self.field = prefix if self.field is None else f"{prefix}.{self.field}"
        return self


def decode_request(
    body: bytes,
    content_type: str,
    *,
    content_encoding: str | None = None,
    limits: DecodeLimits | None = None,
) -> DecodedRequest:
    """Read an OTLP/HTTP traces request body.

        decoded = decode_request(request.body, request.content_type,
                                 content_encoding=request.headers.get("Content-Encoding"))
        decoded.spans          # [Span, ...] in request order
        decoded.rejections     # [SpanRejection, ...]: OTLP's partial_success.rejected_spans

    `content_type` is `application/x-protobuf` (or `application/protobuf`) or `application/json`,
    parameters ignored; `content_encoding` `gzip` or `identity`/None. Raises `OtlpDecodeError` (or
    its subclasses `OtlpContentTypeError`, `OtlpBodyTooLargeError`) when the request cannot be read
    as a whole, `OtlpDependencyError` for a protobuf body without the `otlp` extra installed, and
    nothing else, whatever the body holds."""
    limits = limits or _DEFAULT_LIMITS
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _PROTOBUF_TYPES:
        is_json = False
    elif media == "application/json":
        is_json = True
    else:
        raise OtlpContentTypeError(
            f"content type {content_type!r} is not read here: send application/x-protobuf or application/json"
        )
    body = _inflate(bytes(body), content_encoding, limits.max_body_bytes)
    if len(body) > limits.max_body_bytes:
        raise OtlpBodyTooLargeError(
            f"the body is {len(body)} bytes, more than the limit of {limits.max_body_bytes} bytes"
        )
    reader = _Reader(limits)
    if is_json:
        reader.read_json(body)
    else:
        reader.read_protobuf(body)
    return DecodedRequest(spans=reader.spans, rejections=reader.rejections)


def encode_response(decoded: DecodedRequest, content_type: str) -> bytes:
    """The `ExportTraceServiceResponse` body answering `decoded`, in the request's encoding: empty
    `partial_success` when every span was taken, else `rejected_spans` and `error_message`. (JSON
    needs no extra package; protobuf needs the `otlp` extra.)"""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _PROTOBUF_TYPES:
        pb = _protobuf()
        response = pb.Response()
        if decoded.rejections:
            response.partial_success.rejected_spans = decoded.rejected_spans
            response.partial_success.error_message = decoded.error_message
        out: bytes = response.SerializeToString()
        return out
    partial: dict[str, Any] = {}
    if decoded.rejections:
        # int64 as a decimal string, as the proto3 JSON mapping writes it.
        partial = {"rejectedSpans": str(decoded.rejected_spans), "errorMessage": decoded.error_message}
    return json.dumps({"partialSuccess": partial}, ensure_ascii=False).encode()


def _inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    enc = (encoding or "identity").strip().lower()
    if enc == "identity" or enc == "":
        return body
    if enc != "gzip":
        raise OtlpContentTypeError(f"content encoding {encoding!r} is not read here: send gzip or none")
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpDecodeError(f"the body is not valid gzip: {exc}") from None
    if len(out) > limit:
        raise OtlpBodyTooLargeError(f"the body inflates to more than the limit of {limit} bytes")
    if not inflater.eof:
        raise OtlpDecodeError("the gzip body is truncated")
    return out


class _Protobuf:
    """The protobuf classes, imported on first use (the `otlp` extra)."""

    def __init__(self) -> None:
        try:
            from google.protobuf.message import DecodeError
            from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
            from opentelemetry.proto.common.v1 import common_pb2
            from opentelemetry.proto.resource.v1 import resource_pb2
            from opentelemetry.proto.trace.v1 import trace_pb2
        except ImportError as exc:
            raise OtlpDependencyError(
                "reading OTLP protobuf needs the protobuf and opentelemetry-proto packages: "
                'pip install "arcana-console[otlp]" (OTLP/JSON needs neither)'
            ) from exc
        self.DecodeError: type[Exception] = DecodeError
        self.Request: Any = trace_service_pb2.ExportTraceServiceRequest
        self.Response: Any = trace_service_pb2.ExportTraceServiceResponse
        self.Resource: Any = resource_pb2.Resource
        self.Scope: Any = common_pb2.InstrumentationScope
        self.Span: Any = trace_pb2.Span


_PB: _Protobuf | None = None


def _protobuf() -> _Protobuf:
    global _PB
    if _PB is None:
        _PB = _Protobuf()
    return _PB


# --------------------------------------------------------------------------------------------------
# The protobuf wire format, for the slow path only


class _WireError(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    n = len(buf)
    while True:
        if pos >= n or shift > 63:
            raise _WireError
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _wire_fields(buf: bytes) -> Iterator[tuple[int, bytes | None]]:
    """(field number, bytes of a length-delimited field or None for the other wire types)."""
    pos, n = 0, len(buf)
    while pos < n:
        tag, pos = _varint(buf, pos)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise _WireError
        if wire_type == 0:
            _, pos = _varint(buf, pos)
            yield field, None
        elif wire_type == 1 or wire_type == 5:
            pos += 8 if wire_type == 1 else 4
            if pos > n:
                raise _WireError
            yield field, None
        elif wire_type == 2:
            length, pos = _varint(buf, pos)
            end = pos + length
            if end > n:
                raise _WireError
            yield field, buf[pos:end]
            pos = end
        else:  # groups (3, 4) are not in OTLP; 6 and 7 do not exist
            raise _WireError


def _wire_children(buf: bytes, wanted: int) -> list[bytes]:
    return [value for field, value in _wire_fields(buf) if field == wanted and value is not None]


# --------------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _float(value: float) -> float | str:
    # NaN and ±Infinity are not JSON: they become the proto3 JSON mapping's strings.
    if value - value == 0.0:
        return value
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


class _Reader:
    """Decodes one request; collects spans and rejections."""

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

    def reject(self, r: _Reject, trace_id: str | None = None, span_id: str | None = None) -> None:
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
            raise _Reject(
                "value_too_large", f"is {len(s)} characters long, past the limit of {self.max_chars}"
            )
        if "\x00" in s:
            raise _Reject("invalid_text", "contains a NUL character")
        if self.check_surrogates and _SURROGATE.search(s) is not None:
            raise _Reject("invalid_text", "is not valid UTF-8 (or holds a lone surrogate)")
        return s

    def timestamps(self, start: int, end: int) -> None:
        if start == 0:
            raise _Reject("invalid_timestamp", "is 0", "start_time_unix_nano")
        if end == 0:
            raise _Reject("invalid_timestamp", "is 0", "end_time_unix_nano")
        if start > MAX_TIME_NS:
            raise _Reject("invalid_timestamp", "is past the year 9999", "start_time_unix_nano")
        if end > MAX_TIME_NS:
            raise _Reject("invalid_timestamp", "is past the year 9999", "end_time_unix_nano")

    def count(self, n: int, limit: int, what: str) -> None:
        if n > limit:
            raise _Reject("too_many_items", f"has {n} {what}, past the limit of {limit}")

    # ---------------------------------------------------------------------------------------------
    # Protobuf

    def read_protobuf(self, body: bytes) -> None:
        pb = _protobuf()
        try:
            request = pb.Request.FromString(body)
        except pb.DecodeError:
            self.salvage_protobuf(body, pb)
            return
        for rs in request.resource_spans:
            try:
                resource = self.attrs_pb(rs.resource.attributes, 0)
            except _Reject as r:
                r.within("resource.attributes")
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        self.reject(r, *_pb_ids(sp.trace_id, sp.span_id))
                continue
            for ss in rs.scope_spans:
                scope = ss.scope
                try:
                    scope_out: Scope = {"name": self.text(scope.name), "version": self.text(scope.version)}
                except _Reject as r:
                    r.within("scope")
                    for sp in ss.spans:
                        self.reject(r, *_pb_ids(sp.trace_id, sp.span_id))
                    continue
                for sp in ss.spans:
                    self.span_pb(sp, resource, scope_out)

    def salvage_protobuf(self, body: bytes, pb: _Protobuf) -> None:
        """The body did not parse whole: split it at the wire level and parse each span alone."""
        try:
            for rs in _wire_children(body, 1):
                fields = list(_wire_fields(rs))
                resource_bytes = b"".join(v for f, v in fields if f == 1 and v is not None)
                scopes = [(s, _wire_children(s, 2)) for f, s in fields if f == 2 and s is not None]
                resource_error: _Reject | None = None
                resource: dict[str, Any] = {}
                try:
                    resource = self.attrs_pb(pb.Resource.FromString(resource_bytes).attributes, 0)
                except pb.DecodeError as exc:
                    resource_error = _undecodable(exc).within("resource")
                except _Reject as r:
                    resource_error = r.within("resource.attributes")
                for scope_bytes, span_chunks in scopes:
                    scope_error = resource_error
                    scope_out: Scope = {"name": "", "version": ""}
                    if scope_error is None:
                        try:
                            scope = pb.Scope.FromString(b"".join(_wire_children(scope_bytes, 1)))
                            scope_out = {"name": self.text(scope.name), "version": self.text(scope.version)}
                        except pb.DecodeError as exc:
                            scope_error = _undecodable(exc).within("scope")
                        except _Reject as r:
                            scope_error = r.within("scope")
                    for chunk in span_chunks:
                        if scope_error is not None:
                            self.reject(scope_error, *_wire_ids(chunk))
                            continue
                        try:
                            sp = pb.Span.FromString(chunk)
                        except pb.DecodeError as exc:
                            self.reject(_undecodable(exc), *_wire_ids(chunk))
                            continue
                        self.span_pb(sp, resource, scope_out)
        except _WireError:
            raise OtlpDecodeError(
                "the body is not an OTLP ExportTraceServiceRequest in protobuf (malformed wire data)"
            ) from None

    def span_pb(self, sp: Any, resource: dict[str, Any], scope: Scope) -> None:
        tid: bytes = sp.trace_id
        sid: bytes = sp.span_id
        try:
            if len(tid) != 16 or tid == _ZERO16:
                raise _Reject("invalid_id", _id_problem(tid, 16), "trace_id")
            if len(sid) != 8 or sid == _ZERO8:
                raise _Reject("invalid_id", _id_problem(sid, 8), "span_id")
            pid: bytes = sp.parent_span_id
            if pid and len(pid) != 8:
                raise _Reject("invalid_id", _id_problem(pid, 8), "parent_span_id")
            start: int = sp.start_time_unix_nano
            end: int = sp.end_time_unix_nano
            self.timestamps(start, end)
            try:
                name = self.text(sp.name)
            except _Reject as r:
                raise r.within("name") from None
            attributes = self.attrs_pb(sp.attributes, 0)
            events = []
            pb_events = sp.events
            if pb_events:
                self.count(len(pb_events), self.max_events, "events")
                for i, ev in enumerate(pb_events):
                    try:
                        t = ev.time_unix_nano
                        if t > MAX_TIME_NS:
                            raise _Reject("invalid_timestamp", "is past the year 9999", "time_unix_nano")
                        events.append(
                            {
                                "name": self.text(ev.name),
                                "time": t or None,
                                "attributes": self.attrs_pb(ev.attributes, 0),
                            }
                        )
                    except _Reject as r:
                        raise r.within(f"events[{i}]") from None
            links = []
            pb_links = sp.links
            if pb_links:
                self.count(len(pb_links), self.max_links, "links")
                for i, ln in enumerate(pb_links):
                    try:
                        lt: bytes = ln.trace_id
                        ls: bytes = ln.span_id
                        if len(lt) != 16 or len(ls) != 8:
                            raise _Reject("invalid_id", "has an id of the wrong length")
                        links.append(
                            {
                                "trace_id": lt.hex(),
                                "span_id": ls.hex(),
                                "attributes": self.attrs_pb(ln.attributes, 0),
                            }
                        )
                    except _Reject as r:
                        raise r.within(f"links[{i}]") from None
            status = sp.status
            code: int = status.code
            try:
                message = self.text(status.message)
            except _Reject as r:
                raise r.within("status.message") from None
            kind: int = sp.kind
        except _Reject as r:
            self.reject(r, *_pb_ids(tid, sid))
            return
        self.spans.append(
            {
                "trace_id": tid.hex(),
                "span_id": sid.hex(),
                "parent_span_id": pid.hex() if pid and pid != _ZERO8 else None,
                "name": name,
                "kind": _KINDS[kind] if 0 <= kind < 6 else "unspecified",  # type: ignore[typeddict-item]
                "start_time": start,
                "end_time": end,
                "status": {"code": _STATUS[code] if 0 <= code < 3 else "unset", "message": message},  # type: ignore[typeddict-item]
                "attributes": attributes,
                "events": events,  # type: ignore[typeddict-item]
                "links": links,  # type: ignore[typeddict-item]
                "resource": resource,
                "scope": scope,
            }
        )
        self.index += 1

    def attrs_pb(self, kvs: Any, depth: int) -> dict[str, Any]:
        if len(kvs) > self.max_attributes:
            raise _Reject(
                "too_many_items", f"has {len(kvs)} attributes, past the limit of {self.max_attributes}"
            )
        out: dict[str, Any] = {}
        max_chars = self.max_chars
        for kv in kvs:
            key: str = kv.key
            try:
                if len(key) > max_chars or "\x00" in key:
                    self.text(key)
                v = kv.value
                which = v.WhichOneof("value")
                # Strings are nearly every value: checked inline rather than through text().
                if which == "string_value":
                    s: str = v.string_value
                    if len(s) > max_chars or "\x00" in s:
                        self.text(s)
                    out[key] = s
                else:
                    out[key] = self.value_pb(v, which, depth)
            except _Reject as r:
                raise r.within(key if depth else f"attributes[{key!r}]") from None
        return out

    def value_pb(self, v: Any, which: str | None, depth: int) -> Any:
        if which == "string_value":
            return self.text(v.string_value)
        if which == "int_value" or which == "bool_value":
            return getattr(v, which)
        if which == "double_value":
            return _float(v.double_value)
        if which == "array_value":
            if depth >= self.max_depth:
                raise _Reject("nesting_too_deep", f"nests arrays / kvlists deeper than {self.max_depth}")
            values = v.array_value.values
            self.count(len(values), self.max_attributes, "array items")
            return [self.value_pb(x, x.WhichOneof("value"), depth + 1) for x in values]
        if which == "kvlist_value":
            if depth >= self.max_depth:
                raise _Reject("nesting_too_deep", f"nests arrays / kvlists deeper than {self.max_depth}")
            return self.attrs_pb(v.kvlist_value.values, depth + 1)
        if which == "bytes_value":
            b: bytes = v.bytes_value
            if len(b) > self.max_chars:
                raise _Reject(
                    "value_too_large", f"is {len(b)} bytes long, past the limit of {self.max_chars}"
                )
            return _b64(b)
        return None

    # ---------------------------------------------------------------------------------------------
    # JSON

    def read_json(self, body: bytes) -> None:
        try:
            text = body.decode("utf-8")
            self.check_surrogates = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
        except UnicodeDecodeError:
            # Invalid bytes become lone surrogates: the spans holding them are refused one by one.
            text = body.decode("utf-8", "surrogateescape")
            self.check_surrogates = True
        doc = _json_loads(text)
        if not isinstance(doc, dict):
            _bad_json("the body is JSON but not an object")
        rss = _get(doc, "resourceSpans", "resource_spans")
        for rs in _json_list(rss, "resourceSpans"):
            if not isinstance(rs, dict):
                _bad_json("an item of resourceSpans is not an object")
            sss = list(_json_list(_get(rs, "scopeSpans", "scope_spans"), "resourceSpans[].scopeSpans"))
            for ss in sss:
                if not isinstance(ss, dict):
                    _bad_json("an item of scopeSpans is not an object")
                _json_list(ss.get("spans"), "scopeSpans[].spans")
            resource_error: _Reject | None = None
            resource: dict[str, Any] = {}
            try:
                res = rs.get("resource")
                if res is not None:
                    if not isinstance(res, dict):
                        raise _Reject("invalid_value", "is not an object")
                    resource = self.attrs_json(res.get("attributes"), 0)
            except _Reject as r:
                resource_error = r.within("resource")
            for ss in sss:
                spans = ss.get("spans") or []
                scope_error = resource_error
                scope_out: Scope = {"name": "", "version": ""}
                if scope_error is None:
                    try:
                        scope = ss.get("scope") or {}
                        if not isinstance(scope, dict):
                            raise _Reject("invalid_value", "is not an object")
                        scope_out = {
                            "name": self.str_json(scope.get("name")),
                            "version": self.str_json(scope.get("version")),
                        }
                    except _Reject as r:
                        scope_error = r.within("scope")
                for sp in spans:
                    if scope_error is not None:
                        self.reject(scope_error, *_json_ids(sp))
                    else:
                        self.span_json(sp, resource, scope_out)

    def str_json(self, value: Any) -> str:
        if value is None:
            return ""
        if type(value) is not str:
            raise _Reject("invalid_value", "is not a string")
        return self.text(value)

    def span_json(self, sp: Any, resource: dict[str, Any], scope: Scope) -> None:
        try:
            if not isinstance(sp, dict):
                raise _Reject("invalid_value", "the span is not an object")
            tid = _hex_id(_get(sp, "traceId", "trace_id"), 16, "trace_id")
            sid = _hex_id(_get(sp, "spanId", "span_id"), 8, "span_id")
            pid_value = _get(sp, "parentSpanId", "parent_span_id")
            pid = _hex_id(pid_value, 8, "parent_span_id") if pid_value else None
            start = _json_uint(_get(sp, "startTimeUnixNano", "start_time_unix_nano"), "start_time_unix_nano")
            end = _json_uint(_get(sp, "endTimeUnixNano", "end_time_unix_nano"), "end_time_unix_nano")
            self.timestamps(start, end)
            try:
                name = self.str_json(sp.get("name"))
            except _Reject as r:
                raise r.within("name") from None
            kind = _json_enum(sp.get("kind"), _KIND_NAMES, "kind")
            attributes = self.attrs_json(sp.get("attributes"), 0)
            events = []
            raw_events = sp.get("events")
            if raw_events:
                if not isinstance(raw_events, list):
                    raise _Reject("invalid_value", "is not a list", "events")
                self.count(len(raw_events), self.max_events, "events")
                for i, ev in enumerate(raw_events):
                    try:
                        if not isinstance(ev, dict):
                            raise _Reject("invalid_value", "is not an object")
                        t = _json_uint(_get(ev, "timeUnixNano", "time_unix_nano"), "time_unix_nano")
                        if t > MAX_TIME_NS:
                            raise _Reject("invalid_timestamp", "is past the year 9999", "time_unix_nano")
                        events.append(
                            {
                                "name": self.str_json(ev.get("name")),
                                "time": t or None,
                                "attributes": self.attrs_json(ev.get("attributes"), 0),
                            }
                        )
                    except _Reject as r:
                        raise r.within(f"events[{i}]") from None
            links = []
            raw_links = sp.get("links")
            if raw_links:
                if not isinstance(raw_links, list):
                    raise _Reject("invalid_value", "is not a list", "links")
                self.count(len(raw_links), self.max_links, "links")
                for i, ln in enumerate(raw_links):
                    try:
                        if not isinstance(ln, dict):
                            raise _Reject("invalid_value", "is not an object")
                        links.append(
                            {
                                "trace_id": _hex_id(_get(ln, "traceId", "trace_id"), 16, "trace_id"),
                                "span_id": _hex_id(_get(ln, "spanId", "span_id"), 8, "span_id"),
                                "attributes": self.attrs_json(ln.get("attributes"), 0),
                            }
                        )
                    except _Reject as r:
                        raise r.within(f"links[{i}]") from None
            status = sp.get("status") or {}
            if not isinstance(status, dict):
                raise _Reject("invalid_value", "is not an object", "status")
            code = _json_enum(status.get("code"), _STATUS_NAMES, "status.code")
            try:
                message = self.str_json(status.get("message"))
            except _Reject as r:
                raise r.within("status.message") from None
        except _Reject as r:
            self.reject(r, *_json_ids(sp))
            return
        self.spans.append(
            {
                "trace_id": tid,
                "span_id": sid,
                "parent_span_id": pid,
                "name": name,
                "kind": _KINDS[kind] if 0 <= kind < 6 else "unspecified",  # type: ignore[typeddict-item]
                "start_time": start,
                "end_time": end,
                "status": {"code": _STATUS[code] if 0 <= code < 3 else "unset", "message": message},  # type: ignore[typeddict-item]
                "attributes": attributes,
                "events": events,  # type: ignore[typeddict-item]
                "links": links,  # type: ignore[typeddict-item]
                "resource": resource,
                "scope": scope,
            }
        )
        self.index += 1

    def attrs_json(self, kvs: Any, depth: int) -> dict[str, Any]:
        if kvs is None:
            return {}
        if not isinstance(kvs, list):
            raise _Reject("invalid_value", "attributes are not a list")
        if len(kvs) > self.max_attributes:
            raise _Reject(
                "too_many_items", f"has {len(kvs)} attributes, past the limit of {self.max_attributes}"
            )
        out: dict[str, Any] = {}
        for i, kv in enumerate(kvs):
            if not isinstance(kv, dict) or type(kv.get("key")) is not str:
                raise _Reject("invalid_value", f"attribute {i} is not an object with a string key")
            key: str = kv["key"]
            try:
                self.text(key)
                out[key] = self.value_json(kv.get("value"), depth)
            except _Reject as r:
                raise r.within(key if depth else f"attributes[{key!r}]") from None
        return out

    def value_json(self, v: Any, depth: int) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise _Reject("invalid_value", "is not an AnyValue object")
        for key, x in v.items():
            which = _ANY_KEYS.get(key)
            if which is None:
                continue
            if which == "string":
                if type(x) is not str:
                    raise _Reject("invalid_value", "stringValue is not a string")
                return self.text(x)
            if which == "bool":
                if type(x) is not bool:
                    raise _Reject("invalid_value", "boolValue is not a boolean")
                return x
            if which == "int":
                return _json_int(x)
            if which == "double":
                return _json_double(x)
            if which == "array" or which == "kvlist":
                if depth >= self.max_depth:
                    raise _Reject("nesting_too_deep", f"nests arrays / kvlists deeper than {self.max_depth}")
                if not isinstance(x, dict):
                    raise _Reject("invalid_value", f"{key} is not an object")
                values = x.get("values")
                if which == "kvlist":
                    return self.attrs_json(values, depth + 1)
                if values is None:
                    return []
                if not isinstance(values, list):
                    raise _Reject("invalid_value", "arrayValue.values is not a list")
                self.count(len(values), self.max_attributes, "array items")
                return [self.value_json(item, depth + 1) for item in values]
            # bytes: base64 in OTLP/JSON (standard or URL-safe alphabet, as the proto3 mapping reads)
            if type(x) is not str:
                raise _Reject("invalid_value", "bytesValue is not a base64 string")
            if len(x) > self.max_chars * 4 // 3 + 4:
                raise _Reject("value_too_large", f"is {len(x)} base64 characters, past the limit")
            try:
                raw = base64.b64decode(x.replace("-", "+").replace("_", "/"), validate=True)
            except (binascii.Error, ValueError):
                raise _Reject("invalid_value", "bytesValue is not valid base64") from None
            if len(raw) > self.max_chars:
                raise _Reject(
                    "value_too_large", f"is {len(raw)} bytes long, past the limit of {self.max_chars}"
                )
            return _b64(raw)
        return None


_ANY_KEYS = {
    "stringValue": "string",
    "string_value": "string",
    "boolValue": "bool",
    "bool_value": "bool",
    "intValue": "int",
    "int_value": "int",
    "doubleValue": "double",
    "double_value": "double",
    "arrayValue": "array",
    "array_value": "array",
    "kvlistValue": "kvlist",
    "kvlist_value": "kvlist",
    "bytesValue": "bytes",
    "bytes_value": "bytes",
}


class _HugeInt:
    """An integer literal too long to be a 64-bit value (json.loads refuses to read very long ones)."""

    def __init__(self, digits: str) -> None:
        self.digits = digits


def _lenient_int(digits: str) -> int | _HugeInt:
    return int(digits) if len(digits) <= 24 else _HugeInt(digits)


def _json_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        _bad_json("the JSON nests too deeply to be read")
    except ValueError as exc:
        if "digits" not in str(exc):
            _bad_json(f"the body is not JSON: {exc}")
    # An integer of thousands of digits: read again, keeping such integers aside (their spans are refused).
    try:
        return json.loads(text, parse_int=_lenient_int)
    except RecursionError:
        _bad_json("the JSON nests too deeply to be read")
    except ValueError as exc:
        _bad_json(f"the body is not JSON: {exc}")


def _bad_json(message: str) -> NoReturn:
    raise OtlpDecodeError(message)


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    value = d.get(camel)
    return d.get(snake) if value is None else value


def _json_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        _bad_json(f"{what} is not a list")
    return value


def _hex_id(value: Any, size: int, field: str) -> str:
    if type(value) is not str or len(value) != size * 2:
        raise _Reject(
            "invalid_id",
            f"must be {size * 2} hex digits (OTLP/JSON writes ids as hex, not base64)"
            if value
            else "is missing",
            field,
        )
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise _Reject("invalid_id", f"must be {size * 2} hex digits", field) from None
    if len(raw) != size:
        raise _Reject("invalid_id", f"must be {size * 2} hex digits", field)
    if raw == bytes(size):
        raise _Reject("invalid_id", "is all zeros", field)
    return raw.hex()


def _json_uint(value: Any, field: str) -> int:
    """A fixed64 as OTLP/JSON writes it: a decimal string or a number; absent is 0."""
    if value is None:
        return 0
    if type(value) is int:
        n = value
    elif type(value) is str and 0 < len(value) <= 24 and value.isascii() and value.isdigit():
        n = int(value)
    elif type(value) is float and value.is_integer() and 0 <= value < 2**64:
        n = int(value)
    else:
        raise _Reject("invalid_value", "is not an unsigned integer (a decimal string or a number)", field)
    if n < 0 or n >= 2**64:
        raise _Reject("invalid_timestamp", "is out of the 64-bit range", field)
    return n


def _json_int(value: Any) -> int:
    if type(value) is int:
        n = value
    elif type(value) is str:
        s = value[1:] if value[:1] == "-" else value
        if not (0 < len(s) <= 20 and s.isascii() and s.isdigit()):
            raise _Reject("invalid_value", "intValue is not a decimal integer")
        n = int(value)
    elif type(value) is float and value.is_integer():
        n = int(value)
    else:
        raise _Reject("invalid_value", "intValue is not an integer")
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise _Reject("invalid_value", "intValue is out of the 64-bit range")
    return n


_SPECIAL_DOUBLES = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}


def _json_double(value: Any) -> float | str:
    if type(value) is float:
        return _float(value)
    if type(value) is int:
        return _float(float(value)) if abs(value) < 2**1023 else ("Infinity" if value > 0 else "-Infinity")
    if type(value) is str:
        special = _SPECIAL_DOUBLES.get(value)
        if special is not None:
            return special
        if len(value) <= 64:
            try:
                return _float(float(value))
            except ValueError:
                pass
    raise _Reject("invalid_value", "doubleValue is not a number")


def _json_enum(value: Any, names: dict[str, int], field: str) -> int:
    if value is None:
        return 0
    if type(value) is int:
        return value
    if type(value) is str and value in names:
        return names[value]
    raise _Reject("invalid_value", "is not an enum value (an integer)", field)


def _json_ids(sp: Any) -> tuple[str | None, str | None]:
    if not isinstance(sp, dict):
        return None, None
    out: list[str | None] = []
    for camel, snake, size in (("traceId", "trace_id", 16), ("spanId", "span_id", 8)):
        try:
            out.append(_hex_id(_get(sp, camel, snake), size, camel))
        except _Reject:
            out.append(None)
    return out[0], out[1]


def _pb_ids(tid: bytes, sid: bytes) -> tuple[str | None, str | None]:
    return (tid.hex() if len(tid) == 16 and tid != _ZERO16 else None), (
        sid.hex() if len(sid) == 8 and sid != _ZERO8 else None
    )


def _wire_ids(chunk: bytes) -> tuple[str | None, str | None]:
    """The ids of a span that does not parse, read from its wire fields 1 and 2 when possible."""
    tid = sid = b""
    try:
        for field, value in _wire_fields(chunk):
            if field == 1 and value is not None:
                tid = value
            elif field == 2 and value is not None:
                sid = value
    except _WireError:
        pass
    return _pb_ids(tid, sid)


def _id_problem(raw: bytes, size: int) -> str:
    if not raw:
        return "is missing"
    if len(raw) != size:
        return f"is {len(raw)} bytes long, not {size}"
    return "is all zeros"


def _undecodable(exc: Exception) -> _Reject:
    text = str(exc)
    if "UTF-8" in text:
        return _Reject("invalid_text", "a string is not valid UTF-8")
    if "Depth" in text or "depth" in text or "recursion" in text:
        return _Reject("nesting_too_deep", "values nest deeper than protobuf decoding allows")
    return _Reject("undecodable", "its protobuf bytes do not parse")
