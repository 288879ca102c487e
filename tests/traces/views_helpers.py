"""Data for the dashboard view tests, created only through `traces.ingest` (the one writer)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from traces.ingest import ingest_events, ingest_jsonl
from traces.models import Project, Run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ARCANA = FIXTURES / "arcana-1.2"
OURS = FIXTURES / "ours"
#: The pin_recall scenario's main run: 10 turns, pins, recalls, a rejected pin, an unpin.
PIN_RUN = "17a81a75-0187-4ca7-b323-4a0c6e1c963b"
#: A hand-made run in our runtime's format (3 turns, pin, recall, tools, unpin).
OUR_RUN = "0c0a5e00-0000-4000-8000-000000000001"
#: A pool of agents "planner" and "critic".
POOL_RUN = "0c0a5e00-0000-4000-8000-000000000002"


def ingest_file(project: Project, path: Path) -> None:
    with path.open("rb") as fh:
        ingest_jsonl(project, fh, source="cli")


def ingest_samples(project: Project) -> None:
    """Every real Arcana 1.2 sample and our runtime's hand-made traces."""
    for path in sorted(ARCANA.glob("*/*.jsonl")) + sorted(OURS.glob("*.jsonl")):
        ingest_file(project, path)


def envelope(run_id: str, event_type: str, metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "run_id": run_id,
        "task_id": None,
        "step_id": str(uuid.uuid4()),
        "parent_step_id": None,
        "timestamp": datetime.now(UTC).isoformat(),
        "role": "system",
        "event_type": event_type,
        "state_before_hash": None,
        "state_after_hash": None,
        "llm_request_digest": None,
        "llm_response_digest": None,
        "model": None,
        "llm_latency_ms": None,
        "tool_call": None,
        "budgets": None,
        "stop_reason": None,
        "stop_detail": None,
        "metadata": metadata,
    }
    ev.update(extra)
    return ev


