"""The trace events of a session's steps (`turn`, `llm_call`, `context_decision`,
`prompt_snapshot`, `cognitive_primitive`, `tool_call`, `state_change`, `error`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._config import RuntimeConfig
from .._json_text import MessageTexts
from .._primitives import PrimitiveOutcome
from .._provider_types import Provider, ProviderResponse, Usage
from .._tokens import CalibratedCounter, TokenCounter
from .._tools import Tool, ToolOutcome
from .._trace_writer import TraceWriter, digest, request_digest
from ..errors import ProviderError


class SessionEvents:
    """The trace events a `ChatSession` writes, one method per event type (mixed into `ChatSession`)."""

    writer: TraceWriter
    config: RuntimeConfig
    model: str | None
    provider: Provider
    provider_name: str
    counter: TokenCounter
    _spine: str | None

    def _model_name(self, resp: ProviderResponse | None = None) -> str | None:
        if resp is not None and resp.model:
            return resp.model
        return self.model or getattr(self.provider, "model", None)

    def _emit_decision(self, decision: Any, turn: int, step: int, step_id: str) -> None:
        if not self.writer.enabled:
            return
        metadata = decision.to_metadata()
        if isinstance(self.counter, CalibratedCounter):
            # The counts are calibrated estimates (the model's tokenizer is not one tiktoken has).
            metadata["context_report"]["token_counts"] = self.counter.describe()
        plain = self.writer.plain_decisions
        self.writer.emit(
            "context_decision",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            metadata=metadata,
            plain_metadata=plain,
            # Each message decision's JSON text, made once per decision (most are the step before's).
            decision_texts=(decision.decision_shapes(), decision.decision_texts()) if plain else None,
        )

    def _emit_snapshot(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: int, step: int, step_id: str
    ) -> None:
        model = self._model_name()
        self.writer.emit(
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
                    "messages": [_arcana_message(m) for m in messages],
                    "tools": tools,
                    "response_format": None,
                    "budget_snapshot": self.writer.budgets.snapshot(),
                }
            },
        )

    def _emit_turn(
        self,
        resp: ProviderResponse,
        new_messages: list[dict[str, Any]],
        turn: int,
        step: int,
        step_id: str,
        latency: int,
        *,
        exhausted: bool,
    ) -> None:
        text = resp.content
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in resp.tool_calls]
        u = resp.usage or Usage()
        assessment = _assessment(resp, has_calls=bool(calls))
        stop: dict[str, Any] = {}
        if exhausted:
            stop = {
                "stop_reason": "max_steps",
                "stop_detail": f"max_steps_per_turn ({self.config.max_steps_per_turn}) exhausted in turn {turn}",
            }
        self.writer.emit(
            "turn",
            turn=turn,
            step=step,
            step_id=step_id,
            parent_step_id=self._spine,
            model=self._model_name(resp),
            llm_latency_ms=latency,
            metadata={
                "messages": new_messages,
                "facts": {
                    "assistant_text": text,
                    "tool_calls": calls,
                    "usage": {
                        **u.to_dict(),
                        "cache_creation_input_tokens": None,
                        "cache_read_input_tokens": None,
                        "cached_tokens": None,
                    },
                    "finish_reason": resp.finish_reason,
                    "thinking": None,
                    "provider_metadata": {},
                },
                "assessment": assessment,
                "trace_privacy": {
                    "turn_content": "raw",
                    "contains_raw_content": True,
                    # Our traces carry the messages so a conversation can be rebuilt from them.
                    "reason": "history_rebuildable_from_trace",
                },
            },
            **stop,
        )
        self._spine = step_id

    def _emit_llm_call(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        resp: ProviderResponse,
        turn: int,
        step: int,
        step_id: str,
        latency: int,
        texts: Sequence[MessageTexts | None] | None = None,
    ) -> None:
        total = resp.usage.total_tokens if resp.usage else 0
        budgets = self.writer.budgets.add(total, latency)
        self.writer.emit(
            "llm_call",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            model=self._model_name(resp),
            llm_latency_ms=latency,
            llm_request_digest=request_digest(messages, tools, texts),
            llm_response_digest=digest(resp.assistant_message()),
            budgets=budgets,
            metadata={
                "provider": self.provider_name,
                "purpose": "chat",
                "usage": (resp.usage or Usage()).to_dict(),
                "latency_ms": latency,
                "streamed": resp.streamed,
                "finish_reason": resp.finish_reason,
                **(
                    {"token_counts": self.counter.describe()}
                    if isinstance(self.counter, CalibratedCounter)
                    else {}
                ),
            },
        )

    def _emit_primitive(
        self, outcome: PrimitiveOutcome, call_id: str, turn: int, step: int, step_id: str
    ) -> None:
        metadata: dict[str, Any] = {
            "primitive": outcome.primitive,
            "args": outcome.args,
            "result": outcome.result,
            "tool_call_id": call_id,
        }
        if outcome.tokens is not None:
            metadata["tokens"] = outcome.tokens
        if outcome.raw_arguments is not None:
            metadata["raw_arguments"] = outcome.raw_arguments
        self.writer.emit(
            "cognitive_primitive", turn=turn, step=step, parent_step_id=step_id, metadata=metadata
        )

    def _emit_tool_call(
        self, t: Tool, call_id: str, arguments: str, out: ToolOutcome, turn: int, step: int, step_id: str
    ) -> None:
        args = loads_or_raw(arguments)
        self.writer.emit(
            "tool_call",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            tool_call={
                "name": t.name,
                "args_digest": digest(args),
                "idempotency_key": None,
                "result_digest": digest(out.content),
                "error": out.error,
                "error_category": out.error_category,
                "duration_ms": out.duration_ms,
                "side_effect": t.side_effect,
            },
            metadata={"tool_call_id": call_id, "arguments": args, "result": out.content},
        )

    def _emit_stop(self, stop: tuple[str, str], turn: int, step: int) -> None:
        reason, detail = stop
        self.writer.emit(
            "state_change",
            turn=turn,
            step=step,
            parent_step_id=self._spine,
            stop_reason=reason,
            stop_detail=detail[:500],
            metadata={"stopped": reason, "detail": detail[:500]},
        )

    def _emit_provider_error(
        self, exc: BaseException, new_messages: list[dict[str, Any]], turn: int, step: int, step_id: str
    ) -> None:
        """A failed send: the `error` event, then the step's `turn` event, failed, with no answer (the
        messages it sent, no assistant text, zero usage, `completion_reason: "error"`), so that a reader
        that knows a step by its `turn` event (arcana-agent 1.2's `explain` and `flow`) finds the step,
        its decision and its error."""
        category = "provider" if isinstance(exc, ProviderError) else "unexpected"
        self._emit_error(exc, category, turn, step, step_id)
        self.writer.emit(
            "turn",
            turn=turn,
            step=step,
            step_id=step_id,
            parent_step_id=self._spine,
            model=self._model_name(),
            metadata={
                "messages": new_messages,
                "facts": {
                    "assistant_text": None,
                    "tool_calls": [],
                    "usage": {
                        **Usage().to_dict(),
                        "cache_creation_input_tokens": None,
                        "cache_read_input_tokens": None,
                        "cached_tokens": None,
                    },
                    "finish_reason": "error",
                    "thinking": None,
                    "provider_metadata": {},
                },
                "assessment": {
                    "completed": False,
                    "failed": True,
                    "needs_clarification": False,
                    "answer": None,
                    "completion_reason": "error",
                    "confidence": 0.0,
                },
                "trace_privacy": {
                    "turn_content": "raw",
                    "contains_raw_content": True,
                    "reason": "history_rebuildable_from_trace",
                },
            },
        )
        self._spine = step_id

    def _emit_error(
        self,
        exc: BaseException,
        category: str,
        turn: int,
        step: int,
        step_id: str,
        *,
        purpose: str | None = None,
    ) -> None:
        """An `error` event. With `purpose` (a summarizer call the builder recovers from) the turn
        does not stop, so the event carries `metadata.purpose` and no `stop_reason`."""
        metadata: dict[str, Any] = {
            "error": type(exc).__name__,
            "message": str(exc),
            "error_category": category,
            "provider": self.provider_name,
        }
        if purpose is not None:
            metadata["purpose"] = purpose
        status = getattr(exc, "status_code", None)
        if status is not None:
            metadata["status_code"] = status
        stop: dict[str, Any] = (
            {} if purpose is not None else {"stop_reason": "error", "stop_detail": str(exc)[:500]}
        )
        self.writer.emit(
            "error",
            turn=turn,
            step=step,
            parent_step_id=step_id,
            model=self._model_name(),
            metadata=metadata,
            **stop,
        )


def loads_or_raw(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments
    return value


def _arcana_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """A message in Arcana's prompt-snapshot shape (all keys present, tool calls flattened)."""
    calls = m.get("tool_calls")
    return {
        "role": m.get("role"),
        "content": m.get("content"),
        "name": m.get("name"),
        "tool_call_id": m.get("tool_call_id"),
        "tool_calls": [
            {
                "id": c.get("id"),
                "name": c.get("function", {}).get("name"),
                "arguments": c.get("function", {}).get("arguments"),
            }
            for c in calls
        ]
        if calls
        else None,
        "cache_control": None,
    }


def _assessment(resp: ProviderResponse, *, has_calls: bool) -> dict[str, Any]:
    """The `turn` event's `assessment`, as Arcana words it: a step that called tools is not done, an
    empty answer failed, anything else completed (naturally, or cut short by `finish_reason`)."""
    text = resp.content
    if has_calls:
        return {
            "completed": False,
            "failed": False,
            "needs_clarification": False,
            "answer": None,
            "completion_reason": None,
            "confidence": 0.0,
        }
    elif not text:
        return {
            "completed": False,
            "failed": True,
            "needs_clarification": False,
            "answer": None,
            "completion_reason": "empty_response",
            "confidence": 0.0,
        }
    else:
        natural = resp.finish_reason in (None, "stop")
        return {
            "completed": True,
            "failed": False,
            "needs_clarification": False,
            "answer": text,
            "completion_reason": "natural_stop" if natural else resp.finish_reason,
            "confidence": 0.85 if natural else 0.5,
        }
