"""The plan of one `build()` (what each numbered step found) and the report and one-line
explanation it leaves behind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._json_text import MessageTexts
from .records import LEVELS, ContextReport, MessageDecision, PinBlock
from .slots import _Slot


@dataclass
class _Plan:
    """What one `build()` call knows so far; each numbered step fills in its part."""

    # Step 1: layers and units.
    n: int
    k: int  # number of leading identity (system) messages
    task_idx: int | None
    slots: list[_Slot]
    units: list[list[int]]
    tools: list[Mapping[str, Any]]
    pins: Sequence[PinBlock]
    # Step 2: counts.
    tools_tokens: int = 0
    budget_total: int = 0
    pin_msgs: list[dict[str, Any]] = field(default_factory=list)
    pin_counts: list[int] = field(default_factory=list)
    pin_tokens: int = 0
    # Step 6: counted while assembling (`sent_messages_and_decisions`): input messages by outcome,
    # sent ones by level, L0 tokens of all, tokens sent, and L0 and sent tokens of the compressed.
    outcomes: dict[str, int] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)
    l0_total: int = 0
    sent_input: int = 0
    squeezed_before: int = 0
    squeezed_after: int = 0
    # Each input message's JSON texts kept from the step before (None: not known); see `_slots`.
    l0_texts: list[MessageTexts | None] | None = None
    # Step 3: strategy.
    demand: int = 0
    demand_ratio: float = 0.0
    requested: str = ""
    used: str = ""
    note: str | None = None
    # Step 4: the strategy applied.
    fixed: int = 0
    summary_msg: dict[str, Any] | None = None
    summary_call_made: bool = False
    summary_error: str | None = None
    summary_request: list[dict[str, Any]] | None = None
    # Step 5: fitted.
    total: int = 0
    summary_tokens: int = 0


def context_report(plan: _Plan, *, turn: int, step: int, window: int, encoding: str) -> ContextReport:
    """The `ContextReport` of a fitted plan (after step 5); `budget_used` is `plan.total`."""
    slots, k, task_idx = plan.slots, plan.k, plan.task_idx
    budget_used, tools_tokens, pin_count = plan.total, plan.tools_tokens, len(plan.pin_msgs)
    summary_tokens = plan.summary_tokens
    identity = sum(s.l0 for s in slots[:k])
    task = slots[task_idx].l0 if task_idx is not None else 0
    working = budget_used - identity - task
    total = budget_used + tools_tokens
    dist = {lvl: 0 for lvl in LEVELS}
    dist["L0"] += pin_count
    for level, count in plan.levels.items():
        dist[level] += count
    sent_input, l0_total = plan.sent_input, plan.l0_total
    not_kept = len(slots) - plan.outcomes.get("kept", 0)
    return ContextReport(
        turn=turn,
        step=step,
        strategy_used=plan.used,
        strategy_requested=plan.requested,
        strategy_note=plan.note,
        window_size=window,
        budget=plan.budget_total,
        total_tokens=total,
        utilization=round(total / window, 6),
        demand_tokens=plan.demand,
        demand_ratio=round(plan.demand_ratio, 6),
        identity_tokens=identity,
        task_tokens=task,
        tools_tokens=tools_tokens,
        pin_tokens=plan.pin_tokens,
        history_tokens=sent_input - identity + summary_tokens,
        summary_tokens=summary_tokens,
        compression_applied=not_kept > 0,
        compression_savings=l0_total - sent_input - summary_tokens,
        messages_compressed=not_kept,
        fidelity_distribution=dist,
        tokens_by_layer={
            "identity": identity,
            "task": task,
            "working": working,
            "external": tools_tokens,
        },
        encoding=encoding,
        tools_loaded=len(plan.tools),
        pinned_count=pin_count,
    )


def explanation(plan: _Plan, report: ContextReport) -> str:
    """The decision's one-line explanation: what the strategy did, with the budget figures."""
    slots, used, note = plan.slots, plan.used, plan.note
    budget_used, budget_total, pin_count = plan.total, plan.budget_total, len(plan.pin_msgs)
    pct = round(report.utilization * 100)
    figures = f"budget {budget_used}/{budget_total} tokens ({pct}% of the window)"
    outcomes = plan.outcomes
    compressed, dropped = outcomes.get("compressed", 0), outcomes.get("dropped", 0)
    summarized = outcomes.get("summarized", 0)
    if used == "passthrough":
        text = f"Under budget, all {len(slots)} messages kept; {figures}"
    elif used == "aggressive_truncate":
        kept = outcomes.get("kept", 0) + compressed
        text = f"Aggressive truncate: kept identity + last turns ({kept} messages), {dropped} dropped"
        if compressed:
            text += f", {compressed} compressed"
        text += f"; {figures}"
    elif used == "llm_summarize":
        text = f"{summarized} messages LLM-summarized into 1 ({report.summary_tokens} tokens)"
        if compressed or dropped:
            text += f", {compressed} compressed, {dropped} dropped"
        text += f"; {figures}"
    else:
        before, after = plan.squeezed_before, plan.squeezed_after
        ratio = before / after if after else 1.0
        text = f"{compressed} messages fidelity-compressed ({ratio:.1f}x), {dropped} dropped; {figures}"
    if pin_count:
        text += f"; {pin_count} pinned block{'s' if pin_count != 1 else ''} ({report.pin_tokens} tokens)"
    if note:
        text = f"{note}. {text}"
    return text


