"""What a reconstruction leaves behind: per call, one `MessageState` per message of its agent's
history; the compactions; the lost instructions. Each has `to_dict()` (JSON-ready), and a call's
states read in the runtime's own decision vocabulary with `CallReconstruction.to_context_decision()`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CLASSES",
    "CallReconstruction",
    "Compaction",
    "LostInstruction",
    "MessageClass",
    "MessageInfo",
    "MessageState",
    "Reconstruction",
    "level_for_ratio",
]

MessageClass = Literal["kept", "shortened", "summarized", "dropped", "restored", "new", "summary"]

#: Every class a message can have at a call, in the order the docs list them.
CLASSES: tuple[str, ...] = ("kept", "shortened", "summarized", "dropped", "restored", "new", "summary")

#: The runtime's outcome for each class (docs/guide/reconstruction.md, "In the recorded vocabulary").
_OUTCOME: dict[str, str] = {
    "kept": "kept",
    "restored": "kept",
    "new": "kept",
    "summary": "kept",
    "shortened": "compressed",
    "summarized": "summarized",
    "dropped": "dropped",
}


def level_for_ratio(ratio: float, *, stub: bool = False) -> str:
    """The fidelity level a shortened message is reported at: L3 when it is a stub (it keeps none of
    the original's content: it was matched by its place alone), L1 when it kept at least half of its
    tokens, L2 below that.

    >>> level_for_ratio(0.8), level_for_ratio(0.1), level_for_ratio(0.1, stub=True)
    ('L1', 'L2', 'L3')
    """
    if stub:
        return "L3"
    return "L1" if ratio >= 0.5 else "L2"


@dataclass(frozen=True)
class MessageInfo:
    """One message of an agent's history (an original: its shortened forms are states of it)."""

    message_id: str
    agent: str | None
    history_index: int
    role: str
    kind: str  # "text", "tool_call", "tool_result", "empty"
    origin: str  # "input", "instructions", "output" (of the agent's previous call), "summary"
    first_call_id: str
    digest: str
    tokens: int
    text: str

    def to_dict(self, *, text_chars: int | None = 200) -> dict[str, Any]:
        """`text` cut to `text_chars` characters (None: whole)."""
        text = (
            self.text if text_chars is None or len(self.text) <= text_chars else self.text[:text_chars] + "…"
        )
        return {
            "message_id": self.message_id,
            "agent": self.agent,
            "history_index": self.history_index,
            "role": self.role,
            "kind": self.kind,
            "origin": self.origin,
            "first_call_id": self.first_call_id,
            "digest": self.digest,
            "tokens": self.tokens,
            "text": text,
        }


@dataclass(frozen=True)
class MessageState:
    """One message of the history at one call: where it is (`position` in the call's input, None
    when absent; the system instructions, when the call has them, are position 0), its class, its
    tokens as original (`tokens_before`) and as sent (`tokens_after`, 0 when absent), and for a
    shortened one its `ratio` (tokens after / before) and `level`. A summarized message names the
    summary standing for it (`summary_id`); a summary names what it stands for (`summarizes`) and the
    call whose answer it is (`summarizer_call_id`), when known."""

    message_id: str
    history_index: int
    position: int | None
    role: str
    status: MessageClass
    level: str | None
    tokens_before: int
    tokens_after: int
    reason: str
    ratio: float | None = None
    digest: str = ""
    summary_id: str | None = None
    summarizes: tuple[str, ...] = ()
    summarizer_call_id: str | None = None

    @classmethod
    def _make(
        cls,
        message_id: str,
        history_index: int,
        position: int | None,
        role: str,
        status: str,
        level: str | None,
        tokens_before: int,
        tokens_after: int,
        reason: str,
        ratio: float | None,
        digest: str,
        summary_id: str | None,
        summarizes: tuple[str, ...],
        summarizer_call_id: str | None,
    ) -> MessageState:
        """`MessageState(...)` made without the frozen dataclass `__init__` (one guarded setattr per
        field): a reconstruction makes one per message of the history at every call."""
        s = object.__new__(cls)
        s.__dict__.update(
            message_id=message_id,
            history_index=history_index,
            position=position,
            role=role,
            status=status,
            level=level,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            reason=reason,
            ratio=ratio,
            digest=digest,
            summary_id=summary_id,
            summarizes=summarizes,
            summarizer_call_id=summarizer_call_id,
        )
        return s

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "message_id": self.message_id,
            "history_index": self.history_index,
            "position": self.position,
            "role": self.role,
            "status": self.status,
            "level": self.level,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "ratio": self.ratio,
            "reason": self.reason,
            "digest": self.digest,
        }
        if self.summary_id is not None:
            d["summary_id"] = self.summary_id
        if self.summarizes:
            d["summarizes"] = list(self.summarizes)
        if self.summarizer_call_id is not None:
            d["summarizer_call_id"] = self.summarizer_call_id
        return d

    def to_decision(self) -> dict[str, Any]:
        """This state as a recorded `MessageDecision` shape (docs/trace-format.md) plus `origin`
        "reconstructed" and the reconstruction's own fields (`status`, `message_id`, `position`,
        `ratio`, the summary links). `index` is the history index, as the runtime's."""
        d: dict[str, Any] = {
            "index": self.history_index,
            "role": self.role,
            "outcome": _OUTCOME[self.status],
            "fidelity": self.level,
            "relevance_score": None,
            "token_count_before": self.tokens_before,
            "token_count_after": self.tokens_after,
            "reason": f"reconstructed_{self.reason}",
            "origin": "reconstructed",
            "status": self.status,
            "message_id": self.message_id,
            "position": self.position,
            "ratio": self.ratio,
        }
        if self.summary_id is not None:
            d["summary_id"] = self.summary_id
        if self.summarizes:
            d["summarizes"] = list(self.summarizes)
        if self.summarizer_call_id is not None:
            d["summarizer_call_id"] = self.summarizer_call_id
        return d


