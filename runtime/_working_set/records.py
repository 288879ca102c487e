"""The records a build leaves behind: pin blocks, one decision per message, the report, and the
working set itself."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from .._json_text import flat_texts

Outcome = Literal["kept", "compressed", "dropped", "summarized"]
Summarizer = Callable[[list[dict[str, Any]]], Awaitable[str]]

#: Every `MessageDecision.reason` the builder writes.
REASONS: tuple[str, ...] = (
    "identity",  # leading system message, always L0
    "task",  # the latest user message, always L0
    "pinned",  # a pin block, always L0
    "passthrough",  # everything fits under the passthrough threshold
    "tail_preserve_tail",  # one of the `keep_recent` last messages, kept at L0
    "tail_preserve_middle_kept",  # middle message relevant enough to stay at L0
    "tail_preserve_middle_compressed",  # middle message graded / demoted to L1-L3
    "tail_preserve_middle_dropped",  # middle message (with its tool pair) dropped to fit
    "llm_summarized_into_single",  # replaced by the one summary message
    "aggressive_truncate_kept",  # within the last `aggressive_keep_turns` turns
    "aggressive_truncate_drop",  # before them
    "demoted_to_fit",  # a tail message demoted because head + tail alone did not fit
    "dropped_to_fit",  # a tail message (with its tool pair) dropped for the same reason
)


# ---------------------------------------------------------------------------------------------
# Pins
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PinBlock:
    """An active pin as the builder renders it. `pin_id` is `p_` + 8 hex."""

    pin_id: str
    label: str | None
    content: str


def render_pin(pin: PinBlock) -> dict[str, Any]:
    """The system message a pin is sent as, showing its id (so the model can `unpin` it) and label.

    >>> render_pin(PinBlock("p_a1b2c3d4", "key facts", "Budget is 40k."))
    {'role': 'system', 'content': '[pinned p_a1b2c3d4 · key facts]\\nBudget is 40k.'}
    >>> render_pin(PinBlock("p_a1b2c3d4", None, "x"))["content"]
    '[pinned p_a1b2c3d4]\\nx'
    """
    header = f"[pinned {pin.pin_id} · {pin.label}]" if pin.label else f"[pinned {pin.pin_id}]"
    return {"role": "system", "content": f"{header}\n{pin.content}"}


# ---------------------------------------------------------------------------------------------
# Decisions and report
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MessageDecision:
    """What the builder did with one input message (or one pin block)."""

    index: int
    role: str
    outcome: Outcome
    fidelity: str | None
    relevance_score: float | None
    token_count_before: int
    token_count_after: int
    reason: str
    pinned: bool = False
    pin_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The trace shape; `pinned` / `pin_id` only appear on pin blocks (as docs/trace-format.md).
        A new dict each call (a copy of `_shape()`)."""
        return self._shape().copy()

    def _shape(self) -> dict[str, Any]:
        """The trace shape, made once per decision and shared: never hand it out to be changed."""
        shape: dict[str, Any] | None = self.__dict__.get("_shape_dict")
        if shape is None:
            shape = self.__dict__["_shape_dict"] = self._make_dict()
        return shape

    def _text(self) -> str:
        """The compact JSON text of `_shape()` (as a JSONL line holds it), made once per decision."""
        text: str | None = self.__dict__.get("_shape_text")
        if text is None:
            text = self.__dict__["_shape_text"] = self._encode()
        return text

    def _encode(self) -> str:
        """`json.dumps(self._shape(), separators=(",", ":"), ensure_ascii=False)`: written out for
        a message's decision of exact ints, strings, None and a finite float (what the builder
        makes; int and float give the text `repr` does, as json does), else by `json.dumps`."""
        d = self.__dict__
        index, before, after, score = (
            d["index"],
            d["token_count_before"],
            d["token_count_after"],
            d["relevance_score"],
        )
        role, outcome, fidelity, reason = d["role"], d["outcome"], d["fidelity"], d["reason"]
        if (
            not d["pinned"]
            and index.__class__ is int
            and before.__class__ is int
            and after.__class__ is int
            and (score is None or (score.__class__ is float and math.isfinite(score)))
            and role.__class__ is str
            and outcome.__class__ is str
            and reason.__class__ is str
            and (fidelity is None or fidelity.__class__ is str)
        ):
            return (
                f'{{"index":{index!r},"role":{_string(role)},"outcome":{_string(outcome)},'
                f'"fidelity":{"null" if fidelity is None else _string(fidelity)},'
                f'"relevance_score":{"null" if score is None else repr(score)},'
                f'"token_count_before":{before!r},"token_count_after":{after!r},"reason":{_string(reason)}}}'
            )
        return json.dumps(self._shape(), separators=(",", ":"), ensure_ascii=False)

    def _make_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "role": self.role,
            "outcome": self.outcome,
            "fidelity": self.fidelity,
            "relevance_score": self.relevance_score,
            "token_count_before": self.token_count_before,
            "token_count_after": self.token_count_after,
            "reason": self.reason,
        }
        if self.pinned:
            d["pinned"] = True
            d["pin_id"] = self.pin_id
        return d

    @classmethod
    def _of_message(
        cls,
        index: int,
        role: str,
        outcome: Outcome,
        fidelity: str | None,
        relevance_score: float | None,
        token_count_before: int,
        token_count_after: int,
        reason: str,
    ) -> MessageDecision:
        """`MessageDecision(...)` of an input message (not a pin), made without the frozen
        dataclass `__init__` (one guarded setattr per field): the builder makes one per message of
        the history at every step. The same fields, the same object."""
        d = object.__new__(cls)
        d.__dict__.update(
            index=index,
            role=role,
            outcome=outcome,
            fidelity=fidelity,
            relevance_score=relevance_score,
            token_count_before=token_count_before,
            token_count_after=token_count_after,
            reason=reason,
            pinned=False,
            pin_id=None,
        )
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MessageDecision:
        return cls(
            index=int(d["index"]),
            role=str(d["role"]),
            outcome=d["outcome"],
            fidelity=d.get("fidelity"),
            relevance_score=d.get("relevance_score"),
            token_count_before=int(d.get("token_count_before") or 0),
            token_count_after=int(d.get("token_count_after") or 0),
            reason=str(d.get("reason") or ""),
            pinned=bool(d.get("pinned", False)),
            pin_id=d.get("pin_id"),
        )