Source = tuple[Any, int] | None

# The message decisions made so far, by their fields: a step's decisions are mostly the step
# before's (the same message at the same place, graded the same), and a decision made once keeps its
# trace shape and JSON text (`MessageDecision._text`). The fields' types are fixed (int, str, str,
# str or None, float or None, int, int, str), so equal fields are the same decision.
_DECISIONS: dict[tuple[Any, ...], MessageDecision] = {}
_DECISIONS_SIZE = 65_536
_UNKNOWN: Any = object()


def sent_messages_and_decisions(
    plan: _Plan, *, remember: bool = True
) -> tuple[list[dict[str, Any]], list[MessageDecision], list[Source], list[MessageTexts | None] | None]:
    """The messages to send (identity, pins, then the rest in order, the summary where the first
    summarized message was), each one's source (`WorkingSet.sources`) and one decision per input
    message, then per pin, in one pass."""
    slots, k, summary_msg = plan.slots, plan.k, plan.summary_msg
    messages: list[dict[str, Any]] = [dict(s.msg) for s in slots[:k]]
    sources: list[Source] = [(s.info, 0) for s in slots[:k]]
    messages.extend(plan.pin_msgs)
    sources.extend(None for _ in plan.pin_msgs)
    l0_texts = plan.l0_texts
    texts: list[MessageTexts | None] | None = None
    if l0_texts is not None:
        texts = l0_texts[:k]
        texts.extend(None for _ in plan.pin_msgs)
    placed_summary = False
    made: dict[tuple[Any, ...], MessageDecision] = _DECISIONS if remember else {}
    make = MessageDecision._of_message
    if len(made) >= _DECISIONS_SIZE:
        made.clear()  # decisions already handed out stay valid: each is its fields
    decisions: list[MessageDecision] = []
    add_message, add_source, add_decision = messages.append, sources.append, decisions.append
    add_text = texts.append if texts is not None else None
    outcomes: dict[str, int] = {}
    levels: dict[str, int] = {}
    l0_total = sent_input = squeezed_before = squeezed_after = 0
    # One pass: each slot's decision, its counts and, after the identity, its message.
    for s in slots:
        outcome = s.outcome
        info = s.info
        rung = info.rungs[s.rung]
        sent = outcome == "kept" or outcome == "compressed"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        l0_total += s.l0
        if sent:
            level = rung[0]
            levels[level] = levels.get(level, 0) + 1
            sent_input += rung[2]
            if outcome == "compressed":
                squeezed_before += s.l0
                squeezed_after += rung[2]
        if s.index >= k:
            if outcome == "summarized" and not placed_summary and summary_msg is not None:
                add_message(summary_msg)
                add_source(None)
                if add_text is not None:
                    add_text(None)
                placed_summary = True
            if sent:
                # L0 sends this step's own message; lower levels a copy of the cached render.
                rendered = rung[1]
                add_message(dict(s.msg) if rendered is None else dict(rendered))
                add_source((info, s.rung))
                if add_text is not None and l0_texts is not None:
                    if rendered is None:
                        add_text(l0_texts[s.index])
                    else:
                        text = info.rung_texts.get(s.rung, _UNKNOWN)
                        add_text(_render_texts(info, s.rung) if text is _UNKNOWN else text)
        fields = (
            s.index,
            s.role,
            outcome,
            rung[0] if sent else None,
            s.score,
            s.l0,
            rung[2] if sent else 0,
            s.reason,
        )
        decision = made.get(fields)
        if decision is None:
            decision = made[fields] = make(*fields)
            if remember:  # its shape and text, made once
                decision._shape()
                decision._text()
        add_decision(decision)

    plan.outcomes, plan.levels, plan.l0_total, plan.sent_input = outcomes, levels, l0_total, sent_input
    plan.squeezed_before, plan.squeezed_after = squeezed_before, squeezed_after
    start = len(decisions)
    decisions.extend(
        MessageDecision(
            index=k + j,
            role="system",
            outcome="kept",
            fidelity="L0",
            relevance_score=None,
            token_count_before=plan.pin_counts[j],
            token_count_after=plan.pin_counts[j],
            reason="pinned",
            pinned=True,
            pin_id=p.pin_id,
        )
        for j, p in enumerate(plan.pins)
    )
    if remember:
        for pin in decisions[start:]:
            pin._shape()
            pin._text()
    return messages, decisions, sources, texts


def _render_texts(info: Any, rung: int) -> MessageTexts | None:
    """The texts of a cached render: one entry per render made only of string keys and string or
    None values (a copy of it shares nothing that can change), else None (looked up each step)."""
    entry: MessageTexts | None
    try:
        return info.rung_texts[rung]  # type: ignore[no-any-return]
    except KeyError:
        rendered = info.rungs[rung][1]
        flat = all(k.__class__ is str and (v is None or v.__class__ is str) for k, v in rendered.items())
        entry = info.rung_texts[rung] = MessageTexts() if flat else None
        return entry
