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
its step is written by `_recorded_step` instead, as our runtime wrote it to JSONL — the recorded
context decision (`_recorded_decision`), the prompt snapshot in our message shape, the `turn` event's
facts and new messages, `cognitive_primitive` events for primitive calls, our turn / step numbering
and agents (docs/trace-format.md, "OTLP export"); nothing of it is reconstructed.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from .._trace import OTLP_PRODUCER
from ..errors import TraceFormatError
from ..reconstruct import Reconstruction, reconstruct
from ._types import ErrorInfo, Message, OtlpRun, OtlpStep, OtlpToolCall, OtlpTurn, Part

_ENVELOPE_NULLS = (
    "task_id",
    "state_before_hash",
    "state_after_hash",
    "llm_request_digest",
    "llm_response_digest",
    "model",
    "llm_latency_ms",
    "tool_call",
    "budgets",
    "stop_reason",
    "stop_detail",
)
_MAX_ID = 200


def run_id_for(run_key: str) -> str:
    """The run id of an OTLP run: its conversation, session or trace id as it is when it is a valid
    run id (1-200 characters, no `/`, no control character), else `otlp-` and a digest of it."""
    if 0 < len(run_key) <= _MAX_ID and "/" not in run_key and run_key.isprintable():
        return run_key
    return "otlp-" + hashlib.sha256(run_key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _time(ns: int) -> str:
    return (
        datetime.fromtimestamp(ns // 1_000_000_000, UTC)
        .replace(microsecond=(ns // 1000) % 1_000_000)
        .isoformat()
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def chat_messages(messages: list[Message] | None, system: list[Part] | None = None) -> list[dict[str, Any]]:
    """Messages in the parts form as the chat shape the pages draw (`role`, `content`, `tool_calls`,
    `tool_call_id`), keeping every part: a message's text parts joined, its tool calls as
    `tool_calls`, each tool result as a message of its own, any other part as a message with its JSON
    (`part_type` names it)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": "\n\n".join(_text(p.get("content")) for p in system)})
    for m in messages or []:
        role = str(m.get("role") or "unknown")
        parts = m.get("parts") or []
        texts = [_text(p.get("content")) for p in parts if p.get("type") == "text"]
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
                {"role": role, "tool_call_id": r.get("id"), "name": r.get("name"), "content": _text(result)}
            )
        for o in others:
            out.append({"role": role, "content": _text(o), "part_type": str(o.get("type"))})
    return out


def _answer(step: OtlpStep) -> tuple[str | None, list[dict[str, Any]]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for m in step["output_messages"] or []:
        for p in m.get("parts") or []:
            if p.get("type") == "text":
                texts.append(_text(p.get("content")))
            elif p.get("type") == "tool_call":
                calls.append({"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")})
    if not texts and step["output_messages"] is None:
        return None, calls
    return "\n\n".join(texts), calls


def _error_text(error: ErrorInfo) -> tuple[str, str]:
    kind = error.get("type") or "error"
    return kind, error.get("message") or kind


class _Writer:
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
        event: dict[str, Any] = {name: None for name in _ENVELOPE_NULLS}
        event.update(
            run_id=self.run_id,
            step_id=step_id,
            parent_step_id=parent,
            timestamp=_time(ns),
            role="system",
            event_type=event_type,
            metadata=md,
        )
        event.update(envelope)
        self.events.append(event)


def _usage(step: OtlpStep) -> dict[str, Any]:
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


def _tool(
    w: _Writer, call: OtlpToolCall, n: int, step_id: str, step: OtlpStep, pos: tuple[int, int, str | None]
) -> None:
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


def _step_id(step: OtlpStep) -> str:
    return f"otlp-{step['trace_id']}-{step['span_id']}"


RECONSTRUCTED = (
    "Reconstructed from the messages the model received (the spans record no context decision): "
    "each message of the conversation so far is kept, shortened, summarized, dropped, restored or new."
)


def _by_part(messages: list[Message]) -> list[Message]:
    """Messages with several text parts split into one message per text part (the other parts stay
    with the first): frameworks join consecutive requests into one message (Pydantic AI sends a
    summary and the next question as two text parts of one user message), and each part is what
    was kept, summarized or added."""
    out: list[Message] = []
    for m in messages:
        parts = m.get("parts") or []
        texts = [p for p in parts if p.get("type") == "text"]
        if len(texts) < 2:
            out.append(m)
            continue
        others = [p for p in parts if p.get("type") != "text"]
        for i, part in enumerate(texts):
            piece: Message = {"role": m.get("role", "user"), "parts": [part, *(others if i == 0 else [])]}
            out.append(piece)
    return out


def _reconstruction(run: OtlpRun) -> Reconstruction | None:
    """The run's context decisions read from the messages each call received, or None when no call
    carries its input messages (or they cannot be read)."""
    calls = []
    for step in run["steps"]:
        if step["input_messages"] is None or _recorded(step):
            continue
        usage: dict[str, Any] = dict(step["usage"] or {})
        calls.append(
            {
                "id": _step_id(step),
                "input_messages": _by_part(step["input_messages"]),
                "output_messages": _by_part(step["output_messages"] or []),
                "system_instructions": step["system_instructions"],
                "input_tokens": usage.get("input_tokens"),
                "output_tokens": usage.get("output_tokens"),
                "agent": step["agent"],
            }
        )
    if not calls:
        return None
    try:
        return reconstruct(calls)
    except TraceFormatError:
        return None


def _decision(
    w: _Writer, rec: Reconstruction, step: OtlpStep, step_id: str, pos: tuple[int, int, str | None]
) -> None:
    """The step's reconstructed `context_decision`, when the reconstruction has one for its call."""
    try:
        call = rec.call(step_id)
    except KeyError:
        return
    if call.kind != "turn":
        return
    decision = call.to_context_decision()
    lost = [i.to_dict() for i in rec.lost_instructions if i.first_missing_call_id == step_id]
    report: dict[str, Any] = {"origin": "reconstructed", "counts": call.counts()}
    if call.compaction is not None:
        report["compaction"] = call.compaction.to_dict()
    if lost:
        report["lost_instructions"] = lost
    if call.context_window and call.input_tokens:
        report["utilization"] = call.input_tokens / call.context_window
    decision["explanation"] = RECONSTRUCTED
    w.emit(
        "context_decision",
        f"{step_id}-decision",
        step_id,
        step["start_time"],
        pos,
        {
            "context_decision": decision,
            "explanation": RECONSTRUCTED,
            "compressed_count": decision["compressed_count"],
            "messages_in": decision["messages_in"],
            "messages_out": decision["messages_out"],
            "context_report": report,
        },
    )


def _step(
    w: _Writer,
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
    step_id = _step_id(step)
    if rec is not None:
        _decision(w, rec, step, step_id, pos)
    if step["input_messages"] is not None or step["system_instructions"]:
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
    text, calls = _answer(step)
    usage = _usage(step)
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
    for n, call in enumerate(step["tool_calls"], start=1):
        _tool(w, call, n, step_id, step, pos)
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


def events_for_run(run: OtlpRun, run_id: str | None = None) -> list[dict[str, Any]]:
    """The trace events of `run` (see the module docstring), in step order. `run_id` defaults to
    `run_id_for(run["run_key"])`. A step whose span carries our `arcana.*` attributes is written as
    recorded (`_recorded_step`), any other from its GenAI attributes alone (`_step`)."""
    w = _Writer(run_id or run_id_for(run["run_key"]), len(run["agents"]))
    rec = _reconstruction(run)
    spine: str | None = None
    spines: dict[str | None, str] = {}  # recorded steps: the previous step of the same agent
    for turn in run["turns"]:
        for number, index in enumerate(turn["steps"], start=1):
            step = run["steps"][index]
            if _recorded(step):
                spine = spines[step["agent"]] = _recorded_step(w, step, spines.get(step["agent"]))
            else:
                spine = _step(w, run, turn, number, step, spine, rec)
        _recorded_turn_events(w, run, turn)
    return w.events


# --------------------------------------------------------------------------------------------------
# Steps our runtime exported (`arcana.*`): the events it wrote to JSONL, again


def _recorded(step: OtlpStep) -> bool:
    a = step["arcana"]
    return a is not None and isinstance(a.get("turn"), int) and isinstance(a.get("step"), int)


def _recorded_decision(step: OtlpStep) -> dict[str, Any] | None:
    """The `context_decision` metadata our runtime recorded for this step (`arcana.context_decision`),
    or None: a span without it (another framework's, or ours with no decision) has none recorded.
    (Decisions reconstructed from the messages, for spans without `arcana.*`, belong beside this.)"""
    decision = (step["arcana"] or {}).get("context_decision")
    return dict(decision) if isinstance(decision, dict) and "context_decision" in decision else None


def _arcana_message(m: Message) -> dict[str, Any]:
    """A parts-form message back in our prompt snapshot's shape (`runtime._otlp_sink.message_parts`
    is the other way): one text part is the content as it was, tool results carry their call id."""
    parts = m.get("parts") or []
    texts = [p.get("content") for p in parts if p.get("type") == "text"]
    content: Any = texts[0] if len(texts) == 1 else ("\n\n".join(map(_text, texts)) if texts else None)
    tool_call_id = m.get("tool_call_id")
    for p in parts:
        if p.get("type") == "tool_call_response":
            tool_call_id, content = p.get("id"), p.get("result")
    calls = [
        {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")}
        for p in parts
        if p.get("type") == "tool_call"
    ]
    return {
        "role": m.get("role"),
        "content": content,
        "name": m.get("name"),
        "tool_call_id": tool_call_id,
        "tool_calls": calls or None,
        "cache_control": None,
    }


def _openai_tool(tool: Any) -> Any:
    """A GenAI tool definition (`{"type": "function", "name", ...}`) in the OpenAI shape we send."""
    if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    return tool


def _recorded_snapshot(step: OtlpStep, turn: int, number: int) -> dict[str, Any] | None:
    if step["input_messages"] is None:
        return None
    system = step["system_instructions"]
    messages = [_arcana_message({"role": "system", "parts": system})] if system else []
    messages += [_arcana_message(m) for m in step["input_messages"]]
    return {
        "turn": turn,
        "step": number,
        "model": step["request_model"] or step["model"],
        "messages": messages,
        "tools": [_openai_tool(t) for t in step["tool_definitions"] or []],
        "response_format": None,
        "budget_snapshot": (step["arcana"] or {}).get("budget_snapshot"),
    }


def _recorded_facts(step: OtlpStep) -> dict[str, Any]:
    """The `turn` event's `facts` and `assessment` as our session writes them."""
    parts = [p for m in step["output_messages"] or [] for p in m.get("parts") or []]
    texts = [p.get("content") for p in parts if p.get("type") == "text"]
    text: Any = texts[0] if len(texts) == 1 else ("\n\n".join(map(_text, texts)) if texts else None)
    calls = [
        {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")}
        for p in parts
        if p.get("type") == "tool_call"
    ]
    finish = next((m["finish_reason"] for m in step["output_messages"] or [] if m.get("finish_reason")), None)
    finish = finish or next(iter(step["finish_reasons"] or []), None)
    usage = _usage(step)
    call = (step["arcana"] or {}).get("llm_call")
    reported = call.get("metadata", {}).get("usage") if isinstance(call, dict) else None
    if isinstance(reported, dict) and isinstance(reported.get("total_tokens"), int):
        usage["total_tokens"] = reported["total_tokens"]  # the provider's total, not input + output
    assessment: dict[str, Any]
    if calls or not text:
        assessment = {"completed": False, "failed": not calls, "needs_clarification": False, "answer": None}
        assessment |= {"completion_reason": None if calls else "empty_response", "confidence": 0.0}
    else:
        natural = finish in (None, "stop")
        assessment = {"completed": True, "failed": False, "needs_clarification": False, "answer": text}
        assessment |= {
            "completion_reason": "natural_stop" if natural else finish,
            "confidence": 0.85 if natural else 0.5,
        }
    facts = {
        "assistant_text": text,
        "tool_calls": calls,
        "usage": {
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": None,
            "cached_tokens": usage["cached_tokens"],
        },
        "finish_reason": finish,
        "thinking": None,
        "provider_metadata": {},
    }
    return {"facts": facts, "assessment": assessment}


def _whole(w: _Writer, event: Any, event_id: str, parent: str | None, ns: int, pos: _Pos) -> None:
    """An event our runtime exported whole (`arcana.event`, `arcana.error`, `arcana.llm_call`),
    written again: its type, metadata and envelope fields as they were."""
    if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
        return
    metadata = event.get("metadata")
    envelope = {k: event[k] for k in _ENVELOPE_NULLS if k in event}
    md = dict(metadata) if isinstance(metadata, dict) else {}
    w.emit(event["event_type"], event_id, parent, ns, pos, md, recorded=True, **envelope)


_Pos = tuple[int, int, str | None]


def _recorded_step(w: _Writer, step: OtlpStep, spine: str | None) -> str:
    """A step our runtime exported, as the events it wrote to JSONL (in its order): a summarizer's
    calls, the context decision, the prompt snapshot, the answer (`turn`, `llm_call`), the primitive
    and tool calls, an error. Ids and times are the spans'."""
    w.iteration += 1
    a = step["arcana"] or {}
    turn, number = int(a["turn"]), int(a["step"])
    pos: _Pos = (turn, number, step["agent"])
    step_id = f"otlp-{step['trace_id']}-{step['span_id']}"
    start, end = step["start_time"], step["end_time"]
    extras = [e for e in a.get("events") or [] if isinstance(e, dict)]
    for n, event in enumerate(extras):
        if event.get("event_type") in ("llm_call", "error"):  # the builder's summary calls come first
            _whole(w, event, f"{step_id}-event-{n}", step_id, start, pos)
    decision = _recorded_decision(step)
    if decision is not None:
        w.emit("context_decision", f"{step_id}-decision", step_id, start, pos, decision, recorded=True)
    snapshot = _recorded_snapshot(step, turn, number)
    if snapshot is not None:
        w.emit(
            "prompt_snapshot", f"{step_id}-input", step_id, start, pos, {"prompt_snapshot": snapshot},
            recorded=True, model=snapshot["model"],
        )  # fmt: skip
    latency = max(0, (end - start) // 1_000_000)
    if step["output_messages"] is not None:
        stop = (
            {"stop_reason": a["stop_reason"], "stop_detail": a.get("stop_detail")}
            if a.get("stop_reason")
            else {}
        )
        metadata: dict[str, Any] = {
            "messages": a.get("messages") if isinstance(a.get("messages"), list) else []
        }
        metadata |= _recorded_facts(step)
        metadata["trace_privacy"] = {
            "turn_content": "raw",
            "contains_raw_content": True,
            "reason": "history_rebuildable_from_trace",
        }
        metadata["otlp"] = {"trace_id": step["trace_id"], "span_id": step["span_id"]}
        w.emit(
            "turn", step_id, spine, end, pos, metadata, recorded=True, model=step["model"],
            llm_latency_ms=latency, **stop,
        )  # fmt: skip
        total = metadata["facts"]["usage"]["total_tokens"]
        if isinstance(a.get("llm_call"), dict):
            _whole(w, a["llm_call"], f"{step_id}-call", step_id, end, pos)
        else:
            w.emit(
                "llm_call", f"{step_id}-call", step_id, end, pos,
                {"provider": step["provider"], "purpose": "chat", "usage": _usage(step), "latency_ms": latency},
                recorded=True, model=step["model"], llm_latency_ms=latency,
                budgets={"tokens_used": total},
            )  # fmt: skip
    for n, call in enumerate(step["tool_calls"], start=1):
        _recorded_tool(w, call, f"{step_id}-tool-{n}", step_id, end, pos)
    if a.get("error") is not None:
        _whole(w, a["error"], f"{step_id}-error", step_id, end, pos)
    for n, event in enumerate(extras):
        if event.get("event_type") not in ("llm_call", "error"):
            _whole(w, event, f"{step_id}-event-{n}", step_id, end, pos)
    return step_id


def _recorded_tool(w: _Writer, call: OtlpToolCall, event_id: str, step_id: str, ns: int, pos: _Pos) -> None:
    """A tool span our runtime exported: a primitive call, a tool call, or an unknown tool's error.
    A call the model asked for with no span (yet) writes nothing, as our runtime writes nothing
    for a call it did not run."""
    a = call["arcana"]
    if a is None:
        return
    ns = call["end_time"] or ns
    if isinstance(a.get("primitive"), str):
        metadata: dict[str, Any] = {
            "primitive": a["primitive"],
            "args": a.get("primitive.args"),
            "result": a.get("primitive.result"),
            "tool_call_id": call["call_id"],
        }
        for key in ("tokens", "raw_arguments"):
            if a.get(f"primitive.{key}") is not None:
                metadata[key] = a[f"primitive.{key}"]
        w.emit("cognitive_primitive", event_id, step_id, ns, pos, metadata, recorded=True)
    elif isinstance(a.get("tool_call"), dict):
        arguments = call["arguments"]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                pass
        metadata = {"tool_call_id": call["call_id"], "arguments": arguments, "result": call["result"]}
        w.emit("tool_call", event_id, step_id, ns, pos, metadata, recorded=True, tool_call=a["tool_call"])
    elif a.get("error") is not None:
        _whole(w, a["error"], event_id, step_id, ns, pos)


def _recorded_turn_events(w: _Writer, run: OtlpRun, turn: OtlpTurn) -> None:
    """Events our runtime exported on a turn's own span (a `state_change` that ended it), after its
    steps, numbered as the turn's last recorded step."""
    a = turn["arcana"]
    last = next((run["steps"][i] for i in reversed(turn["steps"]) if _recorded(run["steps"][i])), None)
    if a is None or last is None or not a.get("events"):
        return
    la = last["arcana"] or {}
    pos: _Pos = (int(la["turn"]), int(la["step"]), last["agent"])
    step_id = f"otlp-{last['trace_id']}-{last['span_id']}"
    spine = step_id
    for n, event in enumerate(a["events"]):
        _whole(w, event, f"{step_id}-turn-{n}", spine, turn["end_time"], pos)