@dataclass(frozen=True)
class ContextReport:
    """Budget figures of one step. `utilization` is the one utilization figure: `total_tokens /
    window_size`, where `total_tokens` = tokens of the messages really sent (pins, summary and reply
    priming included) + tool schemas. `demand_ratio` is what strategy selection used: the same
    figure had every message been sent at L0. `tokens_by_layer` sums to `total_tokens` (reply
    priming is counted in `working`). Keys shared with Arcana's ContextReport keep Arcana's names."""

    turn: int
    step: int
    strategy_used: str
    strategy_requested: str
    strategy_note: str | None
    window_size: int
    budget: int
    total_tokens: int
    utilization: float
    demand_tokens: int
    demand_ratio: float
    identity_tokens: int
    task_tokens: int
    tools_tokens: int
    pin_tokens: int
    history_tokens: int
    summary_tokens: int
    compression_applied: bool
    compression_savings: int
    messages_compressed: int
    fidelity_distribution: dict[str, int]
    tokens_by_layer: dict[str, int]
    encoding: str
    tools_loaded: int
    pinned_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "step": self.step,
            "strategy_used": self.strategy_used,
            "strategy_requested": self.strategy_requested,
            "strategy_note": self.strategy_note,
            "total_tokens": self.total_tokens,
            "identity_tokens": self.identity_tokens,
            "task_tokens": self.task_tokens,
            "tools_tokens": self.tools_tokens,
            "history_tokens": self.history_tokens,
            "memory_tokens": 0,
            "pin_tokens": self.pin_tokens,
            "summary_tokens": self.summary_tokens,
            "compression_applied": self.compression_applied,
            "compression_savings": self.compression_savings,
            "messages_compressed": self.messages_compressed,
            "window_size": self.window_size,
            "budget": self.budget,
            "utilization": self.utilization,
            "demand_tokens": self.demand_tokens,
            "demand_ratio": self.demand_ratio,
            "tool_results_pruned": 0,
            "tool_results_tokens_saved": 0,
            "fidelity_distribution": dict(self.fidelity_distribution),
            "tokens_by_layer": dict(self.tokens_by_layer),
            "encoding": self.encoding,
            "tools_loaded": self.tools_loaded,
            "tools_available": self.tools_loaded,
            "skills_loaded": 0,
            "skills_available": 0,
            "skills_tokens": 0,
            "pinned_count": self.pinned_count,
        }


