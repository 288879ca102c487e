"""The plan of one `build()` (what each numbered step found) and the report and one-line
explanation it leaves behind."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from .._json_text import MessageTexts
from .config import LEVELS
from .records import ContextReport, MessageDecision, PinBlock
from .slots import Slot


@dataclass
class Plan:
    """What one `build()` call knows so far; each numbered step fills in its part."""

    # Step 1: layers and units.
    n: int
    k: int  # number of leading identity (system) messages
    task_idx: int | None
    slots: list[Slot]
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
    # Each input message's JSON texts kept from the step before (None: not known); see `MessageMemory.slots`.
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


def context_report(plan: Plan, *, turn: int, step: int, window: int, encoding: str) -> ContextReport:
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


def explanation(plan: Plan, report: ContextReport) -> str:
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
    plan: Plan, *, remember: bool = True
) -> tuple[list[dict[str, Any]], list[MessageDecision], list[Source], list[MessageTexts | None] | None]:
    """The messages to send (identity, pins, then the rest in order, the summary where the first
    summarized message was), each one's source (`WorkingSet.sources`) and one decision per input
    message, then per pin, in one pass."""
    slots, k, summary_msg = plan.slots, plan.k, plan.summary_msg
    messages, sources, texts = _identity_and_pins(plan)
    l0_texts = plan.l0_texts
    # Nothing to place when there is no summary.
    placed_summary = summary_msg is None
    made: dict[tuple[Any, ...], MessageDecision] = _DECISIONS if remember else {}
    make = MessageDecision._of_message
    if len(made) >= _DECISIONS_SIZE:
        made.clear()  # decisions already handed out stay valid: each is its fields
    find = made.get
    decisions: list[MessageDecision] = []
    add_message, add_source, add_decision = messages.append, sources.append, decisions.append
    add_text = texts.append if texts is not None and l0_texts is not None else None
    sent_input = squeezed_before = squeezed_after = 0
    # One pass: each slot's decision, its counts and, after the identity, its message.
    for s in slots:
        outcome = s.outcome
        info = s.info
        r = s.rung
        rung = info.rungs[r]
        l0 = s.l0
        if outcome == "kept" or outcome == "compressed":  # sent
            fidelity: str | None = rung[0]
            after = rung[2]
            sent_input += after
            if outcome == "compressed":
                squeezed_before += l0
                squeezed_after += after
            if s.index >= k:
                # L0 sends this step's own message; lower levels a copy of the cached render.
                rendered = rung[1]
                add_source(info.sources[r])
                if rendered is None:
                    add_message(dict(s.msg))
                    if add_text is not None:
                        add_text(l0_texts[s.index])  # type: ignore[index]
                else:
                    add_message(dict(rendered))
                    if add_text is not None:
                        text = info.rung_texts.get(r, _UNKNOWN)
                        add_text(_render_texts(info, r) if text is _UNKNOWN else text)
        else:
            fidelity = None
            after = 0
            if not placed_summary and outcome == "summarized" and s.index >= k:
                add_message(summary_msg)  # type: ignore[arg-type]
                add_source(None)
                if add_text is not None:
                    add_text(None)
                placed_summary = True
        fields = (s.index, s.role, outcome, fidelity, s.score, l0, after, s.reason)
        decision = find(fields)
        if decision is None:
            decision = made[fields] = make(*fields)
            if remember:  # its shape and text, made once
                decision._shape()
                decision._text()
        add_decision(decision)

    _count_sent(plan, decisions, sent_input, squeezed_before, squeezed_after)
    decisions.extend(_pin_decisions(plan, remember))
    return messages, decisions, sources, texts


def _identity_and_pins(
    plan: Plan,
) -> tuple[list[dict[str, Any]], list[Source], list[MessageTexts | None] | None]:
    """The first messages sent (the identity, then the pins), their sources and their JSON texts
    (None when the step before's texts are not known)."""
    k = plan.k
    messages: list[dict[str, Any]] = [dict(s.msg) for s in plan.slots[:k]]
    sources: list[Source] = [s.info.sources[0] for s in plan.slots[:k]]
    messages.extend(plan.pin_msgs)
    sources.extend(None for _ in plan.pin_msgs)
    texts: list[MessageTexts | None] | None = None
    if plan.l0_texts is not None:
        texts = plan.l0_texts[:k]
        texts.extend(None for _ in plan.pin_msgs)
    return messages, sources, texts


def _count_sent(
    plan: Plan,
    decisions: list[MessageDecision],
    sent_input: int,
    squeezed_before: int,
    squeezed_after: int,
) -> None:
    """The plan's counts of what was sent (step 6), over the slots' and decisions' fields in C."""
    slots = plan.slots
    plan.outcomes = dict(Counter(map(_OUTCOME, slots)))
    levels = Counter(map(_FIDELITY, decisions))
    levels.pop(None, None)  # not sent
    plan.levels = dict(levels)
    plan.l0_total = sum(map(_L0, slots))
    plan.sent_input = sent_input
    plan.squeezed_before, plan.squeezed_after = squeezed_before, squeezed_after


def _pin_decisions(plan: Plan, remember: bool) -> list[MessageDecision]:
    """One decision per pin block, at its place in the output (after the identity); with
    `remember`, each one's shape and text made now."""
    k = plan.k
    pins = [
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
    ]
    if remember:
        for pin in pins:
            pin._shape()
            pin._text()
    return pins


_OUTCOME = attrgetter("outcome")
_FIDELITY = attrgetter("fidelity")
_L0 = attrgetter("l0")


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
