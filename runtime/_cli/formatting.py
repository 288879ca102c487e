"""Terminal wording shared by the commands: tolerant accessors over event metadata, primitive
calls, tool outcomes and pinned blocks."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from .._trace import TraceEvent
from .._trace_reader import (
    ARCANA_PRODUCER,
    NormalizedEvent,
    PinLifetime,
    StepView,
)

PREVIEW = 110  # columns of a message preview
SNAPSHOT_HINT = (
    "No prompt snapshot recorded. Enable it with RuntimeConfig(trace_include_prompt_snapshots=True)."
)
ARCANA_SNAPSHOT_HINT = (
    "No prompt snapshot recorded (arcana-agent 1.2 writes one with dev_mode=True or "
    "RuntimeConfig(trace_include_prompt_snapshots=True))."
)

# --------------------------------------------------------------------------------------------------
# Small accessors over event metadata (all tolerant of missing or odd values)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _decision(ev: TraceEvent | None) -> dict[str, Any]:
    return _dict(ev.metadata.get("context_decision")) if ev is not None else {}


def _report(ev: TraceEvent | None) -> dict[str, Any]:
    return _dict(ev.metadata.get("context_report")) if ev is not None else {}


def _snapshot(ev: TraceEvent | None) -> dict[str, Any]:
    return _dict(ev.metadata.get("prompt_snapshot")) if ev is not None else {}


def _num(value: Any, default: str = "?") -> str:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int | float):
        return str(value)
    return default


def _ts(ev: TraceEvent) -> str:
    """The event time in UTC to the minute (`2026-04-18T12:34`), whatever offset the producer wrote."""
    return ev.timestamp_dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def _is_arcana(ne: NormalizedEvent | None) -> bool:
    return ne is not None and ne.producer == ARCANA_PRODUCER


def _step_model(sv: StepView) -> str | None:
    for ev in (sv.turn_event, sv.prompt_snapshot, *sv.llm_calls):
        if ev is not None and ev.model:
            return ev.model
    model = _snapshot(sv.prompt_snapshot).get("model")
    return model if isinstance(model, str) else None


def _message_text(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False)
    calls = [c for c in _list(msg.get("tool_calls")) if isinstance(c, dict)]
    if calls:
        names = []
        for c in calls:
            fn = _dict(c.get("function"))
            names.append(str(c.get("name") or fn.get("name") or "?"))
        text = (text + " " if text else "") + "→ " + ", ".join(names)
    return text


def _tool_names(tools: list[Any]) -> list[str]:
    names = []
    for t in tools:
        t = _dict(t)
        fn = _dict(t.get("function"))
        names.append(str(fn.get("name") or t.get("name") or "?"))
    return names


# --------------------------------------------------------------------------------------------------
# Primitive calls


def primitive_line(ev: TraceEvent) -> tuple[str, str, bool]:
    """(primitive, one-line outcome, succeeded) for a `cognitive_primitive` event, as the seed writes it:
    `recall turn=3 → 2 messages`, `pin pin_id=p_… label='key facts'`, `already pinned`,
    `REJECTED pin_budget_exceeded (3200+800 > 4000)`, `unpin pin_id=p_… ok` / `unknown id`."""
    md = ev.metadata
    prim = str(md.get("primitive") or "?")
    args = _dict(md.get("args"))
    result = _dict(md.get("result"))
    if result.get("error") == "invalid_arguments":
        return prim, f"REJECTED invalid_arguments: {result.get('detail') or ''}".rstrip(), False
    if prim == "recall":
        turn = result.get("turn", args.get("turn"))
        include = args.get("include")
        head = f"turn={turn}" + (f" include={include}" if include and include != "all" else "")
        if result.get("found") is True:
            n = len(_list(result.get("messages")))
            return prim, f"{head} → {n} message{'s' if n != 1 else ''}", True
        note = result.get("note") or "not found"
        return prim, f"{head} → {note}", False
    if prim == "pin":
        pin_id = result.get("pin_id")
        label = result.get("label")
        if result.get("pinned") is True:
            text = f"pin_id={pin_id} label={label!r}"
            if result.get("until_turn") is not None:
                text += f" until_turn={result.get('until_turn')}"
            if result.get("already_pinned") is True:
                text += " already pinned"
            return prim, text, True
        reason = result.get("reason") or "not pinned"
        text = f"REJECTED {reason}"
        if reason == "pin_budget_exceeded":
            cur, req, cap = (
                result.get("current_pin_tokens"),
                result.get("requested_tokens"),
                result.get("cap"),
            )
            text += f" ({_num(cur)}+{_num(req)} > {_num(cap)})"
        return prim, text, False
    if prim == "unpin":
        pin_id = result.get("pin_id", args.get("pin_id"))
        if result.get("unpinned") is True:
            return prim, f"pin_id={pin_id} ok", True
        note = result.get("note")
        text = f"pin_id={pin_id} unknown id"
        if isinstance(note, str) and not note.startswith("unknown pin_id"):
            text += f" ({note})"
        return prim, text, False
    return prim, json.dumps(result, ensure_ascii=False)[:200], "error" not in result


def _tool_outcome(ev: TraceEvent) -> tuple[str, str, bool]:
    rec = _dict(ev.tool_call)
    name = str(rec.get("name") or "?")
    dur = rec.get("duration_ms")
    text = f"{_num(dur)}ms" if dur is not None else ""
    err = rec.get("error")
    if err:
        return name, (text + "  error: " + str(err)).strip(), False
    return name, text, True


UNRECORDED_CALL = (
    "no result in the trace (arcana-agent 1.2 writes no event for a tool that is not registered)"
)


def unrecorded_calls(sv: StepView) -> list[str]:
    """Names of the tool calls the step's model asked for that left no event (no `tool_call`,
    `cognitive_primitive` or `error`). arcana-agent 1.2 records nothing for an unknown tool (its §7
    items 13–14), so without this `flow` and `explain` would hide the call. Our events name the call
    they answer (`tool_call_id`); Arcana's do not, so there the calls are matched by name."""
    facts = _dict(sv.turn_event.metadata.get("facts")) if sv.turn_event is not None else {}
    requested = [_dict(tc) for tc in _list(facts.get("tool_calls"))]
    if not requested:
        return []
    answers = [*sv.tool_calls, *sv.primitive_calls, *sv.errors]
    if sv.turn_event is not None and sv.turn_event.is_ours:
        ids = {ev.metadata.get("tool_call_id") for ev in answers}
        return [str(tc.get("name") or "?") for tc in requested if tc.get("id") not in ids]
    recorded = [str(_dict(ev.tool_call).get("name") or "") for ev in sv.tool_calls]
    recorded += [str(ev.metadata.get("primitive") or "") for ev in sv.primitive_calls]
    missing = []
    for tc in requested:
        name = str(tc.get("name") or "?")
        if name in recorded:
            recorded.remove(name)
        else:
            missing.append(name)
    return missing