@dataclass(frozen=True)
class ContextDecision:
    """The builder's record of one step. `budget_total` = window − reserve − tools (what all messages,
    pins included, may use); `budget_used` = tokens of the messages sent (pins, summary, reply priming
    included), always `<= budget_total`. `compressed_count` = input messages not sent at L0
    (compressed, summarized or dropped)."""

    turn: int
    step: int
    strategy: str
    budget_total: int
    budget_used: int
    budget_tools: int
    budget_reserve: int
    messages_in: int
    messages_out: int
    compressed_count: int
    decisions: tuple[MessageDecision, ...]
    explanation: str
    report: ContextReport

    @property
    def history_compressed(self) -> bool:
        return self.compressed_count > 0

    def to_dict(self) -> dict[str, Any]:
        """`metadata.context_decision` of a `context_decision` trace event (docs/trace-format.md)."""
        return {
            "turn": self.turn,
            "step": self.step,
            "strategy": self.strategy,
            "budget_total": self.budget_total,
            "budget_used": self.budget_used,
            "budget_tools": self.budget_tools,
            "budget_reserve": self.budget_reserve,
            "messages_in": self.messages_in,
            "messages_out": self.messages_out,
            "compressed_count": self.compressed_count,
            "memory_injected": False,
            "history_compressed": self.history_compressed,
            "decisions": list(map(dict.copy, self.decision_shapes())),
            "skill_selections": [],
            "compressed_messages": [],
            "explanation": self.explanation,
        }

    def decision_shapes(self) -> list[dict[str, Any]]:
        """Each message decision's trace shape, shared (`to_dict()` gives copies): what
        `decision_texts()` are the texts of."""
        shapes: list[dict[str, Any]] | None = self.__dict__.get("_shapes")
        if shapes is None:
            try:  # each made already (the builder's decisions are)
                shapes = list(map(_SHAPE_OF, self.decisions))
            except AttributeError:
                shapes = [d._shape() for d in self.decisions]
            self.__dict__["_shapes"] = shapes
        return shapes

    def decision_texts(self) -> list[str]:
        """The compact JSON text of each message decision's trace shape, in order; a decision the
        builder made at an earlier step (the same fields) keeps its text."""
        try:  # each made already (the builder's decisions are)
            return list(map(_TEXT_OF, self.decisions))
        except AttributeError:  # texts remembered by their fields' values and types
            return flat_texts(self.decision_shapes())

    def _sent_compressed(self) -> int:
        """How many message decisions say "compressed" (the builder counts them while assembling)."""
        count: int | None = self.__dict__.get("_compressed_sent")
        if count is None:
            count = self.__dict__["_compressed_sent"] = sum(
                1 for d in self.decisions if d.outcome == "compressed"
            )
        return count

    def to_metadata(self) -> dict[str, Any]:
        """The whole `metadata` of a `context_decision` event except `producer`, `turn`, `step` and
        `source_agent`, which the session adds: the decision, Arcana's top-level back-compat copies
        and `context_report`."""
        return {
            "context_decision": self.to_dict(),
            "explanation": self.explanation,
            # arcana-agent 1.2.0's `show --context` prints this as "(K compressed)": count only the
            # messages sent at a lower fidelity, not the dropped or summarized ones.
            "compressed_count": self._sent_compressed(),
            "messages_in": self.messages_in,
            "messages_out": self.messages_out,
            "context_report": self.report.to_dict(),
        }


# A JSON string's text, as json.dumps(ensure_ascii=False) writes it.
_string = json.encoder.encode_basestring
# A message decision's trace shape and its text, once `_shape()` and `_text()` have made them.
_SHAPE_OF = attrgetter("_shape_dict")
_TEXT_OF = attrgetter("_shape_text")


@dataclass(frozen=True)
class WorkingSet:
    """The result of one build. `messages` go to the provider as they are, with `tools`.
    `prompt_tokens` = `count_messages(messages) + count_tools(tools)` (exact).
    `summary_call_made` is true when `summarize` was awaited (even if it failed);
    `summary_error` then says why it failed, and `summary_request` is what it was given."""

    messages: list[dict[str, Any]]
    decision: ContextDecision
    prompt_tokens: int
    summary_call_made: bool = False
    summary_error: str | None = None
    summary_request: list[dict[str, Any]] | None = None
    #: For each of `messages`: (the builder's cached info of the input message, its rung), or None
    #: for a pin or the summary; what `WorkingSetBuilder.base_tokens` reads.
    sources: tuple[tuple[Any, int] | None, ...] = field(default=(), repr=False, compare=False)
    #: For each of `messages`: a `runtime._json_text.MessageTexts` holding (once encoded) its JSON
    #: texts, kept from the step before where the builder knows the message's JSON is the same
    #: (an unchanged history message, or a message's cached render), or None; see `message_texts`.
    message_texts: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def report(self) -> ContextReport:
        return self.decision.report
