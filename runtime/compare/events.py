"""`run_data_from_events`: a run's `RunData` from its trace events (files of our runtime and of
arcana-agent 1.2 alike), read through `runtime.facts`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._trace import TraceEvent
from ..facts import (
    build_steps,
    decision_rows,
    is_pinned_row,
    normalize_events,
    pin_lifetimes,
    pinned_blocks,
    primitive_outcome,
    run_outcome,
    step_errors,
    tool_results,
)
from .data import PinData, RunData, StepData, TurnData, level_of, pin_key


def _usage(value: Any) -> tuple[int, int]:
    u = value if isinstance(value, dict) else {}
    p, c = u.get("prompt_tokens"), u.get("completion_tokens")
    return (p if type(p) is int else 0), (c if type(c) is int else 0)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def run_data_from_events(run_id: str, events: Iterable[TraceEvent], agent: str | None = None) -> RunData:
    """A `RunData` from a run's trace events (ours or arcana-agent 1.2's), read with `runtime.facts`.
    `agent`: the pool agent to compare (default: the first agent, or the plain chat)."""
    evs = list(events)
    norm = normalize_events(evs)
    all_turns = build_steps(norm)
    agents = [t.agent for t in all_turns]
    if agent is None and agents:
        agent = agents[0]
    turns_v = [t for t in all_turns if t.agent == agent]
    lifetimes = pin_lifetimes(turns_v)
    pins = [
        PinData(p.pin_id, p.label, p.content, p.tokens, p.created_turn, p.until_turn, p.unpinned_turn)
        for p in lifetimes
    ]
    key_of = {p.pin_id: p.key for p in pins}
    outcome = run_outcome(all_turns, evs)
    data = RunData(
        run_id=run_id,
        pins=pins,
        status=outcome.status,
        failure=outcome.reason,
        agent=agent,
        producer="arcana-console" if any(ev.is_ours for ev in evs) else "arcana-1.2",
    )
    stamps = [ev.timestamp_dt for ev in evs]
    if stamps:
        data.duration_seconds = (max(stamps) - min(stamps)).total_seconds()
    for tv in turns_v:
        td = TurnData(number=tv.turn)
        for sv in tv.steps:
            te = sv.turn_event
            md = te.metadata if te is not None else {}
            raw_facts = md.get("facts")
            facts: dict[str, Any] = raw_facts if isinstance(raw_facts, dict) else {}
            p, c = _usage(facts.get("usage"))
            if not facts.get("usage"):
                for ev in sv.llm_calls:
                    if ev.is_ours and ev.metadata.get("purpose") != "summarize":
                        dp, dc = _usage(ev.metadata.get("usage"))
                        p, c = p + dp, c + dc
            td.prompt_tokens += p
            td.completion_tokens += c
            if data.model is None and te is not None and te.model:
                data.model = te.model
            messages = md.get("messages")
            if td.user is None and isinstance(messages, list):
                td.user = next(
                    (m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"
                     and isinstance(m.get("content"), str)),
                    None,
                )  # fmt: skip
            text = facts.get("assistant_text")
            if isinstance(text, str) and text:
                td.answer = text
            results = tool_results(sv)
            td.tool_calls += len(results)
            td.errors += len(step_errors(sv))
            for ev in sv.primitive_calls:
                emd = ev.metadata
                o = primitive_outcome(emd.get("primitive"), emd.get("args"), emd.get("result"))
                td.primitives.append(o.line)
                data.count_primitive(o)
            td.steps.append(_step_from_view(sv, lifetimes, key_of))
            util = td.steps[-1].utilization
            if util is not None and (td.peak_utilization is None or util > td.peak_utilization):
                td.peak_utilization = util
        data.tool_calls += td.tool_calls
        data.errors += td.errors
        data.turns.append(td)
    return data


def _step_from_view(sv: Any, lifetimes: Any, key_of: dict[str, str]) -> StepData:
    cd = sv.context_decision
    if cd is None:
        return StepData(turn=sv.turn, step=sv.step, has_decision=False)
    md = cd.metadata
    report = md.get("context_report") if isinstance(md.get("context_report"), dict) else {}
    decision = md.get("context_decision") if isinstance(md.get("context_decision"), dict) else {}
    strategy = decision.get("strategy")
    rows = decision_rows(cd)
    snapshot = sv.prompt_snapshot.metadata.get("prompt_snapshot") if sv.prompt_snapshot else None
    blocks = iter(
        pinned_blocks(
            rows,
            lifetimes,
            sv.turn,
            arcana=not cd.is_ours,
            snapshot_messages=snapshot.get("messages") if isinstance(snapshot, dict) else None,
        )
    )
    pins: dict[str, str] = {}
    messages: dict[int, tuple[int, str | None, int | None]] = {}
    for row in rows:
        if is_pinned_row(row):
            block = next(blocks, None)
            pid = block.pin_id if block is not None else None
            pins[key_of.get(pid or "") or pin_key(pid, None, None)] = pid or "?"
            continue
        index = row.get("index")
        if type(index) is not int:
            continue
        tokens = row.get("token_count_after")
        role = row.get("role")
        messages[index] = (
            level_of(row.get("outcome"), row.get("fidelity")),
            role if isinstance(role, str) else None,
            tokens if type(tokens) is int else None,
        )
    return StepData.from_messages(
        sv.turn,
        sv.step,
        messages,
        pins=pins,
        utilization=_num(report.get("utilization")),
        strategy=strategy if isinstance(strategy, str) else None,
    )
