"""`arcana trace list`, `show` and `flow`: what a trace holds, run by run and turn by turn."""

from __future__ import annotations

from typing import Any

from .._render import table
from .._trace import TraceEvent
from .._trace_reader import (
    NormalizedEvent,
    PinLifetime,
    StepView,
    TurnView,
)
from ..facts import run_outcome, step_failure, turn_outcome
from ..pricing import CostSummary, PriceTable, format_usd, step_usage
from .command import Command
from .formatting import (
    UNRECORDED_CALL,
    as_dict,
    as_list,
    as_num,
    changed,
    decision,
    decision_row_compact,
    event_detail,
    is_arcana,
    pin_blocks,
    pin_line,
    primitive_line,
    step_model,
    tool_outcome,
    ts,
    unrecorded_calls,
    where,
)


def cmd_list(c: Command) -> int:
    runs = c.reader.runs()
    if c.args.agent:
        runs = [r for r in runs if c.args.agent in r.agents]
    if c.as_json:
        c.out.raw_json([r.to_dict() for r in runs])
        return c.report_line_errors()
    c.out.line(f"Runs in {c.dir} ({len(runs)}), newest first")
    if runs:
        c.out.line()
        rows = [
            [
                r.run_id,
                ", ".join(r.agents) or "-",
                r.turns,
                r.steps,
                r.status,
                r.errors,
                r.events,
                r.primitives,
                f"{r.size:,} B",
                (r.started or "-")[:19].replace("T", " "),
                r.producer,
            ]
            for r in runs
        ]
        c.out.lines(
            table(
                [
                    "RUN ID",
                    "AGENTS",
                    "TURNS",
                    "STEPS",
                    "STATUS",
                    "ERRORS",
                    "EVENTS",
                    "PRIMITIVES",
                    "SIZE",
                    "STARTED (UTC)",
                    "PRODUCER",
                ],
                rows,
                align="llrrlrrrrll",
                max_widths=[None, 24],
            )
        )
        bundles: dict[str, list[str]] = {}
        for r in reversed(runs):  # oldest first
            if r.bundle_id:
                bundles.setdefault(r.bundle_id, []).append(r.run_id)
        for bundle, members in bundles.items():
            c.out.line()
            c.out.line(f"Bundle {bundle}: {len(members)} runs, in start order")
            for r in (next(x for x in runs if x.run_id == m) for m in members):
                by = f"  delegated by {r.delegated_by_run_id}" if r.delegated_by_run_id else ""
                c.out.line(f"  {r.run_id}  {', '.join(r.agents) or '-'}{by}")
    return c.report_line_errors()


FILTERS = {
    "cognitive": ("cognitive_primitive",),
    "context": ("context_decision",),
    "errors": ("error",),
    "tools": ("tool_call",),
    "llm": ("llm_call",),
}


def cmd_show(c: Command) -> int:
    rid = c.run_id()
    files = c.reader.files_of(rid)
    norm = c.reader.normalized(rid)
    arcana = is_arcana(norm[0] if norm else None)
    if c.args.agent:
        c.agent_turns(rid)  # validates the name
        norm = [ne for ne in norm if ne.agent == c.args.agent]
    wanted = {t for name, types in FILTERS.items() if getattr(c.args, name) for t in types}
    # Tool failures are errors too; an `error` filter also shows failed tool calls.
    shown = [
        ne
        for ne in norm
        if not wanted
        or ne.event_type in wanted
        or ("error" in wanted and ne.event_type == "tool_call" and as_dict(ne.event.tool_call).get("error"))
    ]
    total = len(c.reader.normalized(rid))
    pins = c.reader.pins(rid)
    steps = {(sv.agent, sv.turn, sv.step): sv for tv in c.reader.turns(rid) for sv in tv.steps}
    if c.as_json:
        c.out.raw_json(
            {
                "run_id": rid,
                "agent": c.args.agent,
                "total_events": total,
                "cost": run_cost(c.reader.turns(rid), c.args.agent).to_dict(),
                "events": [_show_json(ne, steps, pins, arcana) for ne in shown],
            }
        )
        return c.report_line_errors(files)
    with_agent = bool(c.reader.agents(rid))
    c.out.line(f"Trace: {rid}" + (f" (agent={c.args.agent})" if c.args.agent else ""))
    c.out.line(f"Events: {len(shown)}" + (f" (filtered from {total})" if len(shown) != total else ""))
    if arcana:
        c.out.line("Producer: arcana-agent 1.2 (turn = LLM iteration + 1)")
    summary = c.reader.summary(rid)
    if summary.status == "failed":
        c.out.line(f"Failed: {summary.failure or 'the run failed'}")
    if summary.bundle_id:
        c.out.line(f"Bundle: {summary.bundle_id}")
    if summary.delegated_by_run_id:
        c.out.line(f"Delegated by: {summary.delegated_by_run_id}")
    c.out.line(f"Cost: {cost_line(run_cost(c.reader.turns(rid), c.args.agent))}")
    c.out.line()
    for ne in shown:
        ev = ne.event
        c.out.line(f"{ne.index:>3}. {ev.event_type:<21} {ts(ev)}  {event_detail(ev)}{where(ne, with_agent)}")
        if ev.event_type == "context_decision" and c.args.context:
            sv = steps.get((ne.agent, ne.turn or 0, ne.step or 0))
            _context_lines(c, ev, sv, pins, arcana)
    return c.report_line_errors(files)