def _changed(ev: TraceEvent | None) -> str:
    """What a context decision did to the history, from its per-message outcomes: "8 compressed",
    "2 dropped", "19 summarized", "3 compressed, 1 dropped"; "0 compressed" when all were kept.
    `compressed_count` alone lumps the three together (Arcana counts dropped messages in it), so it
    is only the fallback when the decision lists no messages."""
    if ev is None:
        return "? compressed"
    cd = _decision(ev)
    counts = {"compressed": 0, "summarized": 0, "dropped": 0}
    rows = [d for d in _list(cd.get("decisions")) if isinstance(d, dict)]
    for d in rows:
        if d.get("outcome") in counts and not (d.get("reason") == "pinned" or d.get("pinned") is True):
            counts[str(d["outcome"])] += 1
    parts = [f"{n} {outcome}" for outcome, n in counts.items() if n]
    if parts:
        return ", ".join(parts)
    if rows:
        return "0 compressed"
    return f"{_num(cd.get('compressed_count', ev.metadata.get('compressed_count')), '0')} compressed"


def _event_detail(ev: TraceEvent) -> str:
    md = ev.metadata
    kind = ev.event_type
    if kind == "cognitive_primitive":
        prim, text, _ = primitive_line(ev)
        return f"{prim:<9} {text}"
    if kind == "context_decision":
        cd = _decision(ev)
        return (
            f"{cd.get('strategy', '?')}  {_num(cd.get('messages_in', md.get('messages_in')))} → "
            f"{_num(cd.get('messages_out', md.get('messages_out')))} messages ({_changed(ev)})"
        )
    if kind == "prompt_snapshot":
        ps = _snapshot(ev)
        return f"{len(_list(ps.get('messages')))} messages, {len(_list(ps.get('tools')))} tools  model={ps.get('model') or ev.model or '?'}"
    if kind == "turn":
        facts = _dict(md.get("facts"))
        calls = [_dict(c).get("name", "?") for c in _list(facts.get("tool_calls"))]
        finish = facts.get("finish_reason") or "?"
        if calls:
            return f"{finish}  → {', '.join(str(c) for c in calls)}"
        chars = facts.get("assistant_text_chars")
        if chars is None and isinstance(facts.get("assistant_text"), str):
            chars = len(facts["assistant_text"])
        return f"{finish}  {_num(chars)} chars"
    if kind == "llm_call":
        usage = _dict(md.get("usage"))
        parts = [str(md.get("purpose") or "llm call")]
        if md.get("provider"):
            parts.append(f"provider={md['provider']}")
        parts.append(f"model={ev.model or '?'}")
        if usage:
            parts.append(f"tokens {_num(usage.get('prompt_tokens'))}+{_num(usage.get('completion_tokens'))}")
        lat = md.get("latency_ms", ev.llm_latency_ms)
        if lat is not None:
            parts.append(f"{_num(lat)}ms")
        return "  ".join(parts)
    if kind == "tool_call":
        name, text, ok = _tool_outcome(ev)
        return f"{name} {'✓' if ok else '✗'} {text}".rstrip()
    if kind == "error":
        return f"{md.get('error') or md.get('error_category') or 'error'}: {md.get('message') or ''}".rstrip(
            ": "
        )
    if kind == "history_seeded":
        return f"seeded {_num(md.get('seed_count'))} messages"
    return ""


