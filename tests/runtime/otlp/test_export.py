"""`OtlpExportSink`: our runtime's runs as OpenTelemetry spans (GenAI conventions + `arcana.*`), sent by
the SDK's own OTLP/HTTP exporter to a loopback collector, and read back by `runtime.otlp` into the
same events the JSONL trace holds."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from runtime import CallableSink, OtlpExportSink, Runtime, RuntimeConfig, ScriptedProvider
from runtime.demo import run_demo
from runtime.errors import OtlpDependencyError, ProviderError
from runtime.otlp import NormalizedSpan, assemble_run, events_for_run, group_runs
from tests.runtime.otlp.conftest import OtlpCollector

#: What differs by construction between an event we wrote and the one derived from its span: ids
#: (made from span ids), times (the spans'), the producer, and the `otlp` key naming the span.
_IGNORED = ("step_id", "parent_step_id", "timestamp")


def _comparable(event: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    md = event["metadata"]
    key = (md.get("source_agent"), md.get("console_turn"), md.get("console_step"), event["event_type"])
    out = {k: v for k, v in event.items() if k not in _IGNORED}
    out["metadata"] = {k: v for k, v in md.items() if k not in ("producer", "otlp")}
    return key, out


def _derived(spans: list[NormalizedSpan]) -> dict[str, list[dict[str, Any]]]:
    return {key: events_for_run(assemble_run(run)) for key, run in group_runs(spans).items()}


def _play_demo(collector: OtlpCollector) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    sink = OtlpExportSink(collector.origin, headers={"Authorization": "Bearer ak_test"})
    summary = asyncio.run(run_demo(None, trace_sinks=[CallableSink(events.append), sink]))
    return summary, events


def test_the_demo_runs_read_back_into_the_events_they_wrote(collector: OtlpCollector) -> None:
    summary, events = _play_demo(collector)
    assert all(r.headers["authorization"] == "Bearer ak_test" for r in collector.requests)
    assert {r.path for r in collector.requests} == {"/v1/traces"}
    derived = _derived(collector.normalized())
    for run_id in (summary["chat"]["run_id"], summary["pool"]["run_id"]):
        ours = sorted((_comparable(e) for e in events if e["run_id"] == run_id), key=lambda p: str(p[0]))
        again = sorted((_comparable(e) for e in derived[run_id]), key=lambda p: str(p[0]))
        assert [k for k, _ in again] == [k for k, _ in ours]
        for (key, mine), (_, theirs) in zip(ours, again, strict=True):
            assert theirs == {**mine, "run_id": run_id}, key


def test_the_spans_follow_the_genai_conventions(collector: OtlpCollector) -> None:
    summary, _ = _play_demo(collector)
    spans = collector.normalized()
    pool = [s for s in spans if s["conversation_id"] == summary["pool"]["run_id"]]
    chat = [s for s in spans if s["conversation_id"] == summary["chat"]["run_id"]]
    assert len(chat) + len(pool) == len(spans)  # every span names its run
    agents = [s for s in pool if s["kind"] == "agent"]
    assert [(s["agent_name"], (s["arcana"] or {})["turn"]) for s in agents] == [
        ("researcher", 1),
        ("writer", 1),
        ("writer", 2),
    ]
    assert len({s["trace_id"] for s in agents}) == 3  # a trace per turn
    steps = [s for s in chat if s["kind"] == "model_call"]
    assert len(steps) == 9 and all(s["operation"] == "chat" and s["model"] == "scripted-atlas" for s in steps)
    first = steps[0]
    assert first["system_instructions"] == [
        {
            "type": "text",
            "content": "You are Atlas, a launch-planning assistant. Be concrete and keep the plan consistent.",
        }
    ]
    assert first["input_messages"] and first["input_messages"][-1]["role"] == "user"
    assert first["output_messages"] == [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_1",
                    "name": "pin",
                    "arguments": first["output_messages"][0]["parts"][0]["arguments"],
                }
            ],
            "finish_reason": "tool_calls",
        }
    ]
    assert first["finish_reasons"] == ["tool_calls"] and first["usage"] and first["usage"]["input_tokens"]
    assert first["tool_definitions"] and {t["name"] for t in first["tool_definitions"]} >= {"pin", "recall"}
    decision = (first["arcana"] or {})["context_decision"]
    assert decision["context_decision"]["strategy"] == "passthrough"
    # The step after the pin renders it: arcana.pins names it.
    assert [p["pin_id"] for p in (steps[1]["arcana"] or {})["pins"]] == ["p_a7145c0d"]
    tools = [s for s in chat if s["kind"] == "tool_call"]
    assert [(s["tool"] or {})["name"] for s in tools] == ["pin", "get_forecast", "recall", "unpin"]
    pin = tools[0]["arcana"] or {}
    assert pin["primitive"] == "pin" and pin["primitive.result"]["pin_id"] == "p_a7145c0d"
    assert (tools[1]["arcana"] or {})["tool_call"]["side_effect"] == "read"


def test_a_provider_error_is_a_failed_chat_span_and_reads_back(collector: OtlpCollector) -> None:
    class Failing(ScriptedProvider):
        async def complete(self, *args: Any, **kwargs: Any) -> Any:
            raise ProviderError("upstream said no")

    events: list[dict[str, Any]] = []
    sink = OtlpExportSink(collector.origin, batch=False)
    rt = Runtime(
        {"p": Failing(["never"], name="p", model="m")},
        config=RuntimeConfig(trace_dir=None, default_provider="p"),
        trace_sinks=[CallableSink(events.append), sink],
    )

    async def main() -> None:
        async with rt.chat(system="s") as chat:
            with pytest.raises(ProviderError):
                await chat.send("hi")
        await rt.aclose()

    asyncio.run(main())
    spans = collector.normalized()
    [step] = [s for s in spans if s["kind"] == "model_call"]
    assert step["status"]["code"] == "error" and step["error"] and step["error"]["type"] == "ProviderError"
    assert step["status"]["message"] == "upstream said no"
    [agent] = [s for s in spans if s["kind"] == "agent"]
    assert agent["end_time"] >= step["end_time"]
    [derived] = _derived(spans).values()
    ours = sorted(map(_comparable, events), key=lambda p: str(p[0]))
    again = sorted(map(_comparable, derived), key=lambda p: str(p[0]))
    assert [k for k, _ in again] == [k for k, _ in ours]
    assert [e for _, e in again] == [e for _, e in ours]


def test_without_the_extra_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(OtlpDependencyError, match=r"arcana-console\[otlp-export\]"):
        OtlpExportSink("http://127.0.0.1:1")


def test_the_endpoint_is_a_base_or_the_traces_url(collector: OtlpCollector) -> None:
    for endpoint in (collector.origin, f"{collector.origin}/v1/traces"):
        sink = OtlpExportSink(endpoint, batch=False)
        rt = Runtime(
            {"p": ScriptedProvider(["hello"], name="p", model="m")},
            config=RuntimeConfig(trace_dir=None, default_provider="p"),
            trace_sinks=[sink],
        )

        async def main(rt: Runtime = rt) -> None:
            async with rt.chat() as chat:
                await chat.send("hi")
            await rt.aclose()

        asyncio.run(main())
    assert {r.path for r in collector.requests} == {"/v1/traces"} and len(collector.requests) == 4
