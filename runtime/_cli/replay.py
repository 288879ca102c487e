"""`arcana trace replay` and `explain`: what the model saw at a turn, and what came of it."""

from __future__ import annotations

import json
from typing import Any

from .._render import one_line, table
from .._trace_reader import (
    PinLifetime,
    StepView,
    TurnView,
    active_pins,
)
from ..facts import ARCANA_PIN_RENDERING, step_errors, step_failure, tool_results
from .command import Command, UsageError
from .formatting import (
    ARCANA_SNAPSHOT_HINT,
    PREVIEW,
    SNAPSHOT_HINT,
    UNRECORDED_CALL,
    as_dict,
    as_list,
    as_num,
    changed,
    decision,
    is_arcana,
    message_text,
    pin_blocks,
    pin_line,
    primitive_line,
    report,
    snapshot_of,
    step_model,
    tool_names,
    tool_outcome,
    unrecorded_calls,
)


def _turn_or_fail(c: Command, rid: str, turns: list[TurnView], turn: int | None) -> list[TurnView]:
    numbers = sorted({tv.turn for tv in turns})
    if not numbers:
        raise UsageError(f"run {rid} has no replayable turns")
    if turn is None:
        raise UsageError(f"--turn N is required; turns of run {rid}: {_ranges(numbers)}")
    chosen = [tv for tv in turns if tv.turn == turn]
    if not chosen:
        raise UsageError(f"run {rid} has no turn {turn}; turns: {_ranges(numbers)} (turns are 1-based)")
    return chosen


def _ranges(numbers: list[int]) -> str:
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(parts)


def _iteration_note(arcana: bool, turn: int) -> str:
    return f" (arcana-agent iteration {turn - 1})" if arcana else ""


def _turn_table(c: Command, turns: list[TurnView], pins: list[PinLifetime]) -> None:
    rows = []
    for tv in turns:
        first = tv.steps[0]
        cd = decision(first.context_decision)
        last = decision(tv.steps[-1].context_decision)
        n_active = len(active_pins([p for p in pins if p.agent == tv.agent], tv.turn))
        rows.append(
            [
                tv.turn,
                tv.agent or "-",
                len(tv.steps),
                cd.get("strategy") or "-",
                f"{as_num(cd.get('messages_in'))} → {as_num(last.get('messages_out'))}",
                n_active,
                "yes" if any(sv.prompt_snapshot for sv in tv.steps) else "no",
            ]
        )
    c.out.lines(
        table(
            ["TURN", "AGENT", "STEPS", "STRATEGY", "MESSAGES", "ACTIVE PINS", "SNAPSHOT"],
            rows,
            align="rlrllrl",
        )
    )


def cmd_replay(c: Command) -> int:
    rid = c.run_id()
    files = c.reader.files_of(rid)
    turns = c.agent_turns(rid)
    arcana = is_arcana(c.first(rid))
    pins_all = c.reader.pins(rid, c.args.agent)
    if c.args.turn is None and turns:
        # Listing the turns is what `replay` without `--turn` is for (issue 5), not a usage error.
        if c.as_json:
            c.out.raw_json(
                {
                    "run_id": rid,
                    "turns": [{"turn": tv.turn, "agent": tv.agent, "steps": len(tv.steps)} for tv in turns],
                }
            )
        else:
            c.out.line(f"Replayable turns of run {rid}:")
            _turn_table(c, turns, pins_all)
            c.out.line()
            agent = f" --agent {c.args.agent}" if c.args.agent else ""
            c.out.line(f"Replay one with: arcana trace replay {rid}{agent} --turn N")
        return c.report_line_errors(files)
    chosen = _turn_or_fail(c, rid, turns, c.args.turn)
    turn: int = c.args.turn
    payload: dict[str, Any] = {"run_id": rid, "turn": turn, "agent": c.args.agent, "agents": []}
    for tv in chosen:
        pins = [p for p in pins_all if p.agent == tv.agent]
        steps = tv.steps
        if c.args.step is not None:
            steps = [sv for sv in steps if sv.step == c.args.step]
            if not steps:
                raise UsageError(f"turn {turn} has no step {c.args.step}; steps: 1–{len(tv.steps)}")
        active = active_pins(pins, turn)
        if c.as_json:
            payload["agents"].append(
                {
                    "agent": tv.agent,
                    "steps": [
                        {
                            "step": sv.step,
                            "step_id": sv.step_id,
                            "context_decision": decision(sv.context_decision) or None,
                            "context_report": report(sv.context_decision) or None,
                            "pinned_blocks": pin_blocks(sv, pins, arcana=arcana),
                            "prompt_snapshot": snapshot_of(sv.prompt_snapshot) or None,
                        }
                        for sv in steps
                    ],
                    "active_pins": [p.to_dict() for p in active],
                }
            )
            continue
        _replay_text(c, rid, tv, steps, pins, active, arcana)
    if c.as_json:
        c.out.raw_json(payload)
    return c.report_line_errors(files)