def _where(ne: NormalizedEvent, with_agent: bool) -> str:
    bits = []
    if ne.turn is not None:
        # "turn 1.2" left readers guessing; steps after the first are spelled out.
        bits.append(f"turn {ne.turn}" + (f" step {ne.step}" if ne.step and ne.step != 1 else ""))
    if with_agent and ne.agent:
        bits.append(f"agent {ne.agent}")
    return f"  ({', '.join(bits)})" if bits else ""


# --------------------------------------------------------------------------------------------------
# Pinned blocks of a step


def _pinned_rows(sv: StepView) -> list[dict[str, Any]]:
    return [
        d
        for d in _list(_decision(sv.context_decision).get("decisions"))
        if isinstance(d, dict) and (d.get("reason") == "pinned" or d.get("pinned") is True)
    ]


def pin_blocks(sv: StepView, pins: list[PinLifetime], *, arcana: bool) -> list[dict[str, Any]]:
    """The pinned blocks a step's working set rendered: index, tokens, fidelity, pin and whether the
    index is the real position. Ours carry `pin_id` and the real index. For Arcana 1.2 (synthetic index,
    no pin id) the prompt snapshot, when recorded, gives the real position (the k-th `[pinned: …]`
    system message) and the pin (by content)."""
    rows = _pinned_rows(sv)
    by_id = {p.pin_id: p for p in pins}
    blocks: list[dict[str, Any]] = []
    positions: list[tuple[int, str]] = []
    if arcana:
        for i, m in enumerate(_list(_snapshot(sv.prompt_snapshot).get("messages"))):
            m = _dict(m)
            content = m.get("content")
            if m.get("role") == "system" and isinstance(content, str) and content.startswith("[pinned"):
                positions.append((i, content.split("\n", 1)[1] if "\n" in content else ""))
    rendered_guess = [
        p
        for p in pins
        if p.created_turn < sv.turn
        and (p.unpinned_turn is None or p.unpinned_turn >= sv.turn)
        and (p.until_turn is None or p.until_turn >= sv.turn - 1)
    ]
    for k, d in enumerate(rows):
        tokens = d.get("token_count_after", d.get("token_count_before"))
        block = {
            "index": d.get("index"),
            "real_index": not arcana,
            "role": d.get("role") or "system",
            "tokens": tokens,
            "fidelity": d.get("fidelity") or "L0",
            "outcome": d.get("outcome") or "kept",
            "pin_id": d.get("pin_id") if isinstance(d.get("pin_id"), str) else None,
            "label": None,
        }
        pin = by_id.get(block["pin_id"]) if block["pin_id"] else None
        if arcana:
            if len(positions) == len(rows):
                block["index"], content = positions[k]
                block["real_index"] = True
                pin = next((p for p in pins if p.content == content), None)
            elif len(rendered_guess) == len(rows):
                pin = rendered_guess[k]
        if pin is not None:
            block["pin_id"], block["label"] = pin.pin_id, pin.label
        blocks.append(block)
    return blocks


def _pin_line(b: dict[str, Any]) -> str:
    text = f"[PIN] [{_num(b['index'])}] {b['role']} {_num(b['tokens'])} tokens ({b['outcome']} at {b['fidelity']})"
    if b["pin_id"]:
        text += f"  {b['pin_id']}"
        if b["label"] is not None:
            text += f" label={b['label']!r}"
    if not b["real_index"]:
        text += "  (synthetic index written by arcana-agent 1.2; no prompt snapshot to locate the block)"
    return text


def _decision_row_compact(d: dict[str, Any]) -> str:
    line = (
        f"[{_num(d.get('index')):>3}] {str(d.get('role') or '?'):<9} {str(d.get('outcome') or '?'):<10} "
        f"{_num(d.get('token_count_before')):>5}→{_num(d.get('token_count_after')):<5} {d.get('reason') or ''}"
    )
    if d.get("fidelity") and d.get("outcome") == "compressed":
        line += f" [{d['fidelity']}]"
    score = d.get("relevance_score")
    if isinstance(score, int | float) and not isinstance(score, bool):
        line += f" score={score:.2f}"
    return line