def run_cost(turns: list[TurnView], agent: str | None = None) -> CostSummary:
    """The cost of a run's steps (of one agent's, when given) with the default price table."""
    rows = []
    for tv in turns:
        if agent is not None and tv.agent != agent:
            continue
        for sv in tv.steps:
            u = step_usage(sv)
            rows.append((step_model(sv) or "", u.prompt_tokens, u.completion_tokens, u.cached_tokens))
    return PriceTable().summarize(rows)


def cost_line(cost: CostSummary) -> str:
    """`$0.0123 (gpt-4o-mini: 1,200 in / 80 out)`; the tokens of models without a price are named,
    never priced."""
    parts = [
        f"{e.model or 'unknown model'}: {e.prompt_tokens:,} in / {e.completion_tokens:,} out"
        + ("" if e.cost is not None else ", no price for this model")
        for e in sorted(cost.by_model.values(), key=lambda e: e.model)
        if e.tokens
    ]
    total = format_usd(cost.cost) if cost.any_priced else "not priced"
    return total + (f" ({'; '.join(parts)})" if parts else " (no tokens recorded)")


def _show_json(
    ne: NormalizedEvent,
    steps: dict[tuple[str | None, int, int], StepView],
    pins: list[PinLifetime],
    arcana: bool,
) -> dict[str, Any]:
    """One event of `show --json`: the event as written plus what the text view derives from it
    (the primitive's one-line summary; a decision's pinned blocks at their real index)."""
    item: dict[str, Any] = {
        "index": ne.index,
        "turn": ne.turn,
        "step": ne.step,
        "agent": ne.agent,
        "event": ne.event.to_dict(),
    }
    if ne.event_type == "cognitive_primitive":
        prim, summary, ok = primitive_line(ne.event)
        item["primitive"] = {"name": prim, "summary": summary, "ok": ok}
    elif ne.event_type == "context_decision":
        sv = steps.get((ne.agent, ne.turn or 0, ne.step or 0))
        agent_pins = [p for p in pins if sv is not None and p.agent == sv.agent]
        item["pinned_blocks"] = pin_blocks(sv, agent_pins, arcana=arcana) if sv is not None else []
    return item


def _context_lines(
    c: Command, ev: TraceEvent, sv: StepView | None, pins: list[PinLifetime], arcana: bool
) -> None:
    cd = decision(ev)
    pad = "       "
    explanation = cd.get("explanation") or ev.metadata.get("explanation")
    if explanation:
        c.out.line(pad + str(explanation))
    c.out.line(
        f"{pad}messages: {as_num(cd.get('messages_in'))} → {as_num(cd.get('messages_out'))} "
        f"({changed(ev)}) · budget "
        f"{as_num(cd.get('budget_used'))}/{as_num(cd.get('budget_total'))}"
    )
    for d in as_list(cd.get("decisions")):
        if isinstance(d, dict) and not (d.get("reason") == "pinned" or d.get("pinned") is True):
            c.out.line(pad + decision_row_compact(d))
    if sv is not None:
        for b in pin_blocks(sv, [p for p in pins if p.agent == sv.agent], arcana=arcana):
            c.out.line(pad + pin_line(b))