def _replay_text(
    c: Command,
    rid: str,
    tv: TurnView,
    steps: list[StepView],
    pins: list[PinLifetime],
    active: list[PinLifetime],
    arcana: bool,
) -> None:
    head = f"run {rid} | turn {tv.turn}{_iteration_note(arcana, tv.turn)}"
    if tv.agent:
        head += f" | agent={tv.agent}"
    c.out.line(head + f" | {len(tv.steps)} step{'s' if len(tv.steps) != 1 else ''}")
    for sv in steps:
        cd = decision(sv.context_decision)
        rep = report(sv.context_decision)
        util = rep.get("utilization")
        util_text = f"{util:.2%}" if isinstance(util, int | float) and not isinstance(util, bool) else "?"
        c.out.line()
        c.out.line(f"Step {sv.step} | strategy={cd.get('strategy') or '?'} | utilization={util_text}")
        if not c.args.prompt_only:
            c.out.line()
            c.out.line("Context decision")
            if not cd:
                c.out.line("  (no context decision recorded for this step)")
            else:
                event = sv.context_decision  # set: `cd` is not empty
                explanation = cd.get("explanation") or (event.metadata.get("explanation") if event else None)
                c.out.line("  " + str(explanation or ""))
                c.out.line(
                    f"  messages: {as_num(cd.get('messages_in'))} → {as_num(cd.get('messages_out'))} "
                    f"({changed(sv.context_decision)}) · "
                    f"budget {as_num(cd.get('budget_used'))}/{as_num(cd.get('budget_total'))}"
                )
                rows = []
                for d in as_list(cd.get("decisions")):
                    if not isinstance(d, dict) or d.get("reason") == "pinned" or d.get("pinned") is True:
                        continue
                    score = d.get("relevance_score")
                    rows.append(
                        [
                            as_num(d.get("index")),
                            d.get("role") or "?",
                            d.get("outcome") or "?",
                            f"{as_num(d.get('token_count_before')):>5} → {as_num(d.get('token_count_after'))}",
                            d.get("reason") or "",
                            d.get("fidelity") or "-",
                            f"{score:.2f}"
                            if isinstance(score, int | float) and not isinstance(score, bool)
                            else "-",
                        ]
                    )
                c.out.lines(
                    table(
                        ["INDEX", "ROLE", "OUTCOME", "TOKENS", "REASON", "FIDELITY", "SCORE"],
                        rows,
                        align="rlllllr",
                        indent="  ",
                    )
                )
                blocks = pin_blocks(sv, pins, arcana=arcana)
                if blocks:
                    c.out.line("  pinned blocks:")
                    for b in blocks:
                        c.out.line("  " + pin_line(b))
        if not c.args.decision_only:
            c.out.line()
            _snapshot_text(c, sv, arcana)
    if not c.args.prompt_only:
        c.out.line()
        _active_pins_text(c, tv, steps, pins, active, arcana)
    c.out.line()