@dataclass(frozen=True)
class Compaction:
    """A call whose context lost or condensed content its agent's previous call had: messages newly
    dropped, shortened or summarized, or a changed system prompt.

    Figures, as far as the spans show them: `tokens_before` / `tokens_after` are the input tokens of
    the previous call and of this one (reported by the span, else our count: `estimated` says which);
    `demand_tokens` what this call would have needed had nothing been lost (`tokens_after` + the
    original tokens of what was removed − the summary's tokens), `demand_ratio` that against the
    model's `context_window` when known. `trigger`: "context_window" when the demand reached 75% of
    the window, "system_prompt" when the only change is the system prompt, else "unknown" (a
    message-count or turn-count rule leaves no figure to read it from)."""

    call_id: str
    position: int
    agent: str | None
    previous_call_id: str
    dropped: tuple[str, ...]
    shortened: tuple[str, ...]
    summarized: tuple[str, ...]
    summary_id: str | None
    summarizer_call_id: str | None
    system_prompt_changed: bool
    tokens_before: int
    tokens_after: int
    estimated: bool
    removed_tokens: int
    summary_tokens: int
    demand_tokens: int
    context_window: int | None
    demand_ratio: float | None
    trigger: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "position": self.position,
            "agent": self.agent,
            "previous_call_id": self.previous_call_id,
            "dropped": list(self.dropped),
            "shortened": list(self.shortened),
            "summarized": list(self.summarized),
            "summary_id": self.summary_id,
            "summarizer_call_id": self.summarizer_call_id,
            "system_prompt_changed": self.system_prompt_changed,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "estimated": self.estimated,
            "removed_tokens": self.removed_tokens,
            "summary_tokens": self.summary_tokens,
            "demand_tokens": self.demand_tokens,
            "context_window": self.context_window,
            "demand_ratio": self.demand_ratio,
            "trigger": self.trigger,
        }


@dataclass(frozen=True)
class LostInstruction:
    """A sentence stating a constraint or a fact (`why`: which rules of the heuristic it met) that
    the agent's context held and, from `first_missing_call_id` to the end of the run, no longer held
    verbatim or close to it. `compaction_call_id` is that call when it was a compaction."""

    text: str
    source: str  # "system_prompt" or "user"
    message_id: str
    agent: str | None
    why: tuple[str, ...]
    first_seen_call_id: str
    last_seen_call_id: str
    first_missing_call_id: str
    compaction_call_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "source": self.source,
            "message_id": self.message_id,
            "agent": self.agent,
            "why": list(self.why),
            "first_seen_call_id": self.first_seen_call_id,
            "last_seen_call_id": self.last_seen_call_id,
            "first_missing_call_id": self.first_missing_call_id,
            "compaction_call_id": self.compaction_call_id,
        }


