"""OTLP decoding speed: spans per second through `runtime.otlp.decode_request` + `normalize_span`
for chat spans of ~7 KB (the issue's yardstick), one process, one core.

The spans look like Pydantic AI's `chat` spans: `gen_ai.input.messages` (a growing conversation in
the parts form, with tool calls and tool results), `gen_ai.output.messages`,
`gen_ai.system_instructions`, `gen_ai.tool.definitions`, models, usage, conversation and agent
attributes, ~7 KB each once encoded. They go in requests of `--batch` spans (512 is the SDK
BatchSpanProcessor's default export size), protobuf and OTLP/JSON.

For each encoding it prints the median of `--rounds` rounds, as spans/s and µs per span: decode
alone, normalize alone, and decode + normalize; plus the floor of the same bytes through the
protobuf library's parse alone (protobuf) or `json.loads` alone (JSON), and decode+normalize / floor.

Run: .venv/bin/python bench/otlp_decode.py [--batch 512] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402

from runtime.otlp import decode_request, normalize_span  # noqa: E402

T0 = 1_767_225_600_000_000_000
WORDS = "the quick brown fox jumps over the lazy dog while agents plan tools and read results".split()


def _text(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n_words))


def chat_attributes(i: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "parts": [{"type": "text", "content": _text(40, i)}]}]
    for k in range(4):
        call_id = f"call_{i}_{k}"
        messages.append(
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": _text(25, i + k)},
                    {
                        "type": "tool_call",
                        "id": call_id,
                        "name": "search",
                        "arguments": json.dumps({"q": _text(6, k)}),
                    },
                ],
                "finish_reason": "tool_call",
            }
        )
        messages.append(
            {
                "role": "user",
                "parts": [
                    {
                        "type": "tool_call_response",
                        "id": call_id,
                        "name": "search",
                        "result": _text(160, i + k),
                    }
                ],
            }
        )
    output = [
        {"role": "assistant", "parts": [{"type": "text", "content": _text(60, i)}], "finish_reason": "stop"}
    ]
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.agent.name": "research_agent",
        "gen_ai.agent.call.id": f"0199-{i:08d}",
        "gen_ai.conversation.id": f"conv-{i // 20}",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "server.address": "api.example.com",
        "server.port": 443,
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.tool.definitions": json.dumps(
            [
                {
                    "type": "function",
                    "name": "search",
                    "description": "Search the web.",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                }
            ]
        ),
        "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": json.dumps(output),
        "gen_ai.system_instructions": json.dumps(
            [{"type": "text", "content": "You are a careful research assistant."}]
        ),
        "logfire.msg": "chat gpt-4o",
        "gen_ai.usage.input_tokens": 1800 + i,
        "gen_ai.usage.output_tokens": 60,
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.response.id": f"chatcmpl-{i}",
        "gen_ai.response.finish_reasons": ["stop"],
    }


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        v = AnyValue()
        v.array_value.values.extend(_any(x) for x in value)
        return v
    return AnyValue(string_value=value)


def protobuf_body(batch: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=_any("bench")))
    ss = rs.scope_spans.add()
    ss.scope.name, ss.scope.version = "pydantic-ai", "2.68.0"
    for i in range(batch):
        sp = ss.spans.add(
            trace_id=(i // 8 + 1).to_bytes(16, "big"),
            span_id=(i + 1).to_bytes(8, "big"),
            parent_span_id=(10_000 + i // 8).to_bytes(8, "big"),
            name="chat gpt-4o",
            kind=3,
            start_time_unix_nano=T0 + i * 1000,
            end_time_unix_nano=T0 + i * 1000 + 900,
        )
        for key, value in chat_attributes(i).items():
            sp.attributes.append(KeyValue(key=key, value=_any(value)))
    return req.SerializeToString()


def json_body(pb: bytes) -> bytes:
    from google.protobuf import json_format

    doc = json_format.MessageToDict(ExportTraceServiceRequest.FromString(pb), use_integers_for_enums=True)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    sp[key] = json_format.base64.b64decode(sp[key]).hex()
    return json.dumps(doc, separators=(",", ":")).encode()


def _median_seconds(fn: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    pb = protobuf_body(args.batch)
    bodies = {"protobuf": (pb, "application/x-protobuf"), "json": (json_body(pb), "application/json")}
    print(
        f"{args.batch} chat spans a request, {len(pb) / args.batch / 1024:.1f} KB a span in protobuf, median of {args.rounds} rounds"
    )
    print(f"{'':10} {'floor':>16} {'decode':>16} {'normalize':>16} {'decode+normalize':>18}  ratio to floor")
    for label, (body, ctype) in bodies.items():
        measure(label, body, ctype, args.batch, args.rounds)


def measure(label: str, body: bytes, ctype: str, batch: int, rounds: int) -> None:
    spans = decode_request(body, ctype).spans
    assert len(spans) == batch

    def floor() -> object:
        return ExportTraceServiceRequest.FromString(body) if label == "protobuf" else json.loads(body)

    t_floor = _median_seconds(floor, rounds)
    t_decode = _median_seconds(lambda: decode_request(body, ctype), rounds)
    t_norm = _median_seconds(lambda: [normalize_span(s) for s in spans], rounds)
    t_both = _median_seconds(lambda: [normalize_span(s) for s in decode_request(body, ctype).spans], rounds)

    def cell(t: float) -> str:
        return f"{batch / t:8,.0f}/s {t / batch * 1e6:5.1f}µs"

    print(
        f"{label:10} {cell(t_floor):>16} {cell(t_decode):>16} {cell(t_norm):>16} {cell(t_both):>18}  {t_both / t_floor:.1f}×"
    )


if __name__ == "__main__":
    main()
