"""Attacking `decode_request` with generated bodies: whatever it is given, it answers a
`DecodedRequest` or raises `OtlpDecodeError` (nothing else), every span of the request is either
decoded or rejected, and what it decodes is clean JSON (no NaN, no NUL, no lone surrogate)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.otlp import DecodedRequest, DecodeLimits, OtlpDecodeError, decode_request

from .builders import json_any, json_document, pb_request, spec

PB = "application/x-protobuf"
JSON = "application/json"
LIMITS = DecodeLimits(max_value_chars=5000, max_attributes=40, max_depth=4)

nasty_text = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.sampled_from(["\x00", "\ud800", "\udfff", "a", "é", "😀", "\\", '"']), max_size=12),
    st.just("x" * 6000),
)
scalars = st.one_of(
    nasty_text,
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


values_or_deep = st.one_of(values, st.integers(min_value=0, max_value=60).map(_deep))
attributes = st.dictionaries(nasty_text, values_or_deep, max_size=6)
span_specs = st.builds(
    lambda n, attrs, name, start: spec(n, attributes=attrs, name=name, start=start),
    st.integers(min_value=1, max_value=2**40),
    attributes,
    nasty_text,
    st.one_of(st.none(), st.just(0)),
)


def _check(decoded: DecodedRequest, total: int | None = None) -> None:
    if total is not None:
        assert len(decoded.spans) + decoded.rejected_spans == total
    # Clean JSON: no NaN, and UTF-8 encodable (no lone surrogate); no NUL anywhere.
    text = json.dumps(decoded.spans, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")
    assert "\x00" not in text and "\\u0000" not in text
    assert [r["index"] for r in decoded.rejections] == sorted({r["index"] for r in decoded.rejections})
    decoded.error_message.encode("utf-8", "surrogatepass")


def _safe_pb(s: dict[str, Any]) -> bool:
    """protobuf itself refuses to build strings with lone surrogates; those go through JSON only."""
    try:
        json.dumps(s, default=repr, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(span_specs, max_size=4))
def test_json_bodies_of_generated_spans_decode_or_reject_span_by_span(specs: list[dict[str, Any]]) -> None:
    body = json.dumps(json_document(specs), ensure_ascii=True).encode()
    _check(decode_request(body, JSON, limits=LIMITS), len(specs))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(span_specs, max_size=4))
def test_protobuf_bodies_of_generated_spans_decode_or_reject_span_by_span(
    specs: list[dict[str, Any]],
) -> None:
    specs = [s for s in specs if _safe_pb(s)]
    try:
        body = pb_request(specs)
    except Exception:  # the protobuf library refuses to build some values (deep nesting): not our subject
        return
    _check(decode_request(body, PB, limits=LIMITS), len(specs))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.sampled_from([PB, JSON]))
def test_random_bytes_raise_only_the_documented_error(body: bytes, ctype: str) -> None:
    try:
        decoded = decode_request(body, ctype, limits=LIMITS)
    except OtlpDecodeError:
        return
    _check(decoded)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_mangled_protobuf_body_raises_only_the_documented_error(data: st.DataObject) -> None:
    body = bytearray(pb_request([spec(1, attributes={"a": ["x", {"b": 1.5}], "c": "text"}), spec(2)]))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        i = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
        body[i] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(body)))
    try:
        decoded = decode_request(bytes(body[:cut]), PB, limits=LIMITS)
    except OtlpDecodeError:
        return
    _check(decoded)


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=10**20, max_value=10**40),
        st.floats(),
        nasty_text,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(nasty_text, inner, max_size=3)),
    max_leaves=15,
)
any_keys = st.sampled_from(
    ["stringValue", "intValue", "doubleValue", "boolValue", "bytesValue", "arrayValue", "kvlistValue", "x"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(any_keys, json_values, max_size=2),
    st.dictionaries(
        st.sampled_from(
            ["traceId", "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano", "status", "events"]
        ),
        json_values,
        max_size=3,
    ),
)
def test_json_fields_of_any_type_raise_only_the_documented_error(any_value: dict, overrides: dict) -> None:
    doc = json_document([spec(1), spec(2, attributes={"k": "v"})])
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    span["attributes"].append({"key": "generated", "value": any_value})
    span.update(overrides)
    body = json.dumps(doc, ensure_ascii=True).encode()
    decoded = decode_request(body, JSON, limits=LIMITS)
    _check(decoded, 2)
    assert decoded.spans[0]["span_id"] == "0000000000000001"


def test_the_json_builder_writes_every_any_value_kind() -> None:
    assert set().union(*(json_any(v).keys() for v in ["s", 1, 1.5, True, b"x", [1], {"a": 1}])) == {
        "stringValue",
        "intValue",
        "doubleValue",
        "boolValue",
        "bytesValue",
        "arrayValue",
        "kvlistValue",
    }
