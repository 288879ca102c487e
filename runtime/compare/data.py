"""What a comparison reads: a run as plain data (`RunData` → `TurnData` → `StepData`, `PinData`),
the fidelity levels (`LEVELS`, `level_of`) and pin keys (`pin_key`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..facts import PrimitiveOutcome

#: Fidelity levels from the most faithful to the least; a message's level is an index into this.
LEVELS: tuple[str, ...] = ("L0", "L1", "L2", "L3", "summarized", "dropped")


_L0, _L1, _L2, _L3, _SUMMARIZED, _DROPPED = range(6)


_LEVEL_CACHE: dict[tuple[Any, Any], int] = {}


def level_of(outcome: Any, fidelity: Any) -> int:
    """The level (index into `LEVELS`) of a message decision from its `outcome` and `fidelity`:
    `dropped` / `summarized` as such, else its fidelity L0–L3; `kept` with no fidelity is the original
    (L0), `compressed` with none is L1 (the same rule as the fidelity map's colours)."""
    key = (outcome, fidelity)
    level = _LEVEL_CACHE.get(key)
    if level is None:
        if outcome == "dropped":
            level = _DROPPED
        elif outcome == "summarized":
            level = _SUMMARIZED
        elif fidelity in ("L0", "L1", "L2", "L3"):
            level = LEVELS.index(str(fidelity))
        else:
            level = _L1 if outcome == "compressed" else _L0
        if len(_LEVEL_CACHE) < 1000:  # producers write few distinct pairs; bound it against odd ones
            _LEVEL_CACHE[key] = level
    return level


def pin_key(pin_id: str | None, label: str | None, content: str | None) -> str:
    """What makes two runs' pins "the same pin": their content (a short hash), else their label, else
    their id (pin ids are random per run, so they only match within one run)."""
    if content:
        return "c:" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if label:
        return "l:" + label
    return "i:" + (pin_id or "?")


@dataclass(frozen=True)
class PinData:
    """A pin of the run: `key` is `pin_key(...)`, the identity two runs share."""

    pin_id: str
    label: str | None
    content: str | None
    tokens: int | None
    created_turn: int
    until_turn: int | None = None
    unpinned_turn: int | None = None

    @property
    def key(self) -> str:
        return pin_key(self.pin_id, self.label, self.content)

    def is_active_at(self, turn: int) -> bool:
        from ..facts import pin_active_at

        return pin_active_at(self.created_turn, self.until_turn, self.unpinned_turn, turn)

    def is_active_after(self, turn: int) -> bool:
        """Still in effect once `turn` is over (`runtime.facts.pin_active_after`): a pin unpinned in that
        turn is not."""
        from ..facts import pin_active_after

        return pin_active_after(self.created_turn, self.until_turn, self.unpinned_turn, turn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pin_id": self.pin_id,
            "label": self.label,
            "tokens": self.tokens,
            "created_turn": self.created_turn,
            "until_turn": self.until_turn,
            "unpinned_turn": self.unpinned_turn,
        }


#: The character of "not in this step's history" in `StepData.levels`.
ABSENT = "."


#: History positions beyond this are not compared (a bound against hostile indexes: a level string
#: holds one character per position, and histories of ten thousand messages are not seen in practice).
MAX_INDEX = 10_000


@dataclass
class StepData:
    """One step's working set. `levels` holds one character per history position: the index into
    `LEVELS` of the level the message was sent at ("0" = L0 … "5" = dropped), or `ABSENT`; two working
    sets compare as two strings. `pins` maps the pin key of each pinned block to its pin id (in this
    run). `details` maps a position to (role, tokens sent) when loaded (files: always; the server
    loads them for the turns a diff shows)."""

    turn: int
    step: int
    levels: str = ""
    pins: dict[str, str] = field(default_factory=dict)
    utilization: float | None = None
    strategy: str | None = None
    has_decision: bool = True
    details: dict[int, tuple[str | None, int | None]] | None = None

    @classmethod
    def from_messages(
        cls, turn: int, step: int, messages: dict[int, tuple[int, str | None, int | None]], **kw: Any
    ) -> StepData:
        """A step from {position: (level, role, tokens)} (positions outside 0..MAX_INDEX are skipped)."""
        kept = {i: v for i, v in messages.items() if 0 <= i <= MAX_INDEX}
        chars = [ABSENT] * (max(kept) + 1 if kept else 0)
        for i, (level, _role, _tokens) in kept.items():
            chars[i] = str(level)
        details = {i: (role, tokens) for i, (_level, role, tokens) in kept.items()}
        return cls(turn=turn, step=step, levels="".join(chars), details=details, **kw)

    def same_working_set(self, other: StepData) -> bool:
        return (
            self.levels.rstrip(ABSENT) == other.levels.rstrip(ABSENT)
            and self.pins.keys() == other.pins.keys()
        )

    def distribution(self) -> dict[str, int]:
        out = {name: self.levels.count(str(i)) for i, name in enumerate(LEVELS)}
        out = {k: n for k, n in out.items() if n}
        if self.pins:
            out["pinned"] = len(self.pins)
        return out


@dataclass
class TurnData:
    """One turn (1-based): its user message (None when the trace does not record it), final answer,
    tokens, peak utilization, calls and its steps."""

    number: int
    user: str | None = None
    answer: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    peak_utilization: float | None = None
    tool_calls: int = 0
    errors: int = 0
    primitives: list[str] = field(default_factory=list)  # one line per call, `PrimitiveOutcome.line`
    steps: list[StepData] = field(default_factory=list)

    def decisions(self) -> str:
        """What the turn's last working set held: "8 L0 · 3 L1 · 2 dropped · 1 pinned"."""
        last = next((s for s in reversed(self.steps) if s.has_decision), None)
        if last is None:
            return "no decision"
        return " · ".join(f"{n} {name}" for name, n in last.distribution().items()) or "empty"

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.number,
            "user": self.user,
            "answer": self.answer,
            "steps": len(self.steps),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "peak_utilization": self.peak_utilization,
            "tool_calls": self.tool_calls,
            "errors": self.errors,
            "primitives": list(self.primitives),
            "decisions": self.decisions(),
        }


