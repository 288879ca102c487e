"""The table of bad events for tests/traces/ingest/test_bad_input.py: what a hostile or careless producer
sends, as the JSON text it would send, and the field the answer must blame.

Each case is one bad event. The tests put it between two valid events of another run and send it
through every way in (`POST /api/v1/ingest`, an upload, `import_traces`); the valid events must be
stored and the bad one rejected with its index / line, its field and a message a person understands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

OURS = "arcana-console"


@dataclass(frozen=True)
class Case:
    name: str
    raw: str  # the bad event's JSON text, exactly as sent
    field: str | None  # the field the error must name (a prefix for deep paths); None: the whole event
    says: str  # a fragment of the message


def base(name: str) -> dict[str, Any]:
    """A valid event of our runtime; each case breaks one thing in it."""
    return {
        "run_id": f"bad-{name}",
        "step_id": f"bad-{name}-1",
        "event_type": "turn",
        "timestamp": "2026-11-30T10:00:00+00:00",
        "model": "m",
        "metadata": {"producer": OURS, "turn": 1, "step": 1},
    }


def good(run_id: str, n: int) -> dict[str, Any]:
    """Valid event n (1: a `turn`, 2: its `llm_call`) of one of our runs: turn 1, step 1."""
    turn_id = f"{run_id}-turn"
    md = {"producer": OURS, "turn": 1, "step": 1}
    if n == 1:
        return {
            "run_id": run_id, "step_id": turn_id, "event_type": "turn", "timestamp": "2026-11-30T10:00:01+00:00",
            "model": "gpt-test", "metadata": {**md, "facts": {"assistant_text": "ok", "finish_reason": "stop",
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
            "assessment": {"completed": True, "failed": False}},
        }  # fmt: skip
    return {
        "run_id": run_id, "step_id": f"{run_id}-llm", "parent_step_id": turn_id, "event_type": "llm_call",
        "timestamp": "2026-11-30T10:00:00.5+00:00", "model": "gpt-test", "llm_latency_ms": 120,
        "metadata": {**md, "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
    }  # fmt: skip


def _with(name: str, **changes: Any) -> str:
    ev = base(name)
    for key, value in changes.items():
        if value is _DROP:
            ev.pop(key, None)
        else:
            ev[key] = value
    return json.dumps(
        ev
    )  # ensure_ascii: NUL and lone surrogates travel as \u escapes, as producers send them


def _md(name: str, **changes: Any) -> str:
    ev = base(name)
    ev["metadata"].update(changes)
    return json.dumps(ev)


def _raw_md(name: str, key: str, raw_value: str) -> str:
    """The event with `metadata[key]` written as raw JSON text (NaN, 1e400, 5,000 digits, deep)."""
    text = json.dumps(base(name))
    return text[:-2] + f', "{key}": {raw_value}' + text[-2:]


def _deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


_DROP = object()

CASES: list[Case] = [
    # NUL and lone surrogates, anywhere
    Case("nul-model", _with("nul-model", model="a\x00b"), "model", "NUL"),
    Case("nul-deep", _md("nul-deep", a={"b": ["x", "y\x00"]}), "metadata.a.b[1]", "NUL"),
    Case("nul-key", _md("nul-key", **{"k\x00": 1}), "metadata.k\\u0000", "NUL"),
    Case("nul-extra-key", _with("nul-extra-key", extra="\x00"), "extra", "NUL"),
    Case("nul-timestamp", _with("nul-timestamp", timestamp="2026-11-30T10:00:00\x00Z"), "timestamp", "NUL"),
    Case("nul-run-id", _with("nul-run-id", run_id="r\x00"), "run_id", "NUL"),
    Case("nul-agent", _md("nul-agent", source_agent="a\x00"), "metadata.source_agent", "NUL"),
    Case("surrogate-model", _with("surrogate-model", model="\ud800"), "model", "lone surrogate"),
    Case("surrogate-deep", _md("surrogate-deep", text="ok \udfff"), "metadata.text", "lone surrogate"),
    Case("surrogate-key", _md("surrogate-key", **{"\ud83d": 1}), "metadata.\\ud83d", "lone surrogate"),
    Case(
        "surrogate-in-list",
        _md("surrogate-in-list", messages=[{"role": "user", "content": "\ud800x"}]),
        "metadata.messages[0].content",
        "lone surrogate",
    ),
    Case("surrogate-low-first", _md("surrogate-low-first", t="\udc00\ud800"), "metadata.t", "lone surrogate"),
    Case("surrogate-step-id", _with("surrogate-step-id", step_id="s\udc00"), "step_id", "lone surrogate"),
    Case("surrogate-tool-call", _with("surrogate-tool-call", tool_call={"name": "\ud800"}), "tool_call.name", "lone surrogate"),
    # numbers
    Case("nan-latency", _with("nan-latency").replace('"model": "m"', '"model": "m", "llm_latency_ms": NaN'), "llm_latency_ms", "finite"),
    Case("nan-metadata", _raw_md("nan-metadata", "score", "NaN"), "metadata.score", "finite"),
    Case("infinity", _raw_md("infinity", "x", "Infinity"), "metadata.x", "finite"),
    Case("minus-infinity-in-list", _raw_md("minus-infinity-in-list", "xs", "[1, -Infinity]"), "metadata.xs[1]", "finite"),
    Case("float-overflow", _raw_md("float-overflow", "big", "1e400"), "metadata.big", "finite"),
    Case("int-2-53", _md("int-2-53", n=2**53), "metadata.n", "2**53"),
    Case("int-minus-10-30", _md("int-minus-10-30", n=-(10**30)), "metadata.n", "2**53"),
    Case("int-10-20-budget", _md("int-10-20-budget", context_decision={"budget_total": 10**20}), "metadata.context_decision.budget_total", "2**53"),
    Case("int-5000-digits", _raw_md("int-5000-digits", "n", "7" * 5000), None, "4,300 digits"),
    Case("turn-minus-1", _md("turn-minus-1", turn=-1), "metadata.turn", "between 0 and"),
    Case("turn-10-20", _md("turn-10-20", turn=10**20), "metadata.turn", "2**53"),
    Case("turn-2-31", _md("turn-2-31", turn=2**31), "metadata.turn", "between 0 and"),
    Case("turn-10-10", _md("turn-10-10", turn=10**10), "metadata.turn", "between 0 and"),
    Case("step-minus-5", _md("step-minus-5", step=-5), "metadata.step", "between 0 and"),
    Case("arcana-step-minus-1", _with("arcana-step-minus-1", metadata={"step": -1}), "metadata.step", "between 0 and"),
    Case("latency-minus-1", _with("latency-minus-1", llm_latency_ms=-1), "llm_latency_ms", "between 0 and"),
    Case("latency-2-31", _with("latency-2-31", llm_latency_ms=2**31), "llm_latency_ms", "between 0 and"),
    Case("latency-string", _with("latency-string", llm_latency_ms="fast"), "llm_latency_ms", "must be a number"),
    # nesting
    Case("deep-metadata-33", _md("deep-metadata-33", d=_deep(32)), "metadata.d", "levels deep"),
    Case("deep-event-100000", "[" * 100_000 + "]" * 100_000, None, "levels deep"),
    Case("deep-metadata-5000", _raw_md("deep-metadata-5000", "d", "[" * 5000 + "]" * 5000), None, "levels deep"),
    # timestamps
    Case("ts-year-10000-in-utc", _with("ts-year-10000-in-utc", timestamp="9999-12-31T23:30:00-01:00"), "timestamp", "outside the range"),
    Case("ts-year-0-in-utc", _with("ts-year-0-in-utc", timestamp="0001-01-01T00:30:00+01:00"), "timestamp", "outside the range"),
    Case("ts-last-day", _with("ts-last-day", timestamp="9999-12-31T12:00:00Z"), "timestamp", "outside the range"),
    Case("ts-first-day", _with("ts-first-day", timestamp="0001-01-01T12:00:00Z"), "timestamp", "outside the range"),
    Case("ts-words", _with("ts-words", timestamp="yesterday"), "timestamp", "ISO-8601"),
    Case("ts-number", _with("ts-number", timestamp=1_700_000_000), "timestamp", "ISO-8601"),
    Case("ts-null", _with("ts-null", timestamp=None), "timestamp", "ISO-8601"),
    Case("ts-month-13", _with("ts-month-13", timestamp="2026-13-01T00:00:00Z"), "timestamp", "ISO-8601"),
    Case("ts-five-digit-year", _with("ts-five-digit-year", timestamp="+10000-01-01T00:00:00Z"), "timestamp", "ISO-8601"),
    Case("ts-offset-24h", _with("ts-offset-24h", timestamp="2026-11-30T10:00:00+24:00"), "timestamp", "ISO-8601"),
    Case("ts-double-z", _with("ts-double-z", timestamp="2026-11-30T10:00:00ZZ"), "timestamp", "ISO-8601"),
    # ids
    Case("run-id-slash", _with("run-id-slash", run_id="team/run"), "run_id", "'/'"),
    Case("run-id-empty", _with("run-id-empty", run_id=""), "run_id", "is empty"),
    Case("run-id-201", _with("run-id-201", run_id="r" * 201), "run_id", "at most 200"),
    Case("run-id-newline", _with("run-id-newline", run_id="a\nb"), "run_id", "control character"),
    Case("run-id-c1", _with("run-id-c1", run_id="a\x85b"), "run_id", "control character"),
    Case("run-id-del", _with("run-id-del", run_id="a\x7fb"), "run_id", "control character"),
    Case("run-id-number", _with("run-id-number", run_id=5), "run_id", "must be a string, got number"),
    Case("run-id-missing", _with("run-id-missing", run_id=_DROP), "run_id", "missing"),
    Case("step-id-slash", _with("step-id-slash", step_id="s/1"), "step_id", "'/'"),
    Case("step-id-tab", _with("step-id-tab", step_id="s\t1"), "step_id", "control character"),
    Case("step-id-null", _with("step-id-null", step_id=None), "step_id", "missing"),
    # other fields and columns
    Case("event-type-101", _with("event-type-101", event_type="e" * 101), "event_type", "at most 100"),
    Case("event-type-empty", _with("event-type-empty", event_type=""), "event_type", "is empty"),
    Case("event-type-list", _with("event-type-list", event_type=[]), "event_type", "must be a string"),
    Case("parent-201", _with("parent-201", parent_step_id="p" * 201), "parent_step_id", "at most 200"),
    Case("parent-number", _with("parent-number", parent_step_id=5), "parent_step_id", "string or null"),
    Case("agent-201", _md("agent-201", source_agent="a" * 201), "metadata.source_agent", "at most 200"),
    Case("agent-number", _md("agent-number", source_agent=7), "metadata.source_agent", "must be a string"),
    Case("metadata-string", _with("metadata-string", metadata="x"), "metadata", "must be an object"),
    Case("metadata-list", _with("metadata-list", metadata=[1]), "metadata", "must be an object"),
    Case("tool-call-string", _with("tool-call-string", tool_call="x"), "tool_call", "object or null"),
    Case("budgets-list", _with("budgets-list", budgets=[1]), "budgets", "object or null"),
    Case("model-number", _with("model-number", model=5), "model", "string or null"),
    # score events (`chat.score`): their metadata.score
    Case("score-no-name", _with("score-no-name", event_type="score", metadata={"producer": OURS, "turn": None, "step": None, "score": {"value": 1}}), "metadata.score.name", "score name"),
    Case("score-list-value", _with("score-list-value", event_type="score", metadata={"producer": OURS, "turn": None, "step": None, "score": {"name": "h", "value": [1]}}), "metadata.score.value", "a number"),
    Case("score-turn-without-turn", _with("score-turn-without-turn", event_type="score", metadata={"producer": OURS, "turn": None, "step": None, "score": {"name": "h", "value": 1, "target": "turn"}}), "metadata.turn", "names its turn"),
    # not an event at all
    Case("a-string", '"hello"', None, "must be a JSON object"),
    Case("null", "null", None, "must be a JSON object"),
    Case("a-list", "[1, 2]", None, "must be a JSON object"),
    Case("a-number", "17", None, "must be a JSON object"),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)
