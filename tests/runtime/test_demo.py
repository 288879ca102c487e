"""The scripted demo (runtime.demo) exercises everything it promises and writes valid traces."""

from __future__ import annotations

from pathlib import Path

from runtime import TraceEvent, TraceReader
from runtime.demo import run_demo
from tests.runtime.session_helpers import of_type, read_events, run


def test_the_demo_exercises_pin_compression_recall_unpin_a_tool_and_a_pool(tmp_path: Path) -> None:
    summary = run(run_demo(tmp_path))
    chat_run, pool_run = summary["chat"]["run_id"], summary["pool"]["run_id"]
    assert sorted(p.stem for p in tmp_path.glob("*.jsonl")) == sorted([chat_run, pool_run])
    events = read_events(tmp_path)
    for e in events:
        TraceEvent.from_dict(e)
    chat = [e for e in events if e["run_id"] == chat_run]
    prims = [
        (e["metadata"]["primitive"], e["metadata"]["turn"]) for e in of_type(chat, "cognitive_primitive")
    ]
    assert prims == [("pin", 1), ("recall", 4), ("unpin", 5)]
    assert of_type(chat, "tool_call")[0]["tool_call"]["name"] == "get_forecast"
    recall = of_type(chat, "cognitive_primitive")[1]["metadata"]["result"]
    assert recall["found"] is True and "Step 3: QA sign-off" in recall["messages"][-1]["content"]
    # The original plan (turn 1's answer) was compressed before the recall.
    decisions = [
        e["metadata"]["context_decision"]
        for e in of_type(chat, "context_decision")
        if e["metadata"]["turn"] == 4
    ]
    assert any(d["outcome"] == "compressed" and d["role"] == "assistant" for d in decisions[0]["decisions"])
    assert [r["outcome"] for r in summary["chat"]["replies"]] == ["answered"] * 5
    pool = [e for e in events if e["run_id"] == pool_run]
    assert {e["metadata"]["source_agent"] for e in pool} == {"researcher", "writer"}
    assert TraceReader(tmp_path).agents(pool_run) == ["researcher", "writer"]
    assert [p["label"] for p in summary["pool"]["pins"]["researcher"]] == ["weather"]
    assert summary["pool"]["pins"]["writer"] == []
