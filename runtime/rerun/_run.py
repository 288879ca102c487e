"""Re-running one step: its edited messages sent once to a provider, written as a branch run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._provider_types import Provider, ProviderResponse, Usage
from .._providers import ScriptedProvider
from .._trace_writer import TraceSink, TraceWriter, digest, request_digest
from ..errors import ProviderError
from ._context import StepContext, text_of
from ._edits import Edit, edited_decision


@dataclass(frozen=True)
class RerunResult:
    """What the re-run answered (`answer`, `tool_calls`), or why it failed (`error`), and its usage."""

    run_id: str
    model: str | None
    answer: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    latency_ms: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "model": self.model,
            "answer": self.answer,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
            "latency_ms": self.latency_ms,
            "error": self.error,
        }


def branch_metadata(
    context: StepContext, edits: Sequence[Edit], provider: str, model: str | None
) -> dict[str, Any]:
    """`metadata.branch` on every event of a branch run: where it branched from and what changed."""
    return {
        "from_run_id": context.run_id,
        "agent": context.agent,
        "turn": context.turn,
        "step": context.step,
        "edits": [e.to_dict() for e in edits],
        "provider": provider,
        "model": model,
        "origin": context.origin,
    }


def scripted_answer(messages: Sequence[dict[str, Any]]) -> str:
    """The offline answer of a scripted re-run: what it was given, so that an edit shows in the
    answer (a restored message adds words, a new system prompt is quoted)."""
    words = sum(len(text_of(m.get("content")).split()) for m in messages)
    system = next((text_of(m.get("content")) for m in messages if m.get("role") == "system"), "")
    users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    last = users[-1] if users else ""
    return (
        f"Re-run with {len(messages)} messages ({words} words of context). "
        f"System prompt: “{_cut(system)}”. Last user message: “{_cut(last)}”."
    )


def scripted_provider(messages: Sequence[dict[str, Any]], model: str = "scripted-rerun") -> ScriptedProvider:
    """A `ScriptedProvider` that answers `scripted_answer(messages)`."""
    return ScriptedProvider([], model=model, closing_text=scripted_answer(messages))


async def rerun_step(
    context: StepContext,
    messages: list[dict[str, Any]],
    provider: Provider,
    *,
    run_id: str,
    sink: TraceSink | None,
    edits: Sequence[Edit] = (),
    provider_name: str = "scripted",
    model: str | None = None,
) -> RerunResult:
    """Send `messages` (the step's edited context, `apply_edits`) to `provider` once and write the
    branch run `run_id` to `sink`: a `prompt_snapshot` (what was sent), the `turn` event (the answer),
    the `llm_call`, or an `error` and a failed `turn` when the provider failed. Every event carries
    `metadata.branch` (`branch_metadata`): the run, agent, turn and step it branched from, the edits,
    provider and model. The step keeps the original's turn and step numbers, so comparing the two
    runs pairs them. Tools are offered as the original step had them (their calls are recorded, not
    run). Step ids are deterministic: writing the branch again stores nothing twice."""
    model = model or context.model
    writer = TraceWriter(sink, run_id, source_agent=context.agent, deterministic_ids=True)
    branch = branch_metadata(context, edits, provider_name, model)
    turn, step = context.turn, context.step
    step_id: str | None = writer.step_id_for(turn, step)
    tools = context.tools or None
    decision = edited_decision(context, edits, messages)
    writer.emit(
        "context_decision",
        turn=turn,
        step=step,
        parent_step_id=step_id,
        metadata={**decision, "context_report": {"origin": "rerun"}, "branch": branch},
    )
    writer.emit(
        "prompt_snapshot",
        turn=turn,
        step=step,
        parent_step_id=step_id,
        model=model,
        metadata={
            "prompt_snapshot": {
                "turn": turn,
                "step": step,
                "model": model,
                "messages": messages,
                "tools": context.tools,
                "response_format": None,
                "budget_snapshot": None,
            },
            "branch": branch,
        },
    )
    started = time.perf_counter()
    try:
        resp = await provider.complete(list(messages), tools=tools, model=model)
    except ProviderError as exc:
        latency = int((time.perf_counter() - started) * 1000)
        _emit_failure(writer, exc, branch, turn, step, step_id, model, provider_name)
        return RerunResult(run_id, model, None, latency_ms=latency, error=f"{type(exc).__name__}: {exc}")
    latency = int((time.perf_counter() - started) * 1000)
    _emit_answer(writer, resp, branch, messages, turn, step, step_id, latency, provider_name, model)
    usage = (resp.usage or Usage()).to_dict()
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in resp.tool_calls]
    return RerunResult(run_id, resp.model or model, resp.content, calls, dict(usage), latency)


def _emit_answer(
    writer: TraceWriter,
    resp: ProviderResponse,
    branch: dict[str, Any],
    messages: list[dict[str, Any]],
    turn: int,
    step: int,
    step_id: str | None,
    latency: int,
    provider_name: str,
    model: str | None,
) -> None:
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in resp.tool_calls]
    usage = resp.usage or Usage()
    text = resp.content
    writer.emit(
        "turn",
        turn=turn,
        step=step,
        step_id=step_id,
        model=resp.model or model,
        llm_latency_ms=latency,
        metadata={
            "messages": [resp.assistant_message()],
            "facts": {
                "assistant_text": text,
                "tool_calls": calls,
                "usage": usage.to_dict(),
                "finish_reason": resp.finish_reason,
            },
            "assessment": {
                "completed": bool(text) and not calls,
                "failed": not text and not calls,
                "needs_clarification": False,
                "answer": text if not calls else None,
                "completion_reason": "natural_stop" if text and not calls else resp.finish_reason,
                "confidence": 0.0,
            },
            "branch": branch,
        },
    )
    writer.emit(
        "llm_call",
        turn=turn,
        step=step,
        parent_step_id=step_id,
        model=resp.model or model,
        llm_latency_ms=latency,
        llm_request_digest=request_digest(messages, None),
        llm_response_digest=digest(resp.assistant_message()),
        budgets=writer.budgets.add(usage.total_tokens, latency),
        metadata={
            "provider": provider_name,
            "purpose": "chat",
            "usage": usage.to_dict(),
            "latency_ms": latency,
            "streamed": resp.streamed,
            "finish_reason": resp.finish_reason,
            "branch": branch,
        },
    )


def _emit_failure(
    writer: TraceWriter,
    exc: ProviderError,
    branch: dict[str, Any],
    turn: int,
    step: int,
    step_id: str | None,
    model: str | None,
    provider_name: str,
) -> None:
    writer.emit(
        "error",
        turn=turn,
        step=step,
        parent_step_id=step_id,
        model=model,
        stop_reason="error",
        stop_detail=str(exc)[:500],
        metadata={
            "error": type(exc).__name__,
            "message": str(exc),
            "error_category": "provider",
            "provider": provider_name,
            "branch": branch,
        },
    )
    writer.emit(
        "turn",
        turn=turn,
        step=step,
        step_id=step_id,
        model=model,
        metadata={
            "messages": [],
            "facts": {
                "assistant_text": None,
                "tool_calls": [],
                "usage": Usage().to_dict(),
                "finish_reason": "error",
            },
            "assessment": {
                "completed": False,
                "failed": True,
                "needs_clarification": False,
                "answer": None,
                "completion_reason": "error",
                "confidence": 0.0,
            },
            "branch": branch,
        },
    )


def _cut(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
