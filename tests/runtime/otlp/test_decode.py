"""`runtime.otlp.decode_request`: protobuf and JSON bodies into plain spans, the whole-request errors
(400 / 413 / 415) and the per-span rejections that keep the valid spans of the same request."""

from __future__ import annotations

import copy
import gzip
import json
import sys

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from runtime.otlp import (
    DecodeLimits,
    OtlpBodyTooLargeError,
    OtlpContentTypeError,
    OtlpDecodeError,
    OtlpDependencyError,
    _decode,
    _decode_protobuf,
    decode_request,
    encode_response,
)

from .builders import (
    T0,
    TRACE,
    field_bytes,
    json_document,
    json_request,
    pb_request,
    span_id,
    spec,
    wire_kv,
    wire_nested_array,
    wire_request,
    wire_span,
    wire_string_value,
)

PB = "application/x-protobuf"
JSON = "application/json"

RICH = spec(
    3,
    name="chat gpt-4o",
    parent=1,
    kind=3,
    status=(2, "boom"),
    attributes={
        "s": "text é ✓",
        "i": -(2**63),
        "big": 2**63 - 1,
        "d": 1.5,
        "b": True,
        "arr": ["a", 1, [2.5, False]],
        "kv": {"x": {"y": "z"}},
        "raw": b"\x00\x01\xff",
    },
    events=[("exception", {"exception.type": "ValueError", "exception.message": "bad"})],
)


def test_it_decodes_a_protobuf_request() -> None:
    decoded = decode_request(pb_request([RICH], resource={"service.name": "svc", "env": "prod"}), PB)
    assert decoded.rejections == [] and decoded.rejected_spans == 0 and decoded.error_message == ""
    [span] = decoded.spans
    assert span["trace_id"] == TRACE
    assert span["span_id"] == "0000000000000003"
    assert span["parent_span_id"] == "0000000000000001"
    assert span["name"] == "chat gpt-4o"
    assert span["kind"] == "client"
    assert (span["start_time"], span["end_time"]) == (T0 + 3000, T0 + 3500)
    assert span["status"] == {"code": "error", "message": "boom"}
    assert span["attributes"] == {
        "s": "text é ✓",
        "i": -(2**63),
        "big": 2**63 - 1,
        "d": 1.5,
        "b": True,
        "arr": ["a", 1, [2.5, False]],
        "kv": {"x": {"y": "z"}},
        "raw": "AAH/",  # bytes as base64 text
    }
    assert span["events"] == [
        {
            "name": "exception",
            "time": T0 + 3001,
            "attributes": {"exception.type": "ValueError", "exception.message": "bad"},
        }
    ]
    assert span["resource"] == {"service.name": "svc", "env": "prod"}
    assert span["scope"] == {"name": "test", "version": "1.0"}


def test_it_reads_json_exactly_as_protobuf() -> None:
    from_pb = decode_request(pb_request([RICH, spec(4)]), PB)
    from_json = decode_request(json_request([RICH, spec(4)]), JSON)
    assert from_json.spans == from_pb.spans


def test_it_reads_json_in_snake_case_with_numbers_enum_names_and_uppercase_ids() -> None:
    body = {
        "resource_spans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"string_value": "svc"}}]},
                "scope_spans": [
                    {
                        "scope": {"name": "s"},
                        "spans": [
                            {
                                "trace_id": TRACE.upper(),
                                "span_id": "00000000000000AB",
                                "parent_span_id": "",
                                "name": "n",
                                "kind": "SPAN_KIND_SERVER",
                                "start_time_unix_nano": T0,
                                "end_time_unix_nano": T0 + 5,
                                "attributes": [
                                    {"key": "n", "value": {"int_value": 7}},
                                    {"key": "d", "value": {"double_value": "Infinity"}},
                                    {"key": "e", "value": {}},
                                    {"key": "l", "value": {"array_value": {}}},
                                ],
                                "status": {"code": "STATUS_CODE_OK"},
                            }
                        ],
                    }
                ],
            }
        ]
    }
    [span] = decode_request(json.dumps(body).encode(), "application/json; charset=utf-8").spans
    assert span["trace_id"] == TRACE and span["span_id"] == "00000000000000ab"
    assert span["parent_span_id"] is None
    assert span["kind"] == "server" and span["status"] == {"code": "ok", "message": ""}
    assert span["attributes"] == {"n": 7, "d": "Infinity", "e": None, "l": []}
    assert span["scope"] == {"name": "s", "version": ""}


