"""The protobuf reader: an `ExportTraceServiceRequest` parsed by the `protobuf` package (upb, in C)
in one call; only when that fails is the body split by hand at the wire level (request → resource
spans → scope spans → span) so that each span is parsed, and refused, on its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import OtlpDecodeError, OtlpDependencyError
from ._decode_checks import MAX_TIME_NS, Reject, SpanReader, b64, float_value
from ._types import Event, Link, Scope

_ZERO16, _ZERO8 = bytes(16), bytes(8)


class Protobuf:
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


_PB: Protobuf | None = None


def protobuf_classes() -> Protobuf:
    global _PB
    if _PB is None:
        _PB = Protobuf()
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


class ProtobufReader(SpanReader):
    """Decodes one protobuf request; collects spans and rejections."""

    def read(self, body: bytes) -> None:
        pb = protobuf_classes()
        try:
            request = pb.Request.FromString(body)
        except pb.DecodeError:
            self.salvage(body, pb)
            return
        for rs in request.resource_spans:
            try:
                resource = self.attrs(rs.resource.attributes, 0)
            except Reject as r:
                r.within("resource.attributes")
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        self.reject(r, *_pb_ids(sp.trace_id, sp.span_id))
                continue
            for ss in rs.scope_spans:
                scope = ss.scope
                try:
                    scope_out: Scope = {"name": self.text(scope.name), "version": self.text(scope.version)}
                except Reject as r:
                    r.within("scope")
                    for sp in ss.spans:
                        self.reject(r, *_pb_ids(sp.trace_id, sp.span_id))
                    continue
                for sp in ss.spans:
                    self.span(sp, resource, scope_out)

    def salvage(self, body: bytes, pb: Protobuf) -> None:
        """The body did not parse whole: split it at the wire level and parse each span alone."""
        try:
            for rs in _wire_children(body, 1):
                fields = list(_wire_fields(rs))
                resource_bytes = b"".join(v for f, v in fields if f == 1 and v is not None)
                scopes = [(s, _wire_children(s, 2)) for f, s in fields if f == 2 and s is not None]
                resource_error: Reject | None = None
                resource: dict[str, Any] = {}
                try:
                    resource = self.attrs(pb.Resource.FromString(resource_bytes).attributes, 0)
                except pb.DecodeError as exc:
                    resource_error = _undecodable(exc).within("resource")
                except Reject as r:
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
                        except Reject as r:
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
                        self.span(sp, resource, scope_out)
        except _WireError:
            raise OtlpDecodeError(
                "the body is not an OTLP ExportTraceServiceRequest in protobuf (malformed wire data)"
            ) from None

    def span(self, sp: Any, resource: dict[str, Any], scope: Scope) -> None:
        tid: bytes = sp.trace_id
        sid: bytes = sp.span_id
        try:
            if len(tid) != 16 or tid == _ZERO16:
                raise Reject("invalid_id", _id_problem(tid, 16), "trace_id")
            if len(sid) != 8 or sid == _ZERO8:
                raise Reject("invalid_id", _id_problem(sid, 8), "span_id")
            pid: bytes = sp.parent_span_id
            if pid and len(pid) != 8:
                raise Reject("invalid_id", _id_problem(pid, 8), "parent_span_id")
            start: int = sp.start_time_unix_nano
            end: int = sp.end_time_unix_nano
            self.timestamps(start, end)
            try:
                name = self.text(sp.name)
            except Reject as r:
                raise r.within("name") from None
            attributes = self.attrs(sp.attributes, 0)
            pb_events = sp.events
            events = self.events(pb_events) if pb_events else []
            pb_links = sp.links
            links = self.links(pb_links) if pb_links else []
            status = sp.status
            code: int = status.code
            try:
                message = self.text(status.message)
            except Reject as r:
                raise r.within("status.message") from None
            kind: int = sp.kind
        except Reject as r:
            self.reject(r, *_pb_ids(tid, sid))
            return
        self.accept(
            (tid.hex(), sid.hex(), pid.hex() if pid and pid != _ZERO8 else None),
            name,
            kind,
            (start, end),
            (code, message),
            (attributes, events, links, resource, scope),
        )

    def events(self, pb_events: Any) -> list[Event]:
        self.count(len(pb_events), self.max_events, "events")
        events: list[Event] = []
        for i, ev in enumerate(pb_events):
            try:
                t = ev.time_unix_nano
                if t > MAX_TIME_NS:
                    raise Reject("invalid_timestamp", "is past the year 9999", "time_unix_nano")
                events.append(
                    {
                        "name": self.text(ev.name),
                        "time": t or None,
                        "attributes": self.attrs(ev.attributes, 0),
                    }
                )
            except Reject as r:
                raise r.within(f"events[{i}]") from None
        return events

    def links(self, pb_links: Any) -> list[Link]:
        self.count(len(pb_links), self.max_links, "links")
        links: list[Link] = []
        for i, ln in enumerate(pb_links):
            try:
                lt: bytes = ln.trace_id
                ls: bytes = ln.span_id
                if len(lt) != 16 or len(ls) != 8:
                    raise Reject("invalid_id", "has an id of the wrong length")
                links.append(
                    {
                        "trace_id": lt.hex(),
                        "span_id": ls.hex(),
                        "attributes": self.attrs(ln.attributes, 0),
                    }
                )
            except Reject as r:
                raise r.within(f"links[{i}]") from None
        return links

    def attrs(self, kvs: Any, depth: int) -> dict[str, Any]:
        if len(kvs) > self.max_attributes:
            raise Reject(
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
                    out[key] = self.value(v, which, depth)
            except Reject as r:
                raise r.within(key if depth else f"attributes[{key!r}]") from None
        return out

    def value(self, v: Any, which: str | None, depth: int) -> Any:
        if which == "string_value":
            return self.text(v.string_value)
        if which == "int_value" or which == "bool_value":
            return getattr(v, which)
        if which == "double_value":
            return float_value(v.double_value)
        if which == "array_value":
            if depth >= self.max_depth:
                raise Reject("nesting_too_deep", f"nests arrays / kvlists deeper than {self.max_depth}")
            values = v.array_value.values
            self.count(len(values), self.max_attributes, "array items")
            return [self.value(x, x.WhichOneof("value"), depth + 1) for x in values]
        if which == "kvlist_value":
            if depth >= self.max_depth:
                raise Reject("nesting_too_deep", f"nests arrays / kvlists deeper than {self.max_depth}")
            return self.attrs(v.kvlist_value.values, depth + 1)
        if which == "bytes_value":
            b: bytes = v.bytes_value
            if len(b) > self.max_chars:
                raise Reject("value_too_large", f"is {len(b)} bytes long, past the limit of {self.max_chars}")
            return b64(b)
        return None


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


def _undecodable(exc: Exception) -> Reject:
    text = str(exc)
    if "UTF-8" in text:
        return Reject("invalid_text", "a string is not valid UTF-8")
    if "Depth" in text or "depth" in text or "recursion" in text:
        return Reject("nesting_too_deep", "values nest deeper than protobuf decoding allows")
    return Reject("undecodable", "its protobuf bytes do not parse")
