"""Steps our runtime exported (`runtime.OtlpExportSink`, `arcana.*` attributes): written again as
the events it wrote to JSONL (docs/trace-format.md, "OTLP export")."""

from __future__ import annotations

import json
from typing import Any

from ._types import Message, OtlpRun, OtlpStep, OtlpToolCall, OtlpTurn
from ._writer import ENVELOPE_KEYS, EventWriter, Pos, step_usage, text_of

# --------------------------------------------------------------------------------------------------
# Steps our runtime exported (`arcana.*`): the events it wrote to JSONL, again


def is_recorded(step: OtlpStep) -> bool:
    a = step["arcana"]
    return a is not None and isinstance(a.get("turn"), int) and isinstance(a.get("step"), int)


def recorded_decision(step: OtlpStep) -> dict[str, Any] | None:
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
    content: Any = texts[0] if len(texts) == 1 else ("\n\n".join(map(text_of, texts)) if texts else None)
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


def openai_tool(tool: Any) -> Any:
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
        "tools": [openai_tool(t) for t in step["tool_definitions"] or []],
        "response_format": None,
        "budget_snapshot": (step["arcana"] or {}).get("budget_snapshot"),
    }


def _recorded_facts(step: OtlpStep) -> dict[str, Any]:
    """The `turn` event's `facts` and `assessment` as our session writes them."""
    parts = [p for m in step["output_messages"] or [] for p in m.get("parts") or []]
    texts = [p.get("content") for p in parts if p.get("type") == "text"]
    text: Any = texts[0] if len(texts) == 1 else ("\n\n".join(map(text_of, texts)) if texts else None)
    calls = [
        {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")}
        for p in parts
        if p.get("type") == "tool_call"
    ]
    finish = next((m["finish_reason"] for m in step["output_messages"] or [] if m.get("finish_reason")), None)
    finish = finish or next(iter(step["finish_reasons"] or []), None)
    usage = step_usage(step)
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


def emit_whole(w: EventWriter, event: Any, event_id: str, parent: str | None, ns: int, pos: Pos) -> None:
    """An event our runtime exported whole (`arcana.event`, `arcana.error`, `arcana.llm_call`),
    written again: its type, metadata and envelope fields as they were."""
    if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
        return
    metadata = event.get("metadata")
    envelope = {k: event[k] for k in ENVELOPE_KEYS if k in event}
    md = dict(metadata) if isinstance(metadata, dict) else {}
    w.emit(event["event_type"], event_id, parent, ns, pos, md, recorded=True, **envelope)


def recorded_step(w: EventWriter, step: OtlpStep, spine: str | None) -> str:
    """A step our runtime exported, as the events it wrote to JSONL (in its order): a summarizer's
    calls, the context decision, the prompt snapshot, the answer (`turn`, `llm_call`), the primitive
    and tool calls, an error. Ids and times are the spans'."""
    w.iteration += 1
    a = step["arcana"] or {}
    turn, number = int(a["turn"]), int(a["step"])
    pos: Pos = (turn, number, step["agent"])
    step_id = f"otlp-{step['trace_id']}-{step['span_id']}"
    start, end = step["start_time"], step["end_time"]
    extras = [e for e in a.get("events") or [] if isinstance(e, dict)]
    for n, event in enumerate(extras):
        if event.get("event_type") in ("llm_call", "error"):  # the builder's summary calls come first
            emit_whole(w, event, f"{step_id}-event-{n}", step_id, start, pos)
    decision = recorded_decision(step)
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
            emit_whole(w, a["llm_call"], f"{step_id}-call", step_id, end, pos)
        else:
            w.emit(
                "llm_call", f"{step_id}-call", step_id, end, pos,
                {"provider": step["provider"], "purpose": "chat", "usage": step_usage(step), "latency_ms": latency},
                recorded=True, model=step["model"], llm_latency_ms=latency,
                budgets={"tokens_used": total},
            )  # fmt: skip
    for n, call in enumerate(step["tool_calls"], start=1):
        _recorded_tool(w, call, f"{step_id}-tool-{n}", step_id, end, pos)
    if a.get("error") is not None:
        emit_whole(w, a["error"], f"{step_id}-error", step_id, end, pos)
    for n, event in enumerate(extras):
        if event.get("event_type") not in ("llm_call", "error"):
            emit_whole(w, event, f"{step_id}-event-{n}", step_id, end, pos)
    return step_id


def _recorded_tool(
    w: EventWriter, call: OtlpToolCall, event_id: str, step_id: str, ns: int, pos: Pos
) -> None:
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
        emit_whole(w, a["error"], event_id, step_id, ns, pos)


def recorded_turn_events(w: EventWriter, run: OtlpRun, turn: OtlpTurn) -> None:
    """Events our runtime exported on a turn's own span (a `state_change` that ended it), after its
    steps, numbered as the turn's last recorded step."""
    a = turn["arcana"]
    last = next((run["steps"][i] for i in reversed(turn["steps"]) if is_recorded(run["steps"][i])), None)
    if a is None or last is None or not a.get("events"):
        return
    la = last["arcana"] or {}
    pos: Pos = (int(la["turn"]), int(la["step"]), last["agent"])
    step_id = f"otlp-{last['trace_id']}-{last['span_id']}"
    spine = step_id
    for n, event in enumerate(a["events"]):
        emit_whole(w, event, f"{step_id}-turn-{n}", spine, turn["end_time"], pos)
