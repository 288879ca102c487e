"""The `arcana` command line: `arcana trace list|show|replay|explain|flow|upload`.

Reads traces written by Arcana Console's runtime and by arcana-agent 1.2 alike (through
`runtime._trace_reader`) and prints them through `runtime._render`, which never lets trace text act
on the terminal. Turns are 1-based everywhere; an Arcana 1.2 file's LLM iteration i is turn i + 1.

Exit status: 0 when all went well; 1 when the data was at fault (no such run, unreadable file,
malformed lines — reported with their line numbers and skipped —, an upload rejected or failed);
2 for a usage error (bad option, `replay` without `--turn`, a turn the run does not have).

    $ arcana trace list --dir ./traces
    $ arcana trace show 17a81a75 --cognitive
    $ arcana trace replay 17a81a75 --turn 5
    $ arcana trace upload ./traces --server http://127.0.0.1:8000 --api-key arc_...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import Any

from ._render import Output, one_line, safe_text, table
from ._trace import TraceEvent
from ._trace_reader import (
    ARCANA_PRODUCER,
    LineError,
    NormalizedEvent,
    PinLifetime,
    RunNotFound,
    StepView,
    TraceReader,
    TurnView,
    active_pins,
)

__all__ = ["main"]

PREVIEW = 110  # columns of a message preview
SNAPSHOT_HINT = (
    "No prompt snapshot recorded. Enable it with RuntimeConfig(trace_include_prompt_snapshots=True)."
)
ARCANA_SNAPSHOT_HINT = (
    "No prompt snapshot recorded (arcana-agent 1.2 writes one with dev_mode=True or "
    "RuntimeConfig(trace_include_prompt_snapshots=True))."
)


class UsageError(Exception):
    """A command-line mistake: exit status 2."""


class DataError(Exception):
    """The trace or the server is at fault: exit status 1."""


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


# --------------------------------------------------------------------------------------------------
# Commands


class Command:
    """State shared by one invocation: the reader, the two outputs and the options."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Output(sys.stdout)
        self.err = Output(sys.stderr)
        self.as_json: bool = bool(getattr(args, "json", False))
        directory = getattr(args, "dir", None) or os.environ.get("ARCANA_TRACE_DIR") or "./traces"
        self.dir = Path(directory)
        self._reader: TraceReader | None = None

    @property
    def reader(self) -> TraceReader:
        if self._reader is None:
            if not self.dir.exists():
                raise DataError(f"trace directory {self.dir} does not exist (use --dir or ARCANA_TRACE_DIR)")
            self._reader = TraceReader(self.dir)
        return self._reader

    def run_id(self) -> str:
        try:
            return self.reader.resolve(self.args.run_id)
        except RunNotFound as exc:
            unreadable = [e for e in self.reader.line_errors if e.line == 0]
            extra = "".join(f"\n  could not read {e.path}: {e.error}" for e in unreadable)
            raise DataError(f"{exc} (looked in {self.dir}){extra}") from None

    def report_line_errors(self, paths: Sequence[str] | None = None) -> int:
        errors: list[LineError] = self.reader.line_errors if self._reader is not None else []
        if paths is not None:
            wanted = set(paths)
            errors = [e for e in errors if e.path in wanted]
        if not errors:
            return 0
        for e in errors:
            self.err.line(f"warning: skipped {e}" if e.line else f"error: {e}")
        self.err.line(f"{len(errors)} malformed or unreadable line(s) skipped")
        return 1

    def agent_turns(self, rid: str) -> list[TurnView]:
        agent = self.args.agent
        if agent and agent not in self.reader.agents(rid):
            known = ", ".join(self.reader.agents(rid)) or "none (a plain chat)"
            raise UsageError(f"run {rid} has no agent {agent!r}; agents: {known}")
        return self.reader.turns(rid, agent)

    def first(self, rid: str) -> NormalizedEvent | None:
        norm = self.reader.normalized(rid)
        return norm[0] if norm else None


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
                    "EVENTS",
                    "PRIMITIVES",
                    "SIZE",
                    "STARTED (UTC)",
                    "PRODUCER",
                ],
                rows,
                align="llrrrrrll",
                max_widths=[None, 24],
            )
        )
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
    arcana = _is_arcana(norm[0] if norm else None)
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
        or ("error" in wanted and ne.event_type == "tool_call" and _dict(ne.event.tool_call).get("error"))
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
                "events": [_show_json(ne, steps, pins, arcana) for ne in shown],
            }
        )
        return c.report_line_errors(files)
    with_agent = bool(c.reader.agents(rid))
    c.out.line(f"Trace: {rid}" + (f" (agent={c.args.agent})" if c.args.agent else ""))
    c.out.line(f"Events: {len(shown)}" + (f" (filtered from {total})" if len(shown) != total else ""))
    if arcana:
        c.out.line("Producer: arcana-agent 1.2 (turn = LLM iteration + 1)")
    c.out.line()
    for ne in shown:
        ev = ne.event
        c.out.line(
            f"{ne.index:>3}. {ev.event_type:<21} {_ts(ev)}  {_event_detail(ev)}{_where(ne, with_agent)}"
        )
        if ev.event_type == "context_decision" and c.args.context:
            sv = steps.get((ne.agent, ne.turn or 0, ne.step or 0))
            _context_lines(c, ev, sv, pins, arcana)
    return c.report_line_errors(files)


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
    cd = _decision(ev)
    pad = "       "
    explanation = cd.get("explanation") or ev.metadata.get("explanation")
    if explanation:
        c.out.line(pad + str(explanation))
    c.out.line(
        f"{pad}messages: {_num(cd.get('messages_in'))} → {_num(cd.get('messages_out'))} "
        f"({_changed(ev)}) · budget "
        f"{_num(cd.get('budget_used'))}/{_num(cd.get('budget_total'))}"
    )
    for d in _list(cd.get("decisions")):
        if isinstance(d, dict) and not (d.get("reason") == "pinned" or d.get("pinned") is True):
            c.out.line(pad + _decision_row_compact(d))
    if sv is not None:
        for b in pin_blocks(sv, [p for p in pins if p.agent == sv.agent], arcana=arcana):
            c.out.line(pad + _pin_line(b))


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
    for n in numbers[1:] + [None]:  # type: ignore[list-item]
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
        cd = _decision(first.context_decision)
        last = _decision(tv.steps[-1].context_decision)
        n_active = len(active_pins([p for p in pins if p.agent == tv.agent], tv.turn))
        rows.append(
            [
                tv.turn,
                tv.agent or "-",
                len(tv.steps),
                cd.get("strategy") or "-",
                f"{_num(cd.get('messages_in'))} → {_num(last.get('messages_out'))}",
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
    arcana = _is_arcana(c.first(rid))
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
                            "context_decision": _decision(sv.context_decision) or None,
                            "context_report": _report(sv.context_decision) or None,
                            "pinned_blocks": pin_blocks(sv, pins, arcana=arcana),
                            "prompt_snapshot": _snapshot(sv.prompt_snapshot) or None,
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
        cd = _decision(sv.context_decision)
        rep = _report(sv.context_decision)
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
                c.out.line(
                    "  " + str(cd.get("explanation") or sv.context_decision.metadata.get("explanation") or "")
                )  # type: ignore[union-attr]
                c.out.line(
                    f"  messages: {_num(cd.get('messages_in'))} → {_num(cd.get('messages_out'))} "
                    f"({_changed(sv.context_decision)}) · "
                    f"budget {_num(cd.get('budget_used'))}/{_num(cd.get('budget_total'))}"
                )
                rows = []
                for d in _list(cd.get("decisions")):
                    if not isinstance(d, dict) or d.get("reason") == "pinned" or d.get("pinned") is True:
                        continue
                    score = d.get("relevance_score")
                    rows.append(
                        [
                            _num(d.get("index")),
                            d.get("role") or "?",
                            d.get("outcome") or "?",
                            f"{_num(d.get('token_count_before')):>5} → {_num(d.get('token_count_after'))}",
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
                        c.out.line("  " + _pin_line(b))
        if not c.args.decision_only:
            c.out.line()
            _snapshot_text(c, sv, arcana)
    if not c.args.prompt_only:
        c.out.line()
        _active_pins_text(c, tv, steps, pins, active, arcana)
    c.out.line()


def _snapshot_text(c: Command, sv: StepView, arcana: bool) -> None:
    ps = _snapshot(sv.prompt_snapshot)
    if not ps:
        c.out.line(ARCANA_SNAPSHOT_HINT if arcana else SNAPSHOT_HINT)
        return
    messages = [_dict(m) for m in _list(ps.get("messages"))]
    c.out.line(
        f"Prompt snapshot (model={ps.get('model') or (sv.prompt_snapshot.model if sv.prompt_snapshot else None) or '?'})"
    )
    c.out.line(f"  messages ({len(messages)}):")
    for i, m in enumerate(messages):
        c.out.line(f"    [{i:>3}] {str(m.get('role') or '?'):<9} {one_line(_message_text(m), PREVIEW)}")
    names = _tool_names(_list(ps.get("tools")))
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
                _num(p.tokens, "?"),
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
                + "; it renders a pin from the LLM call after the pin call and keeps until_turn pins one call longer"
            )


def _steps_label(sv: StepView, n: int) -> str:
    return f"Step {sv.step} of {n}" + (f" · step_id={sv.step_id}" if sv.step_id else "")


def cmd_explain(c: Command) -> int:
    rid = c.run_id()
    files = c.reader.files_of(rid)
    turns = c.agent_turns(rid)
    arcana = _is_arcana(c.first(rid))
    chosen = _turn_or_fail(c, rid, turns, c.args.turn)
    pins_all = c.reader.pins(rid, c.args.agent)
    payload: list[dict[str, Any]] = []
    for tv in chosen:
        pins = [p for p in pins_all if p.agent == tv.agent]
        active = active_pins(pins, tv.turn)
        if c.as_json:
            payload.append(_explain_json(tv, pins, active, arcana))
            continue
        model = next((m for m in (_step_model(sv) for sv in tv.steps) if m), None)
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
    cd = _decision(sv.context_decision)
    c.out.line("Inputs")
    if cd:
        c.out.line(
            f"  messages: {_num(cd.get('messages_in'))} in → {_num(cd.get('messages_out'))} out, "
            f"{_changed(sv.context_decision)} · strategy {cd.get('strategy') or '?'} · "
            f"budget {_num(cd.get('budget_used'))}/{_num(cd.get('budget_total'))}"
        )
        if cd.get("explanation"):
            c.out.line(f"  {cd['explanation']}")
    else:
        c.out.line("  (no context decision recorded)")
    for b in pin_blocks(sv, pins, arcana=arcana):
        c.out.line("  " + _pin_line(b))
    ps = _snapshot(sv.prompt_snapshot)
    if ps:
        messages = [_dict(m) for m in _list(ps.get("messages"))]
        names = _tool_names(_list(ps.get("tools")))
        c.out.line(f"  prompt: {len(messages)} messages, {len(names)} tools ({', '.join(names) or '-'})")
        for i, m in enumerate(messages[-3:]):
            c.out.line(
                f"    [{i - min(3, len(messages))}] {m.get('role') or '?'}: {one_line(_message_text(m), PREVIEW)}"
            )
    else:
        c.out.line("  " + (ARCANA_SNAPSHOT_HINT if arcana else SNAPSHOT_HINT))

    c.out.line("LLM output")
    md = sv.turn_event.metadata if sv.turn_event is not None else {}
    facts = _dict(md.get("facts"))
    text = facts.get("assistant_text")
    if isinstance(text, str) and text:
        c.out.line(f"  text: {one_line(text, 500)}")
    elif facts.get("assistant_text_chars"):
        c.out.line(f"  text: <{facts['assistant_text_chars']} chars, not recorded (minimized trace)>")
    else:
        c.out.line("  text: <empty>")
    calls = [_dict(tc) for tc in _list(facts.get("tool_calls"))]
    c.out.line(f"  tool_calls: {len(calls)}")
    for tc in calls:
        args = tc.get("arguments")
        if args is None and tc.get("arguments_chars") is not None:
            args = f"<{tc['arguments_chars']} chars>"
        c.out.line(f"    → {tc.get('name') or '?'}({one_line(args if args is not None else '', 120)})")
    usage = _dict(facts.get("usage"))
    if usage:
        c.out.line(
            f"  usage: {_num(usage.get('prompt_tokens'))} prompt + {_num(usage.get('completion_tokens'))} completion tokens"
            + (
                f" · {sv.turn_event.llm_latency_ms}ms"
                if sv.turn_event is not None and sv.turn_event.llm_latency_ms
                else ""
            )
        )

    unrecorded = unrecorded_calls(sv)
    c.out.line(f"Tool results ({len(sv.tool_calls) + len(unrecorded)})")
    for name in unrecorded:
        c.out.line(f"  ✗ {name}  {UNRECORDED_CALL}")
    for ev in sv.tool_calls:
        name, text2, ok = _tool_outcome(ev)
        result = ev.metadata.get("result")
        line = f"  {'✓' if ok else '✗'} {name} {text2}".rstrip()
        if result is not None:
            line += "  → " + one_line(
                result if isinstance(result, str) else json.dumps(result, ensure_ascii=False), 100
            )
        c.out.line(line)

    c.out.line(f"Primitive calls ({len(sv.primitive_calls)})")
    for ev in sv.primitive_calls:
        prim, text3, ok = primitive_line(ev)
        c.out.line(f"  {'✓' if ok else '✗'} {prim:<9} {text3}")
        result = _dict(ev.metadata.get("result"))
        if prim == "recall" and result.get("found") is True:
            for m in _list(result.get("messages"))[:5]:
                m = _dict(m)
                c.out.line(f"      {m.get('role') or '?'}: {one_line(_message_text(m), PREVIEW)}")
        if result.get("suggestion"):
            c.out.line(f"      suggestion: {result['suggestion']}")

    assessment = _dict(md.get("assessment"))
    c.out.line("Runtime verdict")
    if assessment:
        c.out.line(
            f"  completed: {assessment.get('completed')}   failed: {assessment.get('failed')}   "
            f"confidence: {assessment.get('confidence')}   completion_reason: {assessment.get('completion_reason') or '-'}"
        )
    else:
        c.out.line("  (no turn event recorded for this step)")

    c.out.line(f"Errors ({len(sv.errors)})")
    for ev in sv.errors:
        c.out.line(f"  ✗ {_event_detail(ev)}")


def _explain_json(
    tv: TurnView, pins: list[PinLifetime], active: list[PinLifetime], arcana: bool
) -> dict[str, Any]:
    steps = []
    for sv in tv.steps:
        cd = _decision(sv.context_decision)
        md = sv.turn_event.metadata if sv.turn_event is not None else {}
        steps.append(
            {
                "step": sv.step,
                "step_id": sv.step_id,
                "model": _step_model(sv),
                "inputs": {
                    "messages_in": cd.get("messages_in"),
                    "messages_out": cd.get("messages_out"),
                    "compressed": cd.get("compressed_count"),
                    "strategy": cd.get("strategy"),
                    "explanation": cd.get("explanation"),
                    "pinned_blocks": pin_blocks(sv, pins, arcana=arcana),
                    "prompt_messages": len(_list(_snapshot(sv.prompt_snapshot).get("messages")))
                    if sv.prompt_snapshot
                    else None,
                },
                "output": {"facts": _dict(md.get("facts")), "assessment": _dict(md.get("assessment"))},
                "tool_calls": [
                    {
                        "name": _tool_outcome(ev)[0],
                        "ok": _tool_outcome(ev)[2],
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


def cmd_flow(c: Command) -> int:
    rid = c.run_id()
    files = c.reader.files_of(rid)
    turns = c.agent_turns(rid)
    arcana = _is_arcana(c.first(rid))
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
    last_status = None
    for agent in agents:
        if agent is not None:
            c.out.line()
            c.out.line(f"Agent {agent}")
        for tv in (t for t in turns if t.agent == agent):
            c.out.line()
            status = _turn_status(tv)
            last_status = status
            c.out.line(f"  Turn {tv.turn}" + (f" ({status})" if status else ""))
            for sv in tv.steps:
                cd = _decision(sv.context_decision)
                c.out.line(
                    f"    step {sv.step}  {_step_model(sv) or '?'}  {cd.get('strategy') or '-'} "
                    f"{_num(cd.get('messages_in'))}→{_num(cd.get('messages_out'))} messages"
                )
                children: list[tuple[int, str]] = []
                for ev in sv.primitive_calls:
                    prim, text, ok = primitive_line(ev)
                    children.append((_index_of(sv, ev), f"{'✓' if ok else '✗'} {prim} {text}"))
                for ev in sv.tool_calls:
                    name, text, ok = _tool_outcome(ev)
                    children.append((_index_of(sv, ev), f"{'✓' if ok else '✗'} tool {name} {text}".rstrip()))
                for ev in sv.errors:
                    children.append((_index_of(sv, ev), f"✗ error {_event_detail(ev)}"))
                turn_index = _index_of(sv, sv.turn_event) if sv.turn_event is not None else 0
                for name in unrecorded_calls(sv):
                    children.append((turn_index, f"✗ tool {name}  {UNRECORDED_CALL}"))
                for _, text in sorted(children, key=lambda t: t[0]):
                    c.out.line(f"      ├─ {text}")
    if turns:
        c.out.line()
        c.out.line(f"  → stop: {last_status or 'in progress'}")
    return c.report_line_errors(files)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _index_of(sv: StepView, ev: TraceEvent) -> int:
    return next((ne.index for ne in sv.events if ne.event is ev), 0)


def _turn_status(tv: TurnView) -> str | None:
    last = tv.steps[-1].turn_event
    a = _dict(last.metadata.get("assessment")) if last is not None else {}
    if a.get("failed") is True:
        return "failed"
    if a.get("completed") is True:
        return "completed"
    return None


def _flow_turn_json(tv: TurnView) -> dict[str, Any]:
    return {
        "agent": tv.agent,
        "turn": tv.turn,
        "status": _turn_status(tv),
        "steps": [
            {
                "step": sv.step,
                "step_id": sv.step_id,
                "model": _step_model(sv),
                "primitive_calls": [
                    {"primitive": p, "summary": s, "ok": ok}
                    for p, s, ok in (primitive_line(ev) for ev in sv.primitive_calls)
                ],
                "tool_calls": [
                    {"name": n, "summary": s, "ok": ok}
                    for n, s, ok in (_tool_outcome(ev) for ev in sv.tool_calls)
                ],
                "errors": [_event_detail(ev) for ev in sv.errors],
                "unrecorded_calls": unrecorded_calls(sv),
            }
            for sv in tv.steps
        ],
    }


# --------------------------------------------------------------------------------------------------
# upload


def _upload_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                q
                for q in p.rglob("*")
                if q.is_file() and (q.name.endswith(".jsonl") or q.name.endswith(".jsonl.gz"))
            )
            if not found:
                raise DataError(f"{p}: no .jsonl or .jsonl.gz files in this directory")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise DataError(f"{p}: no such file or directory")
    return files


def _bar(done: int, total: int | None, width: int = 30) -> str:
    if not total:
        return "[" + "?" * 0 + " " * width + "]"
    frac = min(1.0, done / total)
    filled = int(round(frac * width))
    return "[" + "#" * filled + "." * (width - filled) + f"] {frac:4.0%} {done}/{total} lines"


def cmd_upload(c: Command) -> int:
    import httpx  # only this command needs it

    server = c.args.server or os.environ.get("ARCANA_SERVER")
    key = c.args.api_key or os.environ.get("ARCANA_API_KEY")
    if not server:
        raise UsageError("--server URL (or ARCANA_SERVER) is required")
    if not key:
        raise UsageError("--api-key KEY (or ARCANA_API_KEY) is required")
    files = _upload_files(c.args.paths)
    base = server.rstrip("/")
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    results: list[dict[str, Any]] = []
    failed = False
    with httpx.Client(timeout=c.args.timeout_http, headers=headers) as client:
        for path in files:
            res = _upload_one(c, client, base, path)
            results.append(res)
            if res["status"] != "done" or res.get("rejected") or res.get("line_errors"):
                failed = True
    if c.as_json:
        c.out.raw_json(results)
    else:
        total = {k: sum(int(r.get(k) or 0) for r in results) for k in ("accepted", "duplicates", "rejected")}
        c.out.line(
            f"{len(results)} file(s): {total['accepted']} accepted, {total['duplicates']} duplicates, "
            f"{total['rejected']} rejected" + (" — some lines or files failed" if failed else "")
        )
    return 1 if failed else 0


def _upload_one(c: Command, client: Any, base: str, path: Path) -> dict[str, Any]:
    import httpx

    result: dict[str, Any] = {"file": str(path), "status": "failed", "upload_id": None}
    try:
        with path.open("rb") as fh:
            resp = client.post(
                f"{base}/api/v1/uploads", files={"file": (path.name, fh, "application/octet-stream")}
            )
    except (OSError, httpx.HTTPError) as exc:
        result["error"] = f"could not send: {exc}"
        _print_upload(c, result)
        return result
    if resp.status_code >= 400:
        result["error"] = f"server answered {resp.status_code}: {_error_text(resp)}"
        _print_upload(c, result)
        return result
    body = _json_body(resp)
    upload_id = body.get("id", body.get("upload_id"))
    result["upload_id"] = upload_id
    if upload_id is None:
        result["error"] = "server answered without an upload id"
        _print_upload(c, result)
        return result
    url = f"{base}/api/v1/uploads/{upload_id}"
    deadline = time.monotonic() + c.args.timeout
    delay = 0.1
    last_done = -1
    tty = sys.stderr.isatty()
    while True:
        status = body.get("status")
        done, total = int(body.get("lines_done") or 0), body.get("lines_total")
        if not c.as_json and done != last_done:
            bar = f"{path.name} {_bar(done, total if isinstance(total, int) else None)} {status or ''}"
            if tty:
                sys.stderr.write("\r" + safe_text(bar))
                sys.stderr.flush()
            else:
                c.err.line(bar)
            last_done = done
        if status in ("done", "failed"):
            break
        if time.monotonic() > deadline:
            body = {
                **body,
                "status": "failed",
                "error": f"timed out after {c.args.timeout:g}s waiting for the server",
            }
            break
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)
        try:
            resp = client.get(url)
        except httpx.HTTPError as exc:
            body = {**body, "status": "failed", "error": f"could not poll {url}: {exc}"}
            break
        if resp.status_code >= 400:
            body = {
                **body,
                "status": "failed",
                "error": f"server answered {resp.status_code}: {_error_text(resp)}",
            }
            break
        body = _json_body(resp)
    if tty and not c.as_json:
        sys.stderr.write("\n")
    for k in ("status", "lines_total", "lines_done", "accepted", "duplicates", "rejected", "runs", "error"):
        if k in body:
            result[k] = body[k]
    result["line_errors"] = [
        {"line": _dict(e).get("line"), "error": _dict(e).get("error", _dict(e).get("message"))}
        for e in _list(body.get("line_errors"))
    ]
    _print_upload(c, result)
    return result


def _print_upload(c: Command, r: dict[str, Any]) -> None:
    if c.as_json:
        return
    if r.get("status") == "done":
        c.out.line(
            f"{r['file']}: done — {r.get('accepted', 0)} accepted, {r.get('duplicates', 0)} duplicates, "
            f"{r.get('rejected', 0)} rejected ({_num(r.get('lines_total'))} lines)"
        )
    else:
        c.out.line(f"{r['file']}: FAILED — {r.get('error') or r.get('status')}")
    for e in r.get("line_errors") or []:
        c.out.line(f"  line {_num(e.get('line'))}: {e.get('error')}")


def _json_body(resp: Any) -> dict[str, Any]:
    try:
        return _dict(resp.json())
    except ValueError:
        return {}


def _error_text(resp: Any) -> str:
    body = _json_body(resp)
    text = body.get("error") or body.get("detail") or resp.text
    return one_line(text if isinstance(text, str) else json.dumps(text), 200)


# --------------------------------------------------------------------------------------------------
# Parser and entry point


def build_parser() -> argparse.ArgumentParser:
    """The `arcana` argument parser (exposed for tests and docs)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", help="trace directory or file (default: $ARCANA_TRACE_DIR or ./traces)")
    common.add_argument("--agent", help="only this pool agent")
    common.add_argument("--json", action="store_true", help="machine-readable JSON output")

    parser = argparse.ArgumentParser(prog="arcana", description="Arcana Console command line.")
    top = parser.add_subparsers(dest="group", required=True, metavar="{trace}")
    trace = top.add_parser("trace", help="read, replay and upload trace files")
    sub = trace.add_subparsers(
        dest="command", required=True, metavar="{list,show,replay,explain,flow,upload}"
    )

    sub.add_parser("list", parents=[common], help="runs, newest first")

    show = sub.add_parser("show", parents=[common], help="numbered events of a run (filters are OR-ed)")
    show.add_argument("run_id", help="run id or a unique prefix")
    for name in FILTERS:
        show.add_argument(f"--{name}", action="store_true", help=f"show {', '.join(FILTERS[name])} events")

    replay = sub.add_parser("replay", parents=[common], help="what the model saw at a turn")
    replay.add_argument("run_id")
    replay.add_argument("--turn", type=int, help="1-based turn")
    replay.add_argument("--step", type=int, help="only this step of the turn (1-based)")
    only = replay.add_mutually_exclusive_group()
    only.add_argument("--decision-only", action="store_true", help="context decision and pins only")
    only.add_argument("--prompt-only", action="store_true", help="prompt snapshot only")

    explain = sub.add_parser("explain", parents=[common], help="inputs, output, calls and verdict of a turn")
    explain.add_argument("run_id")
    explain.add_argument("--turn", type=int, help="1-based turn")

    flow = sub.add_parser("flow", parents=[common], help="turns, steps, tool and primitive calls")
    flow.add_argument("run_id")

    upload = sub.add_parser("upload", parents=[common], help="send trace files to an Arcana Console server")
    upload.add_argument("paths", nargs="+", metavar="file-or-dir")
    upload.add_argument("--server", help="server URL (default: $ARCANA_SERVER)")
    upload.add_argument("--api-key", help="project API key (default: $ARCANA_API_KEY)")
    upload.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for each file (default 600)"
    )
    upload.add_argument("--timeout-http", type=float, default=30.0, help=argparse.SUPPRESS)
    return parser


COMMANDS = {
    "list": cmd_list,
    "show": cmd_show,
    "replay": cmd_replay,
    "explain": cmd_explain,
    "flow": cmd_flow,
    "upload": cmd_upload,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run `arcana …` with `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, or an argparse usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    command = Command(args)
    prog = f"arcana trace {args.command}"
    try:
        return COMMANDS[args.command](command)
    except UsageError as exc:
        command.err.line(f"{prog}: {exc}")
        return 2
    except DataError as exc:
        command.err.block(f"{prog}: error: {exc}")
        return 1
    except BrokenPipeError:  # `arcana trace show … | head`
        return 0