@dataclass
class RunData:
    """What a comparison needs of one run (one agent of a pool). Built by `run_data_from_events` for
    trace files and by the server from its projections."""

    run_id: str
    turns: list[TurnData] = field(default_factory=list)
    pins: list[PinData] = field(default_factory=list)
    status: str = "running"
    failure: str | None = None
    model: str | None = None
    producer: str | None = None
    agent: str | None = None
    duration_seconds: float | None = None
    pins_rejected: int = 0
    recalls_found: int = 0
    recalls_not_found: int = 0
    tool_calls: int = 0
    errors: int = 0
    # `level_changes()` worked out once (a long run walks every step's level string).
    changes: dict[str, int] | None = field(default=None, repr=False, compare=False)

    @property
    def steps(self) -> int:
        return sum(len(t.steps) for t in self.turns)

    def count_primitive(self, outcome: PrimitiveOutcome) -> None:
        """Count a primitive call into the run's totals: a rejected pin, a recall found or not."""
        if outcome.primitive == "pin" and not outcome.ok:
            self.pins_rejected += 1
        elif outcome.primitive == "recall":
            if outcome.ok:
                self.recalls_found += 1
            else:
                self.recalls_not_found += 1

    @property
    def final_answer(self) -> str | None:
        return next((t.answer for t in reversed(self.turns) if t.answer), None)

    def pins_active_at_end(self) -> list[PinData]:
        last = max((t.number for t in self.turns), default=0)
        return [p for p in self.pins if p.is_active_after(last)]

    def level_changes(self) -> dict[str, int]:
        """How many times a message went down to each level from one step to the next (see the module
        docstring): {"L1": n, "L2": n, "L3": n, "summarized": n, "dropped": n}. Worked out once."""
        if self.changes is not None:
            return dict(self.changes)
        counts = dict.fromkeys("012345", 0)
        previous: str | None = None
        for t in self.turns:
            for s in t.steps:
                if not s.has_decision:
                    continue
                cur = s.levels
                if previous is not None and cur != previous:
                    # Characters compare like levels ("0" < "5"); ABSENT sorts below them all.
                    for before, now in zip(previous, cur):  # noqa: B905  (histories grow)
                        if now > before and before != ABSENT:
                            counts[now] += 1
                previous = cur
        self.changes = {name: counts[str(i)] for i, name in enumerate(LEVELS) if i}
        return dict(self.changes)

    def summary(self) -> dict[str, Any]:
        changes = self.level_changes()
        utils = [t.peak_utilization for t in self.turns if t.peak_utilization is not None]
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "producer": self.producer,
            "model": self.model,
            "status": self.status,
            "failure": self.failure,
            "turns": len(self.turns),
            "steps": self.steps,
            "prompt_tokens": sum(t.prompt_tokens for t in self.turns),
            "completion_tokens": sum(t.completion_tokens for t in self.turns),
            "peak_utilization": max(utils) if utils else None,
            "compressions": {k: changes[k] for k in ("L1", "L2", "L3")},
            "drops": changes["dropped"],
            "summaries": changes["summarized"],
            "pins_made": len(self.pins),
            "pins_rejected": self.pins_rejected,
            "pins_active_at_end": len(self.pins_active_at_end()),
            "recalls_found": self.recalls_found,
            "recalls_not_found": self.recalls_not_found,
            "tool_calls": self.tool_calls,
            "errors": self.errors,
            "duration_seconds": self.duration_seconds,
            "final_answer": self.final_answer,
        }