def _snapshot_text(c: Command, sv: StepView, arcana: bool) -> None:
    ps = snapshot_of(sv.prompt_snapshot)
    if not ps:
        c.out.line(ARCANA_SNAPSHOT_HINT if arcana else SNAPSHOT_HINT)
        return
    messages = [as_dict(m) for m in as_list(ps.get("messages"))]
    c.out.line(
        f"Prompt snapshot (model={ps.get('model') or (sv.prompt_snapshot.model if sv.prompt_snapshot else None) or '?'})"
    )
    c.out.line(f"  messages ({len(messages)}):")
    for i, m in enumerate(messages):
        c.out.line(f"    [{i:>3}] {str(m.get('role') or '?'):<9} {one_line(message_text(m), PREVIEW)}")
    names = tool_names(as_list(ps.get("tools")))
    c.out.line(f"  tools ({len(names)}): {', '.join(names) if names else '-'}")


def _pin_until(p: PinLifetime) -> str:
    """The last turn a pin is in effect and why: its `until_turn`, or the turn that unpinned it (still
    rendered in that turn's earlier steps), whichever comes first; "-" while it lasts to the end."""
    if p.unpinned_turn is not None and (p.until_turn is None or p.unpinned_turn <= p.until_turn):
        return f"{p.unpinned_turn} (unpinned)"
    if p.until_turn is not None:
        return f"{p.until_turn} (until_turn)"
    return "-"


def _active_pins_text(
    c: Command,
    tv: TurnView,
    steps: list[StepView],
    pins: list[PinLifetime],
    active: list[PinLifetime],
    arcana: bool,
) -> None:
    c.out.line(f"Active pins at turn {tv.turn}" + (f" (agent {tv.agent})" if tv.agent else ""))
    if not active:
        c.out.line("  (none)")
    else:
        rows = [
            [
                p.pin_id,
                p.label if p.label is not None else "-",
                as_num(p.tokens, "?"),
                p.created_turn,
                _pin_until(p),
            ]
            for p in active
        ]
        c.out.lines(
            table(
                ["PIN ID", "LABEL", "TOKENS", "PINNED AT TURN", "UNTIL"],
                rows,
                align="llrrl",
                indent="  ",
                max_widths=[None, 40],
            )
        )
    if arcana:
        # Arcana 1.2 renders a new pin from the LLM call after the pin call and keeps an until_turn pin
        # one call longer (its §3.5); say so when this turn's working set disagrees with the rule above.
        blocks = [b for sv in steps for b in pin_blocks(sv, pins, arcana=True)]
        rendered = sorted({str(b["label"] or b["pin_id"] or "an unidentified pin") for b in blocks})
        labels = sorted({str(p.label or p.pin_id) for p in active})
        if rendered != labels:
            c.out.line(
                f"  note: arcana-agent 1.2 rendered {len(blocks)} pinned block(s) in this turn's working set"
                + (f" ({', '.join(rendered)})" if rendered else "")
                + f"; {ARCANA_PIN_RENDERING}"
            )


def _steps_label(sv: StepView, n: int) -> str:
    return f"Step {sv.step} of {n}" + (f" · step_id={sv.step_id}" if sv.step_id else "")


def cmd_explain(c: Command) -> int:
    rid = c.run_id()
    files = c.reader.files_of(rid)
    turns = c.agent_turns(rid)
    arcana = is_arcana(c.first(rid))
    chosen = _turn_or_fail(c, rid, turns, c.args.turn)
    pins_all = c.reader.pins(rid, c.args.agent)
    payload: list[dict[str, Any]] = []
    for tv in chosen:
        pins = [p for p in pins_all if p.agent == tv.agent]
        active = active_pins(pins, tv.turn)
        if c.as_json:
            payload.append(_explain_json(tv, pins, active, arcana))
            continue
        model = next((m for m in (step_model(sv) for sv in tv.steps) if m), None)
        c.out.line(
            f"Turn {tv.turn}{_iteration_note(arcana, tv.turn)} — run {rid} · model {model or '?'}"
            + (f" · agent {tv.agent}" if tv.agent else "")
        )
        c.out.line(
            f"Active pins at turn {tv.turn}: "
            + (", ".join(f"{p.pin_id} label={p.label!r}" for p in active) if active else "none")
        )
        for sv in tv.steps:
            c.out.line()
            c.out.line(f"━━ {_steps_label(sv, len(tv.steps))}")
            _explain_step(c, sv, pins, arcana)
        c.out.line()
    if c.as_json:
        c.out.raw_json({"run_id": rid, "turn": c.args.turn, "agents": payload})
    return c.report_line_errors(files)


