"""A step's context decision reconstructed from the messages each model call received
(`runtime.reconstruct`), for spans that record none."""

from __future__ import annotations

import json
from typing import Any

from .._tokens import default_counter
from ..errors import TraceFormatError
from ..reconstruct import Reconstruction, reconstruct
from ._recorded import is_recorded, openai_tool
from ._types import Message, OtlpRun, OtlpStep
from ._writer import EventWriter, step_id_of

RECONSTRUCTED = (
    "Reconstructed from the messages the model received (the spans record no context decision): "
    "each message of the conversation so far is kept, shortened, summarized, dropped, restored or new."
)


def by_part(messages: list[Message]) -> list[Message]:
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


def reconstruction(run: OtlpRun) -> Reconstruction | None:
    """The run's context decisions read from the messages each call received, or None when no call
    carries its input messages (or they cannot be read)."""
    calls = []
    for step in run["steps"]:
        if step["input_messages"] is None or is_recorded(step):
            continue
        usage: dict[str, Any] = dict(step["usage"] or {})
        calls.append(
            {
                "id": step_id_of(step),
                "input_messages": by_part(step["input_messages"]),
                "output_messages": by_part(step["output_messages"] or []),
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


def tools_tokens(tool_definitions: list[Any] | None) -> int:
    """The tokens the tool schemas a call was sent add to its prompt (`gen_ai.tool.definitions`, or
    OpenInference's `llm.tools.N.tool.json_schema`), counted as our runtime counts its own
    (`TokenCounter.count_tools`); a definition that is no JSON object counts as its text. 0 without."""
    if not tool_definitions:
        return 0
    counter = default_counter()
    tools = [openai_tool(t) for t in tool_definitions if isinstance(t, dict)]
    texts = [t if isinstance(t, str) else json.dumps(t) for t in tool_definitions if not isinstance(t, dict)]
    return counter.count_tools(tools) + sum(counter.count_text(t) for t in texts)


def emit_decision(
    w: EventWriter, rec: Reconstruction, step: OtlpStep, step_id: str, pos: tuple[int, int, str | None]
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
    if tools := tools_tokens(step["tool_definitions"]):
        report["tools_tokens"] = tools  # the "tool schemas" part of what filled the context
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