def test_non_finite_doubles_become_the_proto3_json_strings() -> None:
    attrs = {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")}
    for body, ctype in (
        (pb_request([spec(attributes=attrs)]), PB),
        (json_request([spec(attributes=attrs)]), JSON),
    ):
        [span] = decode_request(body, ctype).spans
        assert span["attributes"] == {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity"}


def test_it_reads_gzip() -> None:
    body = gzip.compress(pb_request([spec(1), spec(2)]))
    assert len(decode_request(body, PB, content_encoding="gzip").spans) == 2


def test_an_all_zero_parent_is_no_parent() -> None:
    s = spec(2)
    s["parent"] = "00" * 8
    [span] = decode_request(pb_request([s]), PB).spans
    assert span["parent_span_id"] is None


def test_an_empty_request_is_valid() -> None:
    assert decode_request(b"", PB).spans == []
    assert decode_request(b"{}", JSON).spans == []


# --------------------------------------------------------------------------------------------------
# The whole request refused


@pytest.mark.parametrize("ctype", ["text/plain", "application/grpc", "", "application/xml"])
def test_it_rejects_another_content_type(ctype: str) -> None:
    with pytest.raises(OtlpContentTypeError) as exc:
        decode_request(b"{}", ctype)
    assert exc.value.status == 415


def test_it_rejects_another_content_encoding() -> None:
    with pytest.raises(OtlpContentTypeError):
        decode_request(b"{}", JSON, content_encoding="br")


def test_it_rejects_a_body_past_the_limit_raw_or_inflated() -> None:
    limits = DecodeLimits(max_body_bytes=1000)
    with pytest.raises(OtlpBodyTooLargeError) as exc:
        decode_request(b"{" + b" " * 1000 + b"}", JSON, limits=limits)
    assert exc.value.status == 413
    bomb = gzip.compress(b"{" + b" " * 100_000 + b"}")
    assert len(bomb) < 1000
    with pytest.raises(OtlpBodyTooLargeError):
        decode_request(bomb, JSON, content_encoding="gzip", limits=limits)


@pytest.mark.parametrize(
    ("body", "ctype", "encoding"),
    [
        (b"\xff\xff\xff\xff", PB, None),  # a varint that never ends
        (b"\x0a\x50abc", PB, None),  # a length past the end
        (b"not json", JSON, None),
        (b"[]", JSON, None),
        (b'{"resourceSpans": {}}', JSON, None),
        (b'{"resourceSpans": [1]}', JSON, None),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": {}}]}]}', JSON, None),
        (b"[" * 100_000 + b"]" * 100_000, JSON, None),
        (b"\x1f\x8bnot gzip", PB, "gzip"),
        (gzip.compress(b"{}")[:-6], JSON, "gzip"),
    ],
)
def test_it_rejects_an_undecodable_body(body: bytes, ctype: str, encoding: str | None) -> None:
    with pytest.raises(OtlpDecodeError) as exc:
        decode_request(body, ctype, content_encoding=encoding)
    assert exc.value.status == 400


def test_it_says_to_install_the_extra_when_protobuf_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_decode_protobuf, "_PB", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.trace.v1", None)
    with pytest.raises(OtlpDependencyError, match=r"arcana-console\[otlp\]"):
        decode_request(pb_request([spec(1)]), PB)
    # JSON needs no extra package.
    assert len(decode_request(json_request([spec(1)]), JSON).spans) == 1


# --------------------------------------------------------------------------------------------------
# One span refused, the others kept


def _one_bad(bad: dict, ctype: str = PB) -> tuple[list[str], list[dict]]:
    good = [spec(1), spec(3)]
    build = pb_request if ctype == PB else json_request
    decoded = decode_request(build([good[0], bad, good[1]]), ctype)
    assert decoded.rejected_spans == 1
    return [s["span_id"] for s in decoded.spans], decoded.rejections  # type: ignore[return-value]


@pytest.mark.parametrize("ctype", [PB, JSON])
@pytest.mark.parametrize(
    ("change", "reason", "field"),
    [
        ({"trace_id": ""}, "invalid_id", "trace_id"),
        ({"trace_id": "00" * 16}, "invalid_id", "trace_id"),
        ({"trace_id": "ab" * 8}, "invalid_id", "trace_id"),
        ({"span_id": ""}, "invalid_id", "span_id"),
        ({"span_id": "00" * 8}, "invalid_id", "span_id"),
        ({"parent": "abcd"}, "invalid_id", "parent_span_id"),
        ({"start": 0}, "invalid_timestamp", "start_time_unix_nano"),
        ({"end": 0}, "invalid_timestamp", "end_time_unix_nano"),
        ({"name": "a\x00b"}, "invalid_text", "name"),
        ({"attributes": {"k": "v\x00"}}, "invalid_text", "attributes['k']"),
        ({"attributes": {"k\x00": "v"}}, "invalid_text", "attributes['k\\x00']"),
        ({"attributes": {"k": ["ok", {"deep": "n\x00"}]}}, "invalid_text", "attributes['k'].deep"),
        ({"events": [("e", {"k": "\x00"})]}, "invalid_text", "events[0].attributes['k']"),
        ({"status": (2, "\x00")}, "invalid_text", "status.message"),
        ({"attributes": {"big": "x" * 2001}}, "value_too_large", "attributes['big']"),
        ({"attributes": {"blob": b"x" * 2001}}, "value_too_large", "attributes['blob']"),
        ({"attributes": {f"a{i}": i for i in range(51)}}, "too_many_items", None),
        ({"attributes": {"d": [[[["x"]]]]}}, "nesting_too_deep", "attributes['d']"),
    ],
)
def test_it_rejects_one_bad_span_and_keeps_the_others(
    ctype: str, change: dict, reason: str, field: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        _decode, "_DEFAULT_LIMITS", DecodeLimits(max_value_chars=2000, max_attributes=50, max_depth=3)
    )
    bad = spec(2) | change
    kept, [rejection] = _one_bad(bad, ctype)
    assert kept == [span_id(1), span_id(3)]
    assert rejection["index"] == 1
    assert rejection["reason"] == reason
    assert rejection["field"] == field
    assert rejection["message"]
    if reason != "invalid_id":
        assert (rejection["trace_id"], rejection["span_id"]) == (TRACE, span_id(2))


def test_it_rejects_ten_thousand_attributes_by_default() -> None:
    kept, [rejection] = _one_bad(spec(2, attributes={f"a{i}": i for i in range(10_000)}))
    assert rejection["reason"] == "too_many_items" and "10000 attributes" in rejection["message"]
    assert kept == [span_id(1), span_id(3)]


def test_it_rejects_megabytes_in_one_value_by_default() -> None:
    kept, [rejection] = _one_bad(spec(2, attributes={"gen_ai.input.messages": "x" * 3_000_000}))
    assert rejection["reason"] == "value_too_large"
    assert rejection["field"] == "attributes['gen_ai.input.messages']"


def test_protobuf_with_invalid_utf8_or_nesting_past_the_library_keeps_the_other_spans() -> None:
    bad_text = wire_span(2, attributes=[wire_kv(b"k", wire_string_value(b"caf\xe9"))])
    too_deep = wire_span(3, attributes=[wire_kv(b"k", wire_nested_array(200))])
    garbage = field_bytes(1, bytes.fromhex(TRACE)) + field_bytes(2, bytes.fromhex(span_id(4))) + b"\x0f\x00"
    body = wire_request([wire_span(1), bad_text, too_deep, garbage, wire_span(5)])
    decoded = decode_request(body, PB)
    assert [s["span_id"] for s in decoded.spans] == [span_id(1), span_id(5)]
    assert [(r["index"], r["span_id"], r["reason"]) for r in decoded.rejections] == [
        (1, span_id(2), "invalid_text"),
        (2, span_id(3), "nesting_too_deep"),
        (3, span_id(4), "undecodable"),
    ]
    assert decoded.spans[1]["resource"] == {"service.name": "svc"}


def test_json_with_invalid_utf8_or_lone_surrogates_keeps_the_other_spans() -> None:
    doc = json_document([spec(1), spec(2, attributes={"k": "MARK"}), spec(3, name="NAME"), spec(4)])
    text = json.dumps(doc).replace('"NAME"', '"bad \\udc80 name"')
    body = text.encode().replace(b"MARK", b"caf\xe9")
    decoded = decode_request(body, JSON)
    assert [s["span_id"] for s in decoded.spans] == [span_id(1), span_id(4)]
    assert [(r["span_id"], r["reason"], r["field"]) for r in decoded.rejections] == [
        (span_id(2), "invalid_text", "attributes['k']"),
        (span_id(3), "invalid_text", "name"),
    ]
    # A surrogate pair escape is a valid character, not a lone surrogate.
    ok = json.dumps(json_document([spec(1, name="N")])).replace('"N"', '"\\ud83d\\ude00"')
    assert decode_request(ok.encode(), JSON).spans[0]["name"] == "😀"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"intValue": "9223372036854775808"}, "invalid_value"),
        ({"intValue": "12a"}, "invalid_value"),
        ({"intValue": True}, "invalid_value"),
        ({"intValue": 1e300}, "invalid_value"),
        ({"stringValue": 5}, "invalid_value"),
        ({"boolValue": "true"}, "invalid_value"),
        ({"doubleValue": "fast"}, "invalid_value"),
        ({"bytesValue": "not base64!"}, "invalid_value"),
        ({"arrayValue": {"values": "x"}}, "invalid_value"),
        ("a string", "invalid_value"),
    ],
)
def test_json_rejects_a_span_with_a_value_of_the_wrong_type(value: object, reason: str) -> None:
    doc = json_document([spec(1), spec(2), spec(3)])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["attributes"] = [{"key": "k", "value": value}]
    decoded = decode_request(json.dumps(doc).encode(), JSON)
    assert [s["span_id"] for s in decoded.spans] == [span_id(1), span_id(3)]
    assert [(r["reason"], r["field"]) for r in decoded.rejections] == [(reason, "attributes['k']")]