def _explain_step(c: Command, sv: StepView, pins: list[PinLifetime], arcana: bool) -> None:
    """`explain` of one step: its inputs, the model's output, the tool and primitive calls, the verdict."""
    _explain_inputs(c, sv, pins, arcana)
    _explain_output(c, sv)
    _explain_calls(c, sv)
    _explain_verdict(c, sv)


def _explain_inputs(c: Command, sv: StepView, pins: list[PinLifetime], arcana: bool) -> None:
    cd = decision(sv.context_decision)
    c.out.line("Inputs")
    if cd:
        c.out.line(
            f"  messages: {as_num(cd.get('messages_in'))} in → {as_num(cd.get('messages_out'))} out, "
            f"{changed(sv.context_decision)} · strategy {cd.get('strategy') or '?'} · "
            f"budget {as_num(cd.get('budget_used'))}/{as_num(cd.get('budget_total'))}"
        )
        if cd.get("explanation"):
            c.out.line(f"  {cd['explanation']}")
    else:
        c.out.line("  (no context decision recorded)")
    for b in pin_blocks(sv, pins, arcana=arcana):
        c.out.line("  " + pin_line(b))
    ps = snapshot_of(sv.prompt_snapshot)
    if ps:
        messages = [as_dict(m) for m in as_list(ps.get("messages"))]
        names = tool_names(as_list(ps.get("tools")))
        c.out.line(f"  prompt: {len(messages)} messages, {len(names)} tools ({', '.join(names) or '-'})")
        for i, m in enumerate(messages[-3:]):
            c.out.line(
                f"    [{i - min(3, len(messages))}] {m.get('role') or '?'}: {one_line(message_text(m), PREVIEW)}"
            )
    else:
        c.out.line("  " + (ARCANA_SNAPSHOT_HINT if arcana else SNAPSHOT_HINT))


def _explain_output(c: Command, sv: StepView) -> None:
    c.out.line("LLM output")
    md = sv.turn_event.metadata if sv.turn_event is not None else {}
    facts = as_dict(md.get("facts"))
    text = facts.get("assistant_text")
    if isinstance(text, str) and text:
        c.out.line(f"  text: {one_line(text, 500)}")
    elif facts.get("assistant_text_chars"):
        c.out.line(f"  text: <{facts['assistant_text_chars']} chars, not recorded (minimized trace)>")
    else:
        c.out.line("  text: <empty>")
    calls = [as_dict(tc) for tc in as_list(facts.get("tool_calls"))]
    c.out.line(f"  tool_calls: {len(calls)}")
    for tc in calls:
        args = tc.get("arguments")
        if args is None and tc.get("arguments_chars") is not None:
            args = f"<{tc['arguments_chars']} chars>"
        c.out.line(f"    → {tc.get('name') or '?'}({one_line(args if args is not None else '', 120)})")
    usage = as_dict(facts.get("usage"))
    if usage:
        c.out.line(
            f"  usage: {as_num(usage.get('prompt_tokens'))} prompt + {as_num(usage.get('completion_tokens'))} completion tokens"
            + (
                f" · {sv.turn_event.llm_latency_ms}ms"
                if sv.turn_event is not None and sv.turn_event.llm_latency_ms
                else ""
            )
        )


