"""Building OTLP request bodies by hand for the tests: protobuf through the `opentelemetry-proto`
classes, JSON following the OTLP/JSON rules of the specification (hex ids, 64-bit integers as
strings, lowerCamelCase keys), plus a wire-level writer for bodies the protobuf library refuses to
build (values nested past its depth limit, invalid UTF-8)."""

from __future__ import annotations

import base64
import json
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in Unix nanoseconds
TRACE = "0af7651916cd43dd8448eb211c80319c"


def span_id(n: int) -> str:
    return f"{n:016x}"


def any_value(value: Any) -> AnyValue:
    v = AnyValue()
    if isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int):
        v.int_value = value
    elif isinstance(value, float):
        v.double_value = value
    elif isinstance(value, str):
        v.string_value = value
    elif isinstance(value, bytes):
        v.bytes_value = value
    elif isinstance(value, list):
        v.array_value.SetInParent()
        for item in value:
            v.array_value.values.append(any_value(item))
    elif isinstance(value, dict):
        v.kvlist_value.SetInParent()
        for key, item in value.items():
            v.kvlist_value.values.append(KeyValue(key=key, value=any_value(item)))
    return v


def spec(
    n: int = 1,
    *,
    name: str = "span",
    trace: str = TRACE,
    parent: int | None = None,
    start: int | None = None,
    end: int | None = None,
    attributes: dict[str, Any] | None = None,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    status: tuple[int, str] = (0, ""),
    kind: int = 1,
) -> dict[str, Any]:
    """A span described as a dict, written by `pb_request` / `json_request`."""
    return {
        "trace_id": trace,
        "span_id": span_id(n),
        "parent": span_id(parent) if parent else "",
        "name": name,
        "start": T0 + n * 1000 if start is None else start,
        "end": T0 + n * 1000 + 500 if end is None else end,
        "attributes": attributes or {},
        "events": events or [],
        "status": status,
        "kind": kind,
    }


def pb_request(
    spans: list[dict[str, Any]],
    resource: dict[str, Any] | None = None,
    scope: tuple[str, str] = ("test", "1.0"),
) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for key, value in (resource or {"service.name": "svc"}).items():
        rs.resource.attributes.append(KeyValue(key=key, value=any_value(value)))
    ss = rs.scope_spans.add()
    ss.scope.name, ss.scope.version = scope
    for s in spans:
        ss.spans.append(pb_span(s))
    return req.SerializeToString()


def pb_span(s: dict[str, Any]) -> PbSpan:
    sp = PbSpan(
        trace_id=bytes.fromhex(s["trace_id"]),
        span_id=bytes.fromhex(s["span_id"]),
        parent_span_id=bytes.fromhex(s["parent"]),
        name=s["name"],
        kind=s["kind"],
        start_time_unix_nano=s["start"],
        end_time_unix_nano=s["end"],
    )
    for key, value in s["attributes"].items():
        sp.attributes.append(KeyValue(key=key, value=any_value(value)))
    for i, (ename, eattrs) in enumerate(s["events"]):
        ev = sp.events.add(name=ename, time_unix_nano=s["start"] + i + 1)
        for key, value in eattrs.items():
            ev.attributes.append(KeyValue(key=key, value=any_value(value)))
    sp.status.code, sp.status.message = s["status"]
    return sp


def json_any(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return {"arrayValue": {"values": [json_any(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": json_any(v)} for k, v in value.items()]}}
    return {}


def json_attrs(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": json_any(v)} for k, v in attrs.items()]


def json_span(s: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": s["trace_id"],
        "spanId": s["span_id"],
        "name": s["name"],
        "kind": s["kind"],
        "startTimeUnixNano": str(s["start"]),
        "endTimeUnixNano": str(s["end"]),
        "attributes": json_attrs(s["attributes"]),
        "status": {"code": s["status"][0], "message": s["status"][1]},
    }
    if s["parent"]:
        out["parentSpanId"] = s["parent"]
    if s["events"]:
        out["events"] = [
            {"name": n, "timeUnixNano": str(s["start"] + i + 1), "attributes": json_attrs(a)}
            for i, (n, a) in enumerate(s["events"])
        ]
    return out


def json_document(
    spans: list[dict[str, Any]],
    resource: dict[str, Any] | None = None,
    scope: tuple[str, str] = ("test", "1.0"),
) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": json_attrs(resource or {"service.name": "svc"})},
                "scopeSpans": [
                    {"scope": {"name": scope[0], "version": scope[1]}, "spans": [json_span(s) for s in spans]}
                ],
            }
        ]
    }


def json_request(spans: list[dict[str, Any]], **kw: Any) -> bytes:
    return json.dumps(json_document(spans, **kw)).encode()


# --------------------------------------------------------------------------------------------------
# Wire-level writing (protobuf encoding by hand)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_fixed64(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + value.to_bytes(8, "little")


def wire_span(n: int, *, attributes: list[bytes] = (), name: bytes = b"s") -> bytes:  # type: ignore[assignment]
    """A Span message: ids, name, times and the given raw KeyValue messages."""
    body = (
        field_bytes(1, bytes.fromhex(TRACE))
        + field_bytes(2, bytes.fromhex(span_id(n)))
        + field_bytes(5, name)
        + field_fixed64(7, T0 + n)
        + field_fixed64(8, T0 + n + 10)
    )
    for kv in attributes:
        body += field_bytes(9, kv)
    return body


def wire_kv(key: bytes, any_value_bytes: bytes) -> bytes:
    return field_bytes(1, key) + field_bytes(2, any_value_bytes)


def wire_string_value(raw: bytes) -> bytes:
    return field_bytes(1, raw)  # AnyValue.string_value


def wire_nested_array(depth: int) -> bytes:
    """An AnyValue of `depth` nested arrays around a string."""
    value = wire_string_value(b"x")
    for _ in range(depth):
        value = field_bytes(5, field_bytes(1, value))  # AnyValue.array_value { values: value }
    return value


def wire_request(spans: list[bytes]) -> bytes:
    scope_spans = field_bytes(1, field_bytes(1, b"test")) + b"".join(field_bytes(2, s) for s in spans)
    resource = field_bytes(1, wire_kv(b"service.name", wire_string_value(b"svc")))
    resource_spans = field_bytes(1, resource) + field_bytes(2, scope_spans)
    return field_bytes(1, resource_spans)
