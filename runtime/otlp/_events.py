"""An OTLP run as trace events: the Arcana envelope, written in Arcana Console's own dialect (1-based
`console_turn` / `console_step` on every event of a step), so every view that reads our runtime's
events — the CLI, ingestion's projections, the pages, the read API — reads a run from any framework
the same way.

The events are *derived*: the spans are the source of truth, and the same spans always give the same
events (step ids are made from span ids), so a run is derived again whenever a span of it arrives.
They carry `metadata.producer = "arcana-console-otlp"` (`OTLP_PRODUCER`) and, per step:

1. `prompt_snapshot` — the messages the model call received (`gen_ai.input.messages` and the system
   instructions), each part of each message kept: text, tool calls, tool results (a
   `tool_call_response` part is shown as its own message with its `tool_call_id`), other parts as
   their JSON;
2. `turn` — the call record: model, latency, the answer's text and tool calls, usage, finish reason,
   and `metadata.otlp` (trace and span ids, agent, the span's other attributes);
3. `llm_call` — usage and latency, with `budgets.tokens_used` (the call's own tokens);
4. `tool_call` — one per tool call of the step, with its arguments and result;
5. `error` — when the call or one of its tools failed.

and one `context_decision` per step **reconstructed** from the messages each call received
(`runtime.reconstruct`): kept, shortened, summarized, dropped, restored or new, per message, with
`origin = "reconstructed"` on the decision and its rows, the step's compaction and the instructions
it no longer saw in `context_report`. What spans do not carry (pins, recalls) is not invented: those
events are absent, and the pages say so.

A model call exported by our own runtime (`runtime.OtlpExportSink`) carries `arcana.*` attributes:
its step is written by `recorded_step` instead, as our runtime wrote it to JSONL — the recorded
context decision (`recorded_decision`), the prompt snapshot in our message shape, the `turn` event's
facts and new messages, `cognitive_primitive` events for primitive calls, our turn / step numbering
and agents (docs/trace-format.md, "OTLP export"); nothing of it is reconstructed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..reconstruct import Reconstruction
from ._reconstructed import emit_decision, reconstruction
from ._recorded import is_recorded, recorded_step, recorded_turn_events
from ._types import ErrorInfo, Message, OtlpRun, OtlpStep, OtlpToolCall, OtlpTurn, Part
from ._writer import EventWriter, Pos, step_id_of, step_usage, text_of

_MAX_ID = 200


def run_id_for(run_key: str) -> str:
    """The run id of an OTLP run: its conversation, session or trace id as it is when it is a valid
    run id (1-200 characters, no `/`, no control character), else `otlp-` and a digest of it."""
    if 0 < len(run_key) <= _MAX_ID and "/" not in run_key and run_key.isprintable():
        return run_key
    return "otlp-" + hashlib.sha256(run_key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def chat_messages(messages: list[Message] | None, system: list[Part] | None = None) -> list[dict[str, Any]]:
    """Messages in the parts form as the chat shape the pages draw (`role`, `content`, `tool_calls`,
    `tool_call_id`), keeping every part: a message's text parts joined, its tool calls as
    `tool_calls`, each tool result as a message of its own, any other part as a message with its JSON
    (`part_type` names it)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": "\n\n".join(text_of(p.get("content")) for p in system)})
    for m in messages or []:
        role = str(m.get("role") or "unknown")
        parts = m.get("parts") or []
        texts = [text_of(p.get("content")) for p in parts if p.get("type") == "text"]
        calls = [p for p in parts if p.get("type") == "tool_call"]
        results = [p for p in parts if p.get("type") == "tool_call_response"]
        others = [p for p in parts if p.get("type") not in ("text", "tool_call", "tool_call_response")]
        if texts or calls or not (results or others):
            msg: dict[str, Any] = {"role": role, "content": "\n\n".join(texts) if texts else None}
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": c.get("id"),
                        "type": "function",
                        "function": {"name": c.get("name"), "arguments": _arguments(c.get("arguments"))},
                    }
                    for c in calls
                ]
            out.append(msg)
        for r in results:
            result = r.get("result", r.get("response"))
            out.append(
                {"role": role, "tool_call_id": r.get("id"), "name": r.get("name"), "content": text_of(result)}
            )
        for o in others:
            out.append({"role": role, "content": text_of(o), "part_type": str(o.get("type"))})
    return out


def _answer(step: OtlpStep) -> tuple[str | None, list[dict[str, Any]]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for m in step["output_messages"] or []:
        for p in m.get("parts") or []:
            if p.get("type") == "text":
                texts.append(text_of(p.get("content")))
            elif p.get("type") == "tool_call":
                calls.append({"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")})
    if not texts and step["output_messages"] is None:
        return None, calls
    return "\n\n".join(texts), calls


def _error_text(error: ErrorInfo) -> tuple[str, str]:
    kind = error.get("type") or "error"
    return kind, error.get("message") or kind


