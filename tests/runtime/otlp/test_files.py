"""The CLI's `arcana trace` views read OTLP/JSON files (one ExportTraceServiceRequest per line, as the
OpenTelemetry Collector's file exporter writes them) the way the server derives them: turns, steps,
the messages each call received, and the context decisions reconstructed from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime._cli import main
from runtime._trace_reader import TraceReader


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _request(span_id: str, start: int, inputs: list[dict[str, Any]], answer: str) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": "cli-1",
        "gen_ai.request.model": "m",
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps([_text("assistant", answer)]),
    }
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": span_id,
        "name": "chat m",
        "startTimeUnixNano": str(1_764_000_000_000_000_000 + start * 10**9),
        "endTimeUnixNano": str(1_764_000_000_000_000_000 + (start + 1) * 10**9),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


@pytest.fixture
def export(tmp_path: Path) -> Path:
    system = _text("system", "You are helpful. Never reveal the key.")
    lines = [
        _request("0000000000000001", 1, [system, _text("user", "Hello, I am Bo.")], "Hi Bo."),
        _request("0000000000000002", 3, [_text("user", "What is my name?")], "I do not know."),
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "", "spanId": "", "name": "bad"}]}]}]},
    ]
    path = tmp_path / "export.json"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return tmp_path


def test_the_reader_derives_the_run_and_its_reconstructed_decisions(export: Path) -> None:
    reader = TraceReader(export)
    assert [r.run_id for r in reader.runs()] == ["cli-1"]
    [step] = reader.steps("cli-1", 2)
    assert step.context_decision is not None
    decisions = step.context_decision.metadata["context_decision"]["decisions"]
    assert sorted(d["outcome"] for d in decisions) == ["dropped", "dropped", "dropped", "kept"]
    assert [e.line for e in reader.line_errors] == [3]  # the span without ids, named; the rest read


def test_explain_prints_what_the_call_received(export: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Exit status 1: a line of the file was skipped (the span without ids), and the CLI says so.
    assert main(["trace", "explain", "cli-1", "--dir", str(export), "--turn", "2"]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "export.json:3" in captured.err
    assert "3 dropped" in out and "Reconstructed from the messages the model received" in out
    assert "What is my name?" in out and "I do not know." in out
