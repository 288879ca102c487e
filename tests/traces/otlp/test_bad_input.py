"""The bad-input matrix of `POST /v1/traces`: each bad span sent between two valid spans of another
conversation, as protobuf (built with the real OpenTelemetry protobuf classes) and as OTLP/JSON. The
answer is 200 with `partial_success` naming the refused span, the valid spans are stored and their run
derived; bodies that cannot be read at all are the statuses the OTLP specification names. Hypothesis
throws arbitrary bytes and mangled bodies at it: never a 5xx, never a stored span from garbage."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from traces.models import Run, Span

T0 = 1_764_000_000_000_000_000
TRACE = "5b8efff798038103d269b633813fc60c"


def _chat_attrs(text: str) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": "bad-input-run",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}]),
    }


def _pb_value(v: Any) -> AnyValue:
    if isinstance(v, AnyValue):
        return v
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    return AnyValue(string_value=v)


#: name → (mutation of a valid protobuf span, the reason named in the answer)
def _deep(depth: int) -> AnyValue:
    value = AnyValue(string_value="x")
    for _ in range(depth):
        value = AnyValue(array_value={"values": [value]})
    return value


PB_CASES: dict[str, tuple[Callable[[Any], None], str]] = {
    "no trace id": (lambda s: s.ClearField("trace_id"), "trace_id"),
    "no span id": (lambda s: s.ClearField("span_id"), "span_id"),
    "start time 0": (lambda s: setattr(s, "start_time_unix_nano", 0), "time"),
    "megabytes of attribute": (
        lambda s: s.attributes.append(KeyValue(key="big", value=AnyValue(string_value="x" * (3 << 20)))),
        "big",
    ),
    "ten thousand attributes": (
        lambda s: s.attributes.extend(
            KeyValue(key=f"a{i}", value=AnyValue(int_value=i)) for i in range(10_000)
        ),
        "attributes",
    ),
    "deep AnyValue nesting": (lambda s: s.attributes.append(KeyValue(key="deep", value=_deep(40))), "deep"),
    "NUL in a string": (
        lambda s: s.attributes.append(KeyValue(key="nul", value=AnyValue(string_value="a\x00b"))),
        "nul",
    ),
}


def _pb_span(span: Any, span_id: int, text: str, trace: str = TRACE) -> None:
    span.trace_id = bytes.fromhex(trace)
    span.span_id = span_id.to_bytes(8, "big")
    span.name = "chat m"
    span.start_time_unix_nano, span.end_time_unix_nano = T0 + span_id * 10**6, T0 + span_id * 10**6 + 500
    for k, v in _chat_attrs(text).items():
        span.attributes.append(KeyValue(key=k, value=_pb_value(v)))


def _pb_body(mutate: Callable[[Any], None]) -> bytes:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    _pb_span(spans.add(), 1, "first valid")
    bad = spans.add()
    _pb_span(bad, 2, "the bad one", trace="6b8efff798038103d269b633813fc60c")
    mutate(bad)
    _pb_span(spans.add(), 3, "second valid")
    return request.SerializeToString()


@pytest.mark.parametrize("name", sorted(PB_CASES))
def test_a_bad_protobuf_span_is_refused_alone(client: Client, api_key: str, name: str) -> None:
    mutate, says = PB_CASES[name]
    r = client.post(
        "/v1/traces", _pb_body(mutate), content_type="application/x-protobuf", HTTP_X_API_KEY=api_key
    )
    assert r.status_code == 200, r.content[:300]
    answer = ExportTraceServiceResponse.FromString(r.content)
    assert answer.partial_success.rejected_spans == 1
    assert "1 of 3 spans rejected" in answer.partial_success.error_message
    assert says in answer.partial_success.error_message
    assert sorted(Span.objects.values_list("span_id", flat=True)) == ["0000000000000001", "0000000000000003"]
    assert Run.objects.get(run_id="bad-input-run").steps == 2


def test_a_message_attribute_that_is_not_json_is_kept_as_text(client: Client, api_key: str) -> None:
    def not_json(s: Any) -> None:
        for kv in s.attributes:
            if kv.key == "gen_ai.input.messages":
                kv.value.string_value = "[{not json <script>"

    r = client.post(
        "/v1/traces", _pb_body(not_json), content_type="application/x-protobuf", HTTP_X_API_KEY=api_key
    )
    assert (
        r.status_code == 200
        and ExportTraceServiceResponse.FromString(r.content).partial_success.rejected_spans == 0
    )
    assert Span.objects.count() == 3
    snapshots = [s.prompt_snapshot for s in Run.objects.get(run_id="bad-input-run").step_set.all()]
    assert len(snapshots) == 3 and "[{not json <script>" in json.dumps(snapshots)


TIMES = '"startTimeUnixNano": "1764000000000000000", "endTimeUnixNano": "1764000000000000500"'
IDS = '"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "0000000000000002"'


def _obj(*fields: str) -> str:
    return "{" + ", ".join(fields) + "}"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            _obj('"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "zz", "name": "x"', TIMES),
            "span_id",
        ),
        (_obj('"traceId": "5b8e", "spanId": "0000000000000002", "name": "x"', TIMES), "trace_id"),
        (_obj(IDS, '"name": "\\ud800"', TIMES), "name"),
        (_obj(IDS, '"startTimeUnixNano": "-5", "endTimeUnixNano": "9"'), "time"),
        (_obj(IDS, '"startTimeUnixNano": "1", "endTimeUnixNano": "99999999999999999999999"'), "end_time"),
        (_obj(IDS, TIMES, '"attributes": [{"key": "n", "value": {"intValue": "1e400"}}]'), "attributes"),
    ],
)
def test_a_bad_json_span_is_refused_alone(client: Client, api_key: str, text: str, says: str) -> None:
    def span(span_id: str, body: str) -> str:
        attrs = [{"key": k, "value": {"stringValue": v}} for k, v in _chat_attrs(body).items()]
        return json.dumps({
            "traceId": TRACE, "spanId": span_id, "name": "chat m",
            "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 10), "attributes": attrs,
        })  # fmt: skip

    spans = ", ".join([span("0000000000000001", "a"), text, span("0000000000000003", "b")])
    body = '{"resourceSpans": [{"scopeSpans": [{"spans": [' + spans + "]}]}]}"
    r = client.post("/v1/traces", body.encode(), content_type="application/json", HTTP_X_API_KEY=api_key)
    assert r.status_code == 200, r.content[:300]
    partial = r.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and says in partial["errorMessage"], partial
    assert Span.objects.count() == 2


def test_invalid_utf8_in_a_span_refuses_that_span(client: Client, api_key: str) -> None:
    ok = _obj(f'"traceId": "{TRACE}", "spanId": "0000000000000001", "name": "ok"', TIMES)
    bad = _obj(IDS, '"name": "\xff"', TIMES)
    body = ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + ok + ", " + bad + "]}]}]}").encode("latin-1")
    r = client.post("/v1/traces", body, content_type="application/json", HTTP_X_API_KEY=api_key)
    assert r.status_code in (200, 400), r.content[:300]
    if r.status_code == 200:
        assert r.json()["partialSuccess"]["rejectedSpans"] == "1" and Span.objects.count() == 1
    else:
        assert "UTF-8" in r.json()["message"] and Span.objects.count() == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.binary(max_size=400)
    | st.builds(lambda b, cut: b[:cut], st.just(_pb_body(lambda s: None)), st.integers(0, 200)),
    content_type=st.sampled_from(["application/x-protobuf", "application/json"]),
    gzip=st.booleans(),
)
def test_garbage_never_answers_5xx_nor_stores_a_span_it_cannot_read(
    client: Client, api_key: str, body: bytes, content_type: str, gzip: bool
) -> None:
    extra = {"HTTP_CONTENT_ENCODING": "gzip"} if gzip else {}
    before = Span.objects.count()
    r = client.post("/v1/traces", body, content_type=content_type, HTTP_X_API_KEY=api_key, **extra)
    assert r.status_code in (200, 400, 413, 415), (r.status_code, r.content[:200])
    if r.status_code != 200:
        assert Span.objects.count() == before