def _tool(w: EventWriter, call: OtlpToolCall, n: int, step_id: str, step: OtlpStep, pos: Pos) -> None:
    ended = call["end_time"] or step["end_time"]
    started = call["start_time"] or ended
    error = call["error"]
    w.emit(
        "tool_call",
        f"{step_id}-tool-{n}",
        step_id,
        ended,
        pos,
        {
            "tool_call_id": call["call_id"],
            "arguments": call["arguments"],
            "result": call["result"],
            "otlp": {"span_id": call["span_id"]},
        },
        tool_call={
            "name": call["name"] or "?",
            "args_digest": None,
            "idempotency_key": None,
            "result_digest": None,
            "error": _error_text(error)[1] if error else None,
            "error_category": "tool" if error else None,
            "duration_ms": max(0, (ended - started) // 1_000_000),
            "side_effect": None,
        },
    )
    if error:
        kind, message = _error_text(error)
        w.emit(
            "error",
            f"{step_id}-tool-{n}-error",
            step_id,
            ended,
            pos,
            {"error": kind, "message": message, "error_category": "tool", "tool_call_id": call["call_id"]},
        )


def _step(
    w: EventWriter,
    run: OtlpRun,
    turn: OtlpTurn,
    number: int,
    step: OtlpStep,
    spine: str | None,
    rec: Reconstruction | None,
) -> str:
    w.iteration += 1
    turn_number = turn["index"] + 1
    pos = (turn_number, number, step["agent"] or turn["agent"])
    step_id = step_id_of(step)
    if rec is not None:
        emit_decision(w, rec, step, step_id, pos)
    if step["input_messages"] is not None or step["system_instructions"]:
        _prompt_snapshot(w, step, step_id, pos)
    _call_record(w, turn, number, step, step_id, spine, pos)
    for n, call in enumerate(step["tool_calls"], start=1):
        _tool(w, call, n, step_id, step, pos)
    error = step["error"]
    if error:
        kind, message = _error_text(error)
        w.emit(
            "error",
            f"{step_id}-error",
            step_id,
            step["end_time"],
            pos,
            {"error": kind, "message": message, "error_category": "provider"},
        )
    return step_id


def _prompt_snapshot(w: EventWriter, step: OtlpStep, step_id: str, pos: Pos) -> None:
    """`prompt_snapshot`: the messages the model call received, system instructions first."""
    w.emit(
        "prompt_snapshot",
        f"{step_id}-input",
        step_id,
        step["start_time"],
        pos,
        {
            "prompt_snapshot": {
                "turn": w.iteration,
                "step": w.iteration,
                "model": step["model"],
                "messages": chat_messages(step["input_messages"], step["system_instructions"]),
                "tools": [],
                "response_format": None,
                "budget_snapshot": None,
            }
        },
        model=step["model"],
    )


def _call_record(
    w: EventWriter,
    turn: OtlpTurn,
    number: int,
    step: OtlpStep,
    step_id: str,
    spine: str | None,
    pos: Pos,
) -> None:
    """`turn` (the call record: the answer, its facts, usage, the span's ids) and `llm_call`."""
    text, calls = _answer(step)
    usage = step_usage(step)
    latency = max(0, (step["end_time"] - step["start_time"]) // 1_000_000)
    new_messages = chat_messages([turn["user_message"]]) if number == 1 and turn["user_message"] else []
    new_messages += chat_messages(step["output_messages"])
    error = step["error"]
    w.emit(
        "turn",
        step_id,
        spine,
        step["end_time"],
        pos,
        {
            "messages": new_messages,
            "facts": {
                "assistant_text": text,
                "tool_calls": calls,
                "usage": usage,
                "finish_reason": (step["finish_reasons"] or [""])[0] or None,
            },
            "assessment": {"completed": error is None and not calls, "failed": error is not None},
            "otlp": {
                "trace_id": step["trace_id"],
                "span_id": step["span_id"],
                "agent": step["agent"],
                "nested_in": step["nested_in"],
            },
        },
        model=step["model"],
        llm_latency_ms=latency,
    )
    w.emit(
        "llm_call",
        f"{step_id}-call",
        step_id,
        step["end_time"],
        pos,
        {"purpose": "chat", "usage": usage, "latency_ms": latency},
        model=step["model"],
        llm_latency_ms=latency,
        budgets={"tokens_used": usage["total_tokens"]},
    )


def events_for_run(run: OtlpRun, run_id: str | None = None) -> list[dict[str, Any]]:
    """The trace events of `run` (see the module docstring), in step order. `run_id` defaults to
    `run_id_for(run["run_key"])`. A step whose span carries our `arcana.*` attributes is written as
    recorded (`recorded_step`), any other from its GenAI attributes alone (`_step`)."""
    w = EventWriter(run_id or run_id_for(run["run_key"]), len(run["agents"]))
    rec = reconstruction(run)
    spine: str | None = None
    spines: dict[str | None, str] = {}  # recorded steps: the previous step of the same agent
    for turn in run["turns"]:
        for number, index in enumerate(turn["steps"], start=1):
            step = run["steps"][index]
            if is_recorded(step):
                spine = spines[step["agent"]] = recorded_step(w, step, spines.get(step["agent"]))
            else:
                spine = _step(w, run, turn, number, step, spine, rec)
        recorded_turn_events(w, run, turn)
    return w.events