def test_json_rejects_times_past_9999_and_ids_in_base64() -> None:
    doc = json_document([spec(1), spec(2), spec(3), spec(4)])
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["endTimeUnixNano"] = "253402300800000000000"  # 10000-01-01
    spans[2]["spanId"] = "AAAAAAAAAAM="  # base64, not hex
    decoded = decode_request(json.dumps(doc).encode(), JSON)
    assert [s["span_id"] for s in decoded.spans] == [span_id(1), span_id(4)]
    assert [(r["reason"], r["field"]) for r in decoded.rejections] == [
        ("invalid_timestamp", "end_time_unix_nano"),
        ("invalid_id", "span_id"),
    ]
    assert "hex, not base64" in decoded.rejections[1]["message"]


def test_json_with_an_integer_of_thousands_of_digits_keeps_the_other_spans() -> None:
    doc = json_document([spec(1), spec(2, attributes={"k": "MARK"}), spec(3)])
    text = json.dumps(doc).replace('{"stringValue": "MARK"}', '{"intValue": ' + "9" * 5000 + "}")
    decoded = decode_request(text.encode(), JSON)
    assert [s["span_id"] for s in decoded.spans] == [span_id(1), span_id(3)]
    assert decoded.rejections[0]["reason"] == "invalid_value"