def _explain_calls(c: Command, sv: StepView) -> None:
    results = tool_results(sv)
    c.out.line(f"Tool results ({len(results)})")
    for r in results:
        if r["event"] is None:
            c.out.line(f"  ✗ {r['name']}  {UNRECORDED_CALL}")
            continue
        line = f"  {'✓' if r['ok'] else '✗'} {r['name']}"
        if r["duration_ms"] is not None:
            line += f" {r['duration_ms']}ms"
        if r["error"]:
            line += f"  error: {r['error']}"
        result = r["result"]
        if result is not None:
            line += "  → " + one_line(
                result if isinstance(result, str) else json.dumps(result, ensure_ascii=False), 100
            )
        c.out.line(line)

    c.out.line(f"Primitive calls ({len(sv.primitive_calls)})")
    for ev in sv.primitive_calls:
        prim, text3, ok = primitive_line(ev)
        c.out.line(f"  {'✓' if ok else '✗'} {prim:<9} {text3}")
        result = as_dict(ev.metadata.get("result"))
        if prim == "recall" and result.get("found") is True:
            for m in as_list(result.get("messages"))[:5]:
                m = as_dict(m)
                c.out.line(f"      {m.get('role') or '?'}: {one_line(message_text(m), PREVIEW)}")
        if result.get("suggestion"):
            c.out.line(f"      suggestion: {result['suggestion']}")


def _explain_verdict(c: Command, sv: StepView) -> None:
    md = sv.turn_event.metadata if sv.turn_event is not None else {}
    assessment = as_dict(md.get("assessment"))
    c.out.line("Runtime verdict")
    if assessment:
        c.out.line(
            f"  completed: {assessment.get('completed')}   failed: {assessment.get('failed')}   "
            f"confidence: {assessment.get('confidence')}   completion_reason: {assessment.get('completion_reason') or '-'}"
        )
    else:
        c.out.line("  (no turn event recorded for this step)")
    failure = step_failure(sv)
    if failure is not None:
        c.out.line(f"  failed: {failure}")

    # Tool failures are listed under "Tool results"; here the rest (provider failures, no answer).
    errors = [e for e in step_errors(sv) if e.kind in ("error", "no_answer")]
    c.out.line(f"Errors ({len(errors)})")
    for e in errors:
        c.out.line(f"  ✗ {e.message}")


def _explain_json(
    tv: TurnView, pins: list[PinLifetime], active: list[PinLifetime], arcana: bool
) -> dict[str, Any]:
    steps = []
    for sv in tv.steps:
        cd = decision(sv.context_decision)
        md = sv.turn_event.metadata if sv.turn_event is not None else {}
        steps.append(
            {
                "step": sv.step,
                "step_id": sv.step_id,
                "model": step_model(sv),
                "inputs": {
                    "messages_in": cd.get("messages_in"),
                    "messages_out": cd.get("messages_out"),
                    "compressed": cd.get("compressed_count"),
                    "strategy": cd.get("strategy"),
                    "explanation": cd.get("explanation"),
                    "pinned_blocks": pin_blocks(sv, pins, arcana=arcana),
                    "prompt_messages": len(as_list(snapshot_of(sv.prompt_snapshot).get("messages")))
                    if sv.prompt_snapshot
                    else None,
                },
                "output": {"facts": as_dict(md.get("facts")), "assessment": as_dict(md.get("assessment"))},
                "tool_calls": [
                    {
                        "name": tool_outcome(ev)[0],
                        "ok": tool_outcome(ev)[2],
                        "record": ev.tool_call,
                        "result": ev.metadata.get("result"),
                    }
                    for ev in sv.tool_calls
                ],
                "primitive_calls": [
                    {
                        "primitive": primitive_line(ev)[0],
                        "summary": primitive_line(ev)[1],
                        "ok": primitive_line(ev)[2],
                        "args": ev.metadata.get("args"),
                        "result": ev.metadata.get("result"),
                    }
                    for ev in sv.primitive_calls
                ],
                "errors": [ev.metadata for ev in sv.errors],
                "unrecorded_calls": unrecorded_calls(sv),
            }
        )
    return {"agent": tv.agent, "turn": tv.turn, "active_pins": [p.to_dict() for p in active], "steps": steps}
