"""Writing derived events: the envelope in our dialect (`EventWriter`), a step's id from its span,
the time of an event from a span's nanoseconds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .._trace import ENVELOPE_KEYS as TRACE_ENVELOPE_KEYS
from .._trace import OTLP_PRODUCER
from ._types import OtlpStep

#: The envelope's keys other than the ones every derived event sets itself (`EventWriter.emit`).
ENVELOPE_KEYS = tuple(
    k
    for k in TRACE_ENVELOPE_KEYS
    if k not in ("run_id", "step_id", "parent_step_id", "timestamp", "role", "event_type", "metadata")
)


def event_time(ns: int) -> str:
    return (
        datetime.fromtimestamp(ns // 1_000_000_000, UTC)
        .replace(microsecond=(ns // 1000) % 1_000_000)
        .isoformat()
    )


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class EventWriter:
    def __init__(self, run_id: str, agents: int) -> None:
        self.run_id = run_id
        self.many_agents = agents > 1
        self.events: list[dict[str, Any]] = []
        self.iteration = -1

    def emit(
        self,
        event_type: str,
        step_id: str,
        parent: str | None,
        ns: int,
        position: tuple[int, int, str | None],
        metadata: dict[str, Any],
        *,
        recorded: bool = False,
        **envelope: Any,
    ) -> None:
        """One event. `recorded`: a step our runtime exported, numbered as its `TraceWriter` does
        (`turn` / `step` ours, but the LLM iteration where arcana-agent 1.2's CLI reads it), its pool
        agent named whenever the span named one."""
        turn, step, agent = position
        md: dict[str, Any] = {
            "producer": OTLP_PRODUCER,
            "turn": self.iteration,
            "step": self.iteration,
            "console_turn": turn,
            "console_step": step,
        }
        if recorded:
            md["turn"] = self.iteration if event_type in ("context_decision", "prompt_snapshot") else turn
            md["step"] = self.iteration if event_type == "turn" else step
        if (self.many_agents or recorded) and agent:
            md["source_agent"] = agent
        md.update(metadata)
        event: dict[str, Any] = {name: None for name in ENVELOPE_KEYS}
        event.update(
            run_id=self.run_id,
            step_id=step_id,
            parent_step_id=parent,
            timestamp=event_time(ns),
            role="system",
            event_type=event_type,
            metadata=md,
        )
        event.update(envelope)
        self.events.append(event)


def step_id_of(step: OtlpStep) -> str:
    return f"otlp-{step['trace_id']}-{step['span_id']}"


Pos = tuple[int, int, str | None]


def step_usage(step: OtlpStep) -> dict[str, Any]:
    u: dict[str, Any] = dict(step["usage"] or {})
    prompt, completion = u.get("input_tokens"), u.get("output_tokens")
    total = u.get("total_tokens")
    if total is None and (prompt is not None or completion is not None):
        total = (prompt or 0) + (completion or 0)
    return {
        "prompt_tokens": prompt or 0,
        "completion_tokens": completion or 0,
        "total_tokens": total or 0,
        "cached_tokens": u.get("cached_input_tokens"),
        "reasoning_tokens": u.get("reasoning_tokens"),
    }