def test_a_bad_resource_refuses_its_spans_only() -> None:
    good = json_document([spec(1)])
    bad = json_document([spec(2), spec(3)], resource={"service.name": "a\x00b"})
    doc = {
        "resourceSpans": good["resourceSpans"] + bad["resourceSpans"] + copy.deepcopy(good["resourceSpans"])
    }
    decoded = decode_request(json.dumps(doc).encode(), JSON)
    assert [s["span_id"] for s in decoded.spans] == [span_id(1), span_id(1)]
    assert [(r["index"], r["span_id"], r["field"]) for r in decoded.rejections] == [
        (1, span_id(2), "resource.attributes['service.name']"),
        (2, span_id(3), "resource.attributes['service.name']"),
    ]
    decoded_pb = decode_request(pb_request([spec(2), spec(3)], resource={"service.name": "a\x00b"}), PB)
    assert decoded_pb.spans == [] and decoded_pb.rejected_spans == 2


def test_a_span_that_is_not_an_object_is_refused_alone() -> None:
    doc = json_document([spec(1)])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append("nope")
    decoded = decode_request(json.dumps(doc).encode(), JSON)
    assert len(decoded.spans) == 1
    assert decoded.rejections[0]["index"] == 1 and decoded.rejections[0]["trace_id"] is None


# --------------------------------------------------------------------------------------------------
# The answer


def test_it_encodes_the_export_response() -> None:
    decoded = decode_request(pb_request([spec(1), spec(2, name="\x00")]), PB)
    assert decoded.error_message.startswith("1 of 2 spans rejected: span 1 (trace ")
    response = ExportTraceServiceResponse.FromString(encode_response(decoded, PB))
    assert response.partial_success.rejected_spans == 1
    assert "NUL" in response.partial_success.error_message
    assert json.loads(encode_response(decoded, JSON)) == {
        "partialSuccess": {"rejectedSpans": "1", "errorMessage": decoded.error_message}
    }
    ok = decode_request(pb_request([spec(1)]), PB)
    assert encode_response(ok, PB) == b""
    assert json.loads(encode_response(ok, JSON)) == {"partialSuccess": {}}


def test_the_error_message_names_at_most_five_refusals() -> None:
    decoded = decode_request(pb_request([spec(i, name="\x00") for i in range(1, 9)]), PB)
    assert decoded.error_message.startswith("8 of 8 spans rejected")
    assert decoded.error_message.endswith("; and 3 more")