def our_step(
    run_id: str,
    turn: int,
    step: int,
    *,
    decisions: list[dict[str, Any]],
    text: str | None = "ok",
    when: datetime | None = None,
    finish: str = "stop",
    extra_messages: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A context_decision + turn event pair in our runtime's format (docs/trace-format.md)."""
    when = when or datetime(2026, 5, 1, 9, 0, tzinfo=UTC) + timedelta(seconds=turn * 10 + step)
    turn_id = str(uuid.uuid4())
    base = {"producer": "arcana-console", "turn": turn, "step": step}
    kept = sum(d["token_count_after"] for d in decisions)
    cd = {
        **base,
        "context_decision": {
            "turn": turn,
            "step": step,
            "strategy": "tail_preserve",
            "budget_total": 4000,
            "budget_used": kept,
            "budget_tools": 100,
            "budget_reserve": 500,
            "messages_in": len(decisions),
            "messages_out": sum(1 for d in decisions if d["outcome"] != "dropped"),
            "compressed_count": sum(1 for d in decisions if d["outcome"] == "compressed"),
            "memory_injected": False,
            "history_compressed": True,
            "decisions": decisions,
            "compressed_messages": [],
            "explanation": f"{len(decisions)} messages considered",
        },
        "explanation": f"{len(decisions)} messages considered",
        "context_report": {"utilization": kept / 8000, "window_size": 8000},
    }
    facts = {
        "assistant_text": text,
        "tool_calls": [],
        "usage": {"prompt_tokens": kept, "completion_tokens": 20, "total_tokens": kept + 20},
        "finish_reason": finish,
    }
    messages = [{"role": "assistant", "content": text}, *(extra_messages or [])]
    return [
        envelope(run_id, "context_decision", cd, parent_step_id=turn_id, timestamp=when.isoformat()),
        envelope(
            run_id,
            "turn",
            {**base, "facts": facts, "assessment": {"completed": finish == "stop"}, "messages": messages},
            step_id=turn_id,
            model="scripted",
            timestamp=(when + timedelta(milliseconds=5)).isoformat(),
        ),
    ]


def decision(
    index: int, role: str, outcome: str = "kept", fidelity: str | None = "L0", tokens: int = 10
) -> dict[str, Any]:
    return {
        "index": index,
        "role": role,
        "outcome": outcome,
        "fidelity": fidelity,
        "relevance_score": 0.5,
        "token_count_before": tokens,
        "token_count_after": 0 if outcome == "dropped" else tokens,
        "reason": "tail_preserve_tail" if outcome == "kept" else f"tail_preserve_middle_{outcome}",
    }


def ingest_live_run(project: Project, run_id: str, turns: int = 2, *, age: float = 0.0) -> None:
    """A run still in progress: every step ends with tool calls, so no answer has completed it. Its
    events are stamped `age` seconds ago (0: now, so it is live; more than the live window: idle)."""
    events: list[dict[str, Any]] = []
    start = datetime.now(UTC) - timedelta(seconds=age + turns)
    for t in range(1, turns + 1):
        events += our_step(
            run_id,
            t,
            1,
            decisions=[decision(i, "user") for i in range(t)],
            finish="tool_calls",
            when=start + timedelta(seconds=t - 1),
        )
    ingest_events(project, events, source="api")


XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'

#: Values a trace may hold where a page prints them: markup, quotes, NUL, a lone surrogate, numbers of
#: every kind, None and booleans (the pages written in Python are compared with their templates on these).
HOSTILE_VALUES: list[Any] = [
    XSS,
    "<script>alert(1)</script>",
    "a\"b'c&d<e>f",
    "&amp; &#x27; already escaped?",
    "a\x00b",
    "\ud800 lone",
    "",
    0,
    -7,
    10**21,
    1.5,
    -0.0,
    float("inf"),
    True,
    None,
]


def ingest_hostile_run(project: Project, run_id: str = "hostile-run", big: int = 50_000) -> None:
    """A run whose every string a page shows carries markup, and one 50 KB answer."""
    decisions = [
        decision(0, "system"),
        decision(1, "user"),
        {**decision(2, "system"), "reason": "pinned", "pinned": True, "pin_id": "p_0000beef"},
    ]
    events = our_step(run_id, 1, 1, decisions=decisions, text=XSS + " " + "x" * big)
    turn_event = events[1]
    base = {"producer": "arcana-console", "turn": 1, "step": 1}
    events.append(
        envelope(
            run_id,
            "cognitive_primitive",
            {
                **base,
                "primitive": "pin",
                "args": {"content": XSS, "label": XSS},
                "result": {
                    "pinned": True,
                    "pin_id": "p_0000beef",
                    "label": XSS,
                    "until_turn": None,
                    "already_pinned": False,
                },
                "tool_call_id": "call_1",
                "tokens": 30,
            },
            parent_step_id=turn_event["step_id"],
            timestamp=turn_event["timestamp"],
        )
    )
    events[0]["metadata"]["context_decision"]["explanation"] = XSS
    ingest_events(project, events, source="api")


def arcana_tool_run(run_id: str, payload: str) -> list[dict[str, Any]]:
    """An arcana-agent 1.2 send whose model called `lookup` (answered, digests only) and `weather`
    (not registered: Arcana writes no event for it), then answered."""
    turn0 = envelope(
        run_id,
        "turn",
        {"step": 0, "facts": {"assistant_text": None, "finish_reason": "tool_calls", "tool_calls": [
            {"id": "call_a", "name": "lookup", "arguments": '{"city": "' + payload + '"}'},
            {"id": "call_b", "name": "weather", "arguments": "{}"}]},
         "assessment": {"completed": False, "failed": False}},
        timestamp="2026-11-30T06:00:01+00:00",
    )  # fmt: skip
    tool = envelope(
        run_id,
        "tool_call",
        {},
        parent_step_id=turn0["step_id"],
        timestamp="2026-11-30T06:00:02+00:00",
        tool_call={"name": "lookup", "args_digest": "a1b2", "idempotency_key": None,
                   "result_digest": "feedc0de", "error": None, "error_category": None,
                   "duration_ms": 7, "side_effect": "read"},
    )  # fmt: skip
    turn1 = envelope(
        run_id,
        "turn",
        {"step": 1, "facts": {"assistant_text": "done", "finish_reason": "stop", "tool_calls": []},
         "assessment": {"completed": True, "failed": False}},
        parent_step_id=turn0["step_id"],
        timestamp="2026-11-30T06:00:03+00:00",
    )  # fmt: skip
    return [turn0, tool, turn1]


def run_path(run_id: str) -> str:
    """The page address of the one run stored with this id (tests that hold a single such run)."""
    return Run.objects.get(run_id=run_id).get_absolute_url()


def api_path(run_id: str) -> str:
    """The read API's address of the one run stored with this id."""
    return Run.objects.get(run_id=run_id).api_url()


def jsonl_lines(runs: int, turns: int, prefix: str = "up") -> list[str]:
    """`runs` × `turns` × 2 valid events of our runtime, one JSON text each (a large upload)."""
    out: list[str] = []
    for r in range(runs):
        for t in range(1, turns + 1):
            out += [
                json.dumps(e) for e in our_step(f"{prefix}-{r:04d}", t, 1, decisions=[decision(0, "user")])
            ]
    return out
