"""The agreement benchmark in small (bench/reconstruct_agreement.py): our runtime's runs exported by
`OtlpExportSink` through the SDK's own OTLP/HTTP exporter to a loopback collector with every
`arcana.*` attribute stripped, decoded back, reconstructed, and compared message by message with the
decisions the runtime recorded. Every class must agree at 95% or more, and every class must occur."""

from __future__ import annotations

import asyncio
from collections import Counter

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from bench.reconstruct_agreement import CLASSES, compare, read_back, runs
from runtime.otlp import decode_request
from tests.runtime.otlp.conftest import OtlpCollector

FLOOR = 0.95


def test_reconstruction_agrees_with_the_recorded_decisions_per_class(collector: OtlpCollector) -> None:
    total: Counter[str] = Counter()
    agree: Counter[str] = Counter()
    for name, make in runs(15):
        collector.requests.clear()
        exporter = OTLPSpanExporter(endpoint=f"{collector.origin}/v1/traces")
        events, history = asyncio.run(make(inner=exporter))
        bodies = [r.body for r in collector.requests]
        assert bodies, name
        n, ok, notes = compare(bodies, events, history)
        total.update(n)
        agree.update(ok)
    shares = {c: agree[c] / total[c] for c in CLASSES if total[c]}
    assert set(shares) == set(CLASSES), total  # every class is measured
    low = {c: f"{agree[c]}/{total[c]}" for c, share in shares.items() if share < FLOOR}
    assert not low, low


def test_nothing_of_ours_survives_the_stripped_export(collector: OtlpCollector) -> None:
    _, make = runs(3)[0]
    exporter = OTLPSpanExporter(endpoint=f"{collector.origin}/v1/traces")
    events, _ = asyncio.run(make(inner=exporter))
    raw = [s for r in collector.requests for s in decode_request(r.body, "application/x-protobuf").spans]
    assert {s["name"].split()[0] for s in raw} == {"invoke_agent", "chat", "execute_tool"}
    assert all(not k.startswith("arcana.") for s in raw for k in s["attributes"])
    assert all(not e["name"].startswith("arcana.") for s in raw for e in s["events"])
    assert all(not s["arcana"] for s in collector.normalized())
    # ...and the reconstruction reads a decision for every step the runtime recorded one for.
    rec = read_back([r.body for r in collector.requests])
    recorded = [e for e in events if e["event_type"] == "context_decision"]
    assert len([c for c in rec.calls if c.kind == "turn"]) == len(recorded) > 0