def cmd_flow(c: Command) -> int:
    rid = c.run_id()
    files = c.reader.files_of(rid)
    turns = c.agent_turns(rid)
    arcana = is_arcana(c.first(rid))
    agents: list[str | None] = []
    for tv in turns:
        if tv.agent not in agents:
            agents.append(tv.agent)
    if c.as_json:
        c.out.raw_json({"run_id": rid, "turns": [_flow_turn_json(tv) for tv in turns]})
        return c.report_line_errors(files)
    n_steps = sum(len(tv.steps) for tv in turns)
    n_turns = len({(t.agent, t.turn) for t in turns})
    c.out.line(f"Flow — run {rid} · {_plural(n_turns, 'turn')} · {_plural(n_steps, 'step')}")
    if arcana:
        c.out.line("(arcana-agent 1.2 file: one turn per LLM iteration, turn = iteration + 1)")
    for agent in agents:
        if agent is not None:
            c.out.line()
            c.out.line(f"Agent {agent}")
        for tv in (t for t in turns if t.agent == agent):
            c.out.line()
            status = _turn_status(tv)
            c.out.line(f"  Turn {tv.turn}" + (f" ({status})" if status else ""))
            for sv in tv.steps:
                cd = decision(sv.context_decision)
                c.out.line(
                    f"    step {sv.step}  {step_model(sv) or '?'}  {cd.get('strategy') or '-'} "
                    f"{as_num(cd.get('messages_in'))}→{as_num(cd.get('messages_out'))} messages"
                )
                children: list[tuple[int, str]] = []
                for ev in sv.primitive_calls:
                    prim, text, ok = primitive_line(ev)
                    children.append((_index_of(sv, ev), f"{'✓' if ok else '✗'} {prim} {text}"))
                for ev in sv.tool_calls:
                    name, text, ok = tool_outcome(ev)
                    children.append((_index_of(sv, ev), f"{'✓' if ok else '✗'} tool {name} {text}".rstrip()))
                for ev in sv.errors:
                    children.append((_index_of(sv, ev), f"✗ error {event_detail(ev)}"))
                turn_index = _index_of(sv, sv.turn_event) if sv.turn_event is not None else 0
                for name in unrecorded_calls(sv):
                    children.append((turn_index, f"✗ tool {name}  {UNRECORDED_CALL}"))
                if sv.turn_event is None and (reason := step_failure(sv)) is not None:
                    children.append((10**9, f"✗ {reason}"))
                for _, text in sorted(children, key=lambda t: t[0]):
                    c.out.line(f"      ├─ {text}")
    if turns:
        outcome = run_outcome(c.reader.turns(rid), c.reader.events(rid))
        stop = {"running": "in progress"}.get(outcome.status, outcome.status)
        c.out.line()
        c.out.line(f"  → stop: {stop}" + (f" ({outcome.reason})" if outcome.reason else ""))
    return c.report_line_errors(files)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _index_of(sv: StepView, ev: TraceEvent) -> int:
    return next((ne.index for ne in sv.events if ne.event is ev), 0)


def _turn_status(tv: TurnView) -> str | None:
    """ "completed" / "failed" as `runtime.facts.turn_outcome` says; None while the send goes on."""
    status = turn_outcome(tv).status
    return status if status in ("completed", "failed") else None


def _flow_turn_json(tv: TurnView) -> dict[str, Any]:
    return {
        "agent": tv.agent,
        "turn": tv.turn,
        "status": _turn_status(tv),
        "steps": [
            {
                "step": sv.step,
                "step_id": sv.step_id,
                "model": step_model(sv),
                "primitive_calls": [
                    {"primitive": p, "summary": s, "ok": ok}
                    for p, s, ok in (primitive_line(ev) for ev in sv.primitive_calls)
                ],
                "tool_calls": [
                    {"name": n, "summary": s, "ok": ok}
                    for n, s, ok in (tool_outcome(ev) for ev in sv.tool_calls)
                ],
                "errors": [event_detail(ev) for ev in sv.errors],
                "unrecorded_calls": unrecorded_calls(sv),
            }
            for sv in tv.steps
        ],
    }
