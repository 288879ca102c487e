"""Small helpers shared by the session, pool, state, trace-writer and primitive tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh event loop (the runtime tests are plain sync tests)."""
    return asyncio.run(coro)


def read_events(trace_dir: Path) -> list[dict[str, Any]]:
    """Every event of every `*.jsonl` file under `trace_dir`, in file then line order."""
    out: list[dict[str, Any]] = []
    for path in sorted(Path(trace_dir).glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out


def of_type(events: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event_type"] == event_type]


def tool_names(request: dict[str, Any]) -> list[str]:
    """Names of the tools a recorded ScriptedProvider request offered."""
    return [t["function"]["name"] for t in request.get("tools") or []]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted tool call."""
    return {"name": name, "arguments": arguments}


def calls(*items: dict[str, Any], content: str | None = None, when: str | None = None) -> dict[str, Any]:
    """A scripted step making tool calls."""
    step: dict[str, Any] = {"content": content, "tool_calls": list(items)}
    if when is not None:
        step["when"] = when
    return step


def tool_results(request: dict[str, Any]) -> dict[str, Any]:
    """`{tool_call_id: parsed JSON content (or text)}` of the tool messages of a request."""
    out: dict[str, Any] = {}
    for m in request["messages"]:
        if m.get("role") == "tool":
            try:
                out[m["tool_call_id"]] = json.loads(m["content"])
            except json.JSONDecodeError:
                out[m["tool_call_id"]] = m["content"]
    return out


def strip_volatile(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with ids, timestamps and latencies blanked, for comparing two runs."""
    ids: dict[str, str] = {}

    def norm_id(value: Any) -> Any:
        if isinstance(value, str):
            return ids.setdefault(value, f"id{len(ids)}")
        return value

    out = []
    for e in events:
        e = json.loads(json.dumps(e))
        e["run_id"] = "RUN"
        e["step_id"] = norm_id(e["step_id"])
        e["parent_step_id"] = norm_id(e["parent_step_id"])
        e["timestamp"] = "T"
        e["llm_latency_ms"] = 0 if e["llm_latency_ms"] is not None else None
        md = e["metadata"]
        if "latency_ms" in md:
            md["latency_ms"] = 0
        if isinstance(e.get("budgets"), dict):
            e["budgets"]["time_ms"] = 0
        if isinstance(md.get("prompt_snapshot"), dict):
            md["prompt_snapshot"]["budget_snapshot"]["time_ms"] = 0
        if isinstance(e.get("tool_call"), dict):
            e["tool_call"]["duration_ms"] = 0
        out.append(e)
    return out