@dataclass(frozen=True)
class CallReconstruction:
    """One model call: `kind` "turn" (a call of its agent's conversation) or "summarizer" (a side
    call whose answer became a summary in `summary_for_call_id`; it has no states). `states` hold one
    entry per message of the agent's history up to this call, in history order."""

    call_id: str
    position: int
    agent: str | None
    kind: Literal["turn", "summarizer"]
    previous_call_id: str | None
    states: tuple[MessageState, ...]
    input_tokens: int | None
    estimated_input_tokens: int
    context_window: int | None
    messages_in: int
    compaction: Compaction | None = None
    summary_for_call_id: str | None = None
    _counts: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def counts(self) -> dict[str, int]:
        """How many states of each class (every class present, zeros included)."""
        if not self._counts:
            c: Counter[str] = Counter(s.status for s in self.states)
            self._counts.update({k: c.get(k, 0) for k in CLASSES})
        return dict(self._counts)

    def present(self) -> list[MessageState]:
        """The states of the messages this call received, in input order."""
        return sorted((s for s in self.states if s.position is not None), key=_position)

    def to_context_decision(self) -> dict[str, Any]:
        """This call in the shape of a recorded `context_decision` (docs/trace-format.md), marked
        `origin` "reconstructed": one decision per message of the history (`to_decision()`)."""
        decisions = [s.to_decision() for s in self.states]
        not_l0 = sum(1 for d in decisions if d["outcome"] != "kept" or d["fidelity"] != "L0")
        return {
            "origin": "reconstructed",
            "call_id": self.call_id,
            "agent": self.agent,
            "strategy": "reconstructed",
            "messages_in": len(decisions),
            "messages_out": self.messages_in,
            "compressed_count": not_l0,
            "history_compressed": not_l0 > 0,
            "input_tokens": self.input_tokens,
            "estimated_input_tokens": self.estimated_input_tokens,
            "context_window": self.context_window,
            "compaction": self.compaction is not None,
            "decisions": decisions,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "position": self.position,
            "agent": self.agent,
            "kind": self.kind,
            "previous_call_id": self.previous_call_id,
            "summary_for_call_id": self.summary_for_call_id,
            "input_tokens": self.input_tokens,
            "estimated_input_tokens": self.estimated_input_tokens,
            "context_window": self.context_window,
            "messages_in": self.messages_in,
            "counts": self.counts(),
            "compaction": self.compaction.to_dict() if self.compaction else None,
            "states": [s.to_dict() for s in self.states],
        }


def _position(s: MessageState) -> int:
    return s.position if s.position is not None else -1


@dataclass(frozen=True)
class Reconstruction:
    """The context decisions of a run, reconstructed from the messages each model call received."""

    calls: tuple[CallReconstruction, ...]
    messages: tuple[MessageInfo, ...]
    compactions: tuple[Compaction, ...]
    lost_instructions: tuple[LostInstruction, ...]

    @property
    def had_compaction(self) -> bool:
        return bool(self.compactions)

    @property
    def lost_an_instruction(self) -> bool:
        return bool(self.lost_instructions)

    def call(self, call_id: str) -> CallReconstruction:
        """The call with this id (KeyError if none)."""
        index: dict[str, CallReconstruction] | None = self.__dict__.get("_by_id")
        if index is None:
            index = self.__dict__["_by_id"] = {c.call_id: c for c in self.calls}
        return index[call_id]

    def message(self, message_id: str) -> MessageInfo:
        """The message with this id (KeyError if none)."""
        index: dict[str, MessageInfo] | None = self.__dict__.get("_msg_by_id")
        if index is None:
            index = self.__dict__["_msg_by_id"] = {m.message_id: m for m in self.messages}
        return index[message_id]

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": "reconstructed",
            "had_compaction": self.had_compaction,
            "lost_an_instruction": self.lost_an_instruction,
            "calls": [c.to_dict() for c in self.calls],
            "messages": [m.to_dict() for m in self.messages],
            "compactions": [c.to_dict() for c in self.compactions],
            "lost_instructions": [li.to_dict() for li in self.lost_instructions],
        }
