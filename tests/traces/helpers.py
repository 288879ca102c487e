"""Helpers for traces tests: sample events and a snapshot of every projection row (for equality)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traces.models import ContextDecision, Pin, PrimitiveEvent, Project, Run, Step, Turn

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "arcana-1.2"
PIN_RUN = "17a81a75-0187-4ca7-b323-4a0c6e1c963b"


def sample_files() -> list[Path]:
    return sorted(SAMPLES.rglob("*.jsonl"))


def sample_events(name: str | None = None) -> list[dict[str, Any]]:
    """Events of every sample file (or of the file whose name starts with `name`), in file order."""
    out: list[dict[str, Any]] = []
    for path in sample_files():
        if name is None or path.name.startswith(name):
            out.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return out


_SKIP = {"id", "run", "turn", "step", "updated_at", "created_at"}


def _row(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields if f.name not in _SKIP}


def projection_snapshot(project: Project) -> dict[str, Any]:
    """Every projection row of the project, keyed by natural keys (no database ids)."""
    out: dict[str, Any] = {}
    for run in Run.objects.filter(project=project).order_by("run_id"):
        r = _row(run)
        r.pop("project_id")
        # The turn-by-turn path's bookkeeping, not a projection (test_ingest_running_totals.py checks
        # it against a recount of the rows).
        r.pop("tally")
        out[run.run_id] = {
            "run": r,
            "turns": [_row(t) for t in Turn.objects.filter(run=run).order_by("agent", "number")],
            "steps": [
                {**_row(s), "turn": (s.turn.agent, s.turn.number)}
                for s in Step.objects.filter(run=run)
                .select_related("turn")
                .order_by("agent", "turn_number", "number")
            ],
            "decisions": [
                {**_row(d), "step": (d.step.agent, d.step.turn_number, d.step.number)}
                for d in ContextDecision.objects.filter(run=run)
                .select_related("step")
                .order_by("agent", "turn_number", "step_number")
            ],
            "primitives": sorted(
                (
                    {**_row(p), "step": (p.step.turn_number, p.step.number) if p.step else None}
                    for p in PrimitiveEvent.objects.filter(run=run).select_related("step")
                ),
                key=lambda d: d["event_step_id"],
            ),
            "pins": [_row(p) for p in Pin.objects.filter(run=run).order_by("agent", "pin_id")],
        }
    return out


def our_run(
    run_id: str, *, agents: tuple[str, ...] = ("planner", "critic"), turns: int = 3, steps: int = 2
) -> list[dict[str, Any]]:
    """Events as Arcana Console's runtime writes them (docs/trace-format.md): a pool of `agents`, each with
    `turns` turns of `steps` steps; agent 0 pins in turn 1 (until turn 2), the last agent pins in turn 1
    and unpins in turn 2, and every step calls a tool."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    clock = iter(range(10**6))
    out: list[dict[str, Any]] = []

    def ev(
        kind: str, agent: str, turn: int, step: int, parent: str | None, md: dict[str, Any], **env: Any
    ) -> str:
        sid = f"{run_id}-{len(out):05d}"
        base: dict[str, Any] = {k: None for k in ("task_id", "state_before_hash", "state_after_hash")}
        base.update(
            run_id=run_id, step_id=env.pop("step_id", sid), parent_step_id=parent, role="system", event_type=kind,
            timestamp=(t0 + timedelta(milliseconds=next(clock))).isoformat(), llm_request_digest=None,
            llm_response_digest=None, model=env.pop("model", None), llm_latency_ms=env.pop("latency", None),
            tool_call=env.pop("tool_call", None), budgets=None, stop_reason=None, stop_detail=None,
            metadata={"producer": "arcana-console", "turn": turn, "step": step, "source_agent": agent, **md},
        )  # fmt: skip
        out.append(base)
        return base["step_id"]

    prev: dict[str, str | None] = {a: None for a in agents}
    for turn in range(1, turns + 1):
        for agent in agents:
            for step in range(1, steps + 1):
                turn_id = f"{run_id}-{agent}-{turn}-{step}"
                decisions = [
                    {"index": i, "role": "user" if i % 2 else "assistant", "outcome": "kept", "fidelity": "L0",
                     "relevance_score": 0.5, "token_count_before": 10, "token_count_after": 10, "reason": "tail"}
                    for i in range(4 + turn)
                ]  # fmt: skip
                if turn == 2:
                    decisions.append(
                        {"index": len(decisions), "role": "system", "outcome": "kept", "fidelity": "L0",
                         "relevance_score": None, "token_count_before": 12, "token_count_after": 12,
                         "reason": "pinned", "pinned": True, "pin_id": f"p_{agent[:4]:0<4}0001"}
                    )  # fmt: skip
                cd = {"turn": turn, "step": step, "strategy": "passthrough", "budget_total": 1000, "budget_used": 100 * turn,
                      "budget_tools": 50, "budget_reserve": 200, "messages_in": len(decisions), "messages_out": len(decisions),
                      "compressed_count": 0, "decisions": decisions, "explanation": f"turn {turn}"}  # fmt: skip
                ev("context_decision", agent, turn, step, turn_id, {
                    "context_decision": cd, "explanation": cd["explanation"], "compressed_count": 0,
                    "messages_in": len(decisions), "messages_out": len(decisions),
                    "context_report": {"utilization": 0.1 * turn + 0.01 * step}})  # fmt: skip
                final = step == steps
                ev("turn", agent, turn, step, prev[agent], {
                    "facts": {"assistant_text": f"{agent} says {turn}.{step}", "tool_calls": [] if final else
                              [{"id": f"call-{turn}-{step}", "name": "search", "arguments": "{}"}],
                              "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
                              "finish_reason": "stop" if final else "tool_calls"},
                    "assessment": {"completed": final, "failed": False},
                    "messages": [{"role": "assistant", "content": f"{agent} says {turn}.{step}"}]},
                    step_id=turn_id, model="gpt-test", latency=40)  # fmt: skip
                prev[agent] = turn_id
                ev("llm_call", agent, turn, step, turn_id, {"provider": "openai", "purpose": "chat", "latency_ms": 40,
                   "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}, model="gpt-test")  # fmt: skip
                if step == 1 and turn == 1:
                    ev("cognitive_primitive", agent, turn, step, turn_id, {
                        "primitive": "pin", "args": {"content": f"fact of {agent}", "label": agent, "until_turn": 2},
                        "result": {"pinned": True, "pin_id": f"p_{agent[:4]:0<4}0001", "label": agent,
                                   "until_turn": 2, "already_pinned": False}, "tool_call_id": "c1", "tokens": 12})  # fmt: skip
                if step == 1 and turn == 2 and agent == agents[-1]:
                    ev("cognitive_primitive", agent, turn, step, turn_id, {
                        "primitive": "unpin", "args": {"pin_id": f"p_{agent[:4]:0<4}0001"},
                        "result": {"unpinned": True, "pin_id": f"p_{agent[:4]:0<4}0001"}, "tool_call_id": "c2"})  # fmt: skip
                if not final:
                    ev("tool_call", agent, turn, step, turn_id, {"tool_call_id": f"call-{turn}-{step}",
                       "arguments": {}, "result": "ok"}, tool_call={"name": "search", "error": None})  # fmt: skip
    return out
