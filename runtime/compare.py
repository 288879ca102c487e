"""Compare two runs at the level of the context: what each model saw, turn by turn.

One implementation for every view: `arcana trace diff` feeds it trace files (`run_data_from_events`),
the server feeds it its projections (`traces/compare.py`), and both print or render `compare(a, b)`.
Everything here works on plain data (`RunData` → `TurnData` → `StepData`), so the CLI, the API and the
page give the same answers.

    >>> from runtime.compare import compare, run_data_from_events
    >>> a = run_data_from_events("run-a", events_a)          # TraceEvents of one run (both producers)
    >>> b = run_data_from_events("run-b", events_b)
    >>> c = compare(a, b)
    >>> c.divergence.a_turn, c.divergence.step, c.divergence.reason
    (1, 2, "pins only in A: 'constraints'")
    >>> c.working_set_diff(c.divergence.pair).to_dict()      # messages kept at a higher level, pins on one side
    >>> c.to_dict()                                          # summary, aligned turns, divergence (JSON)

Rules (each stated once, here):

* **Levels.** A message decision is at one of L0 (original) … L3 (stub), `summarized` or `dropped`
  (`level_of`); a pinned block is its own row, keyed by its pin's content (pin ids are random per run,
  so two runs that pinned the same text have the same pin key, `pin_key`).
* **Messages are matched by position**: the message at history index *i* in one run is the message at
  index *i* in the other. Two runs of the same script have the same positions until their histories
  differ (a tool result one run got and the other did not shifts nothing before it).
* **Alignment.** When both runs record the user message of every turn (our runtime does; arcana-agent
  1.2 does not) and the two scripts differ, turns are aligned by matching user messages
  (`difflib.SequenceMatcher` over the texts; unmatched turns stand alone); otherwise by turn number.
* **Divergence**: the first aligned pair (in order) whose working sets differ — a step whose messages
  sit at different levels, a pinned block only one has, or a step only one has. A turn only one run
  has is not a divergence of working sets (the runs have different lengths; `only_in` says so).
* **Summary**: compressions by level count each time a message went down to L1, L2 or L3 from one step
  to the next (drops into `dropped`, summaries into `summarized`); pins made are successful `pin`
  calls, rejected ones failed `pin` calls; recalls are found or not found.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._trace import TraceEvent
from .facts import (
    build_steps,
    decision_rows,
    is_pinned_row,
    normalize_events,
    pin_lifetimes,
    pinned_blocks,
    primitive_outcome,
    run_outcome,
    step_errors,
    tool_results,
)

__all__ = [
    "ABSENT",
    "LEVELS",
    "MAX_INDEX",
    "Comparison",
    "Divergence",
    "MessageDiff",
    "PinData",
    "RunData",
    "StepData",
    "StepDiff",
    "TurnData",
    "TurnPair",
    "WorkingSetDiff",
    "compare",
    "level_of",
    "pin_key",
    "run_data_from_events",
]

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


# --------------------------------------------------------------------------------------------------
# Plain data


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
        from .facts import pin_active_at

        return pin_active_at(self.created_turn, self.until_turn, self.unpinned_turn, turn)

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

    @property
    def steps(self) -> int:
        return sum(len(t.steps) for t in self.turns)

    @property
    def final_answer(self) -> str | None:
        return next((t.answer for t in reversed(self.turns) if t.answer), None)

    def pins_active_at_end(self) -> list[PinData]:
        last = max((t.number for t in self.turns), default=0)
        return [p for p in self.pins if p.is_active_at(last)]

    def level_changes(self) -> dict[str, int]:
        """How many times a message went down to each level from one step to the next (see the module
        docstring): {"L1": n, "L2": n, "L3": n, "summarized": n, "dropped": n}."""
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
        return {name: counts[str(i)] for i, name in enumerate(LEVELS) if i}

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


# --------------------------------------------------------------------------------------------------
# The comparison


@dataclass(frozen=True)
class TurnPair:
    """Two aligned turns (either may be None: a turn only one run has). `how` is "number" or "message"."""

    index: int
    a: TurnData | None
    b: TurnData | None
    how: str
    same_working_sets: bool | None  # None when one side is missing

    @property
    def only_in(self) -> str | None:
        return "a" if self.b is None else "b" if self.a is None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "how": self.how,
            "a": self.a.to_dict() if self.a else None,
            "b": self.b.to_dict() if self.b else None,
            "only_in": self.only_in,
            "same_working_sets": self.same_working_sets,
        }


@dataclass(frozen=True)
class Divergence:
    """The first aligned pair whose working sets differ, its first differing step and why."""

    pair: int
    a_turn: int
    b_turn: int
    step: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "a_turn": self.a_turn,
            "b_turn": self.b_turn,
            "step": self.step,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class MessageDiff:
    """One message two steps hold at different levels (or only one holds): `higher` is the side that
    kept it more faithfully ("a" or "b"); a level None means the step does not have the message."""

    index: int
    role: str | None
    a_level: str | None
    b_level: str | None
    a_tokens: int | None
    b_tokens: int | None
    higher: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "role": self.role,
            "a_level": self.a_level,
            "b_level": self.b_level,
            "a_tokens": self.a_tokens,
            "b_tokens": self.b_tokens,
            "higher": self.higher,
        }


@dataclass(frozen=True)
class StepDiff:
    step: int
    in_a: bool
    in_b: bool
    messages: list[MessageDiff]
    pins_only_a: list[PinData]
    pins_only_b: list[PinData]
    same_levels: int  # messages both hold at the same level

    @property
    def higher_in_a(self) -> list[MessageDiff]:
        return [m for m in self.messages if m.higher == "a"]

    @property
    def higher_in_b(self) -> list[MessageDiff]:
        return [m for m in self.messages if m.higher == "b"]

    @property
    def same(self) -> bool:
        return self.in_a and self.in_b and not (self.messages or self.pins_only_a or self.pins_only_b)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "in_a": self.in_a,
            "in_b": self.in_b,
            "same": self.same,
            "same_levels": self.same_levels,
            "higher_in_a": [m.to_dict() for m in self.higher_in_a],
            "higher_in_b": [m.to_dict() for m in self.higher_in_b],
            "pins_only_in_a": [p.to_dict() for p in self.pins_only_a],
            "pins_only_in_b": [p.to_dict() for p in self.pins_only_b],
        }


@dataclass(frozen=True)
class WorkingSetDiff:
    """The step-level working-set diff of one aligned pair (steps matched by number)."""

    pair: int
    a_turn: int | None
    b_turn: int | None
    steps: list[StepDiff]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "a_turn": self.a_turn,
            "b_turn": self.b_turn,
            "steps": [s.to_dict() for s in self.steps],
        }


def _pin_label(p: PinData | None, key: str) -> str:
    if p is None:
        return key
    return repr(p.label) if p.label else p.pin_id


def _step_pair_reason(sa: StepData | None, sb: StepData | None, pins_a: dict[str, PinData],
                      pins_b: dict[str, PinData]) -> str | None:  # fmt: skip
    """Why two steps' working sets differ, or None when they do not."""
    if sa is None or sb is None:
        present = sa if sa is not None else sb
        return f"step {present.step if present is not None else '?'} only in {'B' if sa is None else 'A'}"
    if sa.same_working_set(sb):
        return None
    only_a = [k for k in sa.pins if k not in sb.pins]
    only_b = [k for k in sb.pins if k not in sa.pins]
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append("pins only in A: " + ", ".join(_pin_label(pins_a.get(k), k) for k in only_a))
        if only_b:
            parts.append("pins only in B: " + ", ".join(_pin_label(pins_b.get(k), k) for k in only_b))
        return "; ".join(parts)
    higher_a = higher_b = missing = 0
    la_s, lb_s = sa.levels, sb.levels
    for i in range(max(len(la_s), len(lb_s))):
        la = la_s[i] if i < len(la_s) else ABSENT
        lb = lb_s[i] if i < len(lb_s) else ABSENT
        if la == lb:
            continue
        if la == ABSENT or lb == ABSENT:
            missing += 1
        elif la < lb:
            higher_a += 1
        else:
            higher_b += 1
    parts = []
    if higher_a:
        parts.append(f"{higher_a} message{'s' if higher_a != 1 else ''} kept at a higher level in A")
    if higher_b:
        parts.append(f"{higher_b} message{'s' if higher_b != 1 else ''} kept at a higher level in B")
    if missing:
        parts.append(f"{missing} message{'s' if missing != 1 else ''} in one history only")
    return "; ".join(parts) or "working sets differ"


@dataclass
class Comparison:
    """`compare(a, b)`: both summaries, the aligned turns, the first divergence."""

    a: RunData
    b: RunData
    pairs: list[TurnPair]
    divergence: Divergence | None
    aligned_by: str  # "number" or "message"

    def pair_for(self, *, a_turn: int | None = None, b_turn: int | None = None) -> TurnPair | None:
        for p in self.pairs:
            if (a_turn is not None and p.a is not None and p.a.number == a_turn) or (
                b_turn is not None and p.b is not None and p.b.number == b_turn
            ):
                return p
        return None

    def working_set_diff(self, pair: int | TurnPair) -> WorkingSetDiff:
        """The step-level diff of one aligned pair (`pair`: its index or the pair)."""
        p = self.pairs[pair] if isinstance(pair, int) else pair
        pins_a = {x.key: x for x in self.a.pins}
        pins_b = {x.key: x for x in self.b.pins}
        steps_a = {s.step: s for s in p.a.steps} if p.a else {}
        steps_b = {s.step: s for s in p.b.steps} if p.b else {}
        out: list[StepDiff] = []
        for number in sorted(steps_a.keys() | steps_b.keys()):
            sa, sb = steps_a.get(number), steps_b.get(number)
            la_s = sa.levels if sa else ""
            lb_s = sb.levels if sb else ""
            da = (sa.details or {}) if sa else {}
            db = (sb.details or {}) if sb else {}
            diffs: list[MessageDiff] = []
            same = 0
            for index in range(max(len(la_s), len(lb_s))):
                ca = la_s[index] if index < len(la_s) else ABSENT
                cb = lb_s[index] if index < len(lb_s) else ABSENT
                if ca == cb:
                    same += ca != ABSENT
                    continue
                if sa is None or sb is None:
                    continue  # a step only one run has: nothing to compare it with
                # Absent from a history counts below dropped: the other run kept it, however faintly.
                higher = "a" if (ca if ca != ABSENT else "9") < (cb if cb != ABSENT else "9") else "b"
                va, vb = da.get(index), db.get(index)
                diffs.append(
                    MessageDiff(
                        index=index,
                        role=(va or vb or (None, None))[0],
                        a_level=LEVELS[int(ca)] if ca != ABSENT else None,
                        b_level=LEVELS[int(cb)] if cb != ABSENT else None,
                        a_tokens=va[1] if va and ca != ABSENT else None,
                        b_tokens=vb[1] if vb and cb != ABSENT else None,
                        higher=higher,
                    )
                )
            pa = sa.pins if sa else {}
            pb = sb.pins if sb else {}
            out.append(
                StepDiff(
                    step=number,
                    in_a=sa is not None,
                    in_b=sb is not None,
                    messages=diffs,
                    pins_only_a=[_pin_of(pins_a, k, pa[k]) for k in pa if k not in pb],
                    pins_only_b=[_pin_of(pins_b, k, pb[k]) for k in pb if k not in pa],
                    same_levels=same,
                )
            )
        return WorkingSetDiff(
            pair=p.index, a_turn=p.a.number if p.a else None, b_turn=p.b.number if p.b else None, steps=out
        )

    def summary_rows(self) -> list[tuple[str, str, Any, Any]]:
        """(key, label, A, B) for the side-by-side summary, in display order."""
        sa, sb = self.a.summary(), self.b.summary()
        rows: list[tuple[str, str, Any, Any]] = []
        for key, label in SUMMARY_LABELS:
            if key.startswith("compressions."):
                level = key.split(".", 1)[1]
                rows.append((key, label, sa["compressions"][level], sb["compressions"][level]))
            else:
                rows.append((key, label, sa[key], sb[key]))
        return rows

    def to_dict(self, *, turn: int | None = None) -> dict[str, Any]:
        """The comparison as JSON: summaries, aligned turns, divergence, and the working-set diff of
        the pair holding A's turn `turn` (default: the divergence's pair; none when they never diverge)."""
        pair: TurnPair | None = None
        if turn is not None:
            pair = self.pair_for(a_turn=turn) or self.pair_for(b_turn=turn)
        elif self.divergence is not None:
            pair = self.pairs[self.divergence.pair]
        return {
            "a": self.a.summary(),
            "b": self.b.summary(),
            "aligned_by": self.aligned_by,
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "turns": [p.to_dict() for p in self.pairs],
            "working_set_diff": self.working_set_diff(pair).to_dict() if pair is not None else None,
        }


def _pin_of(pins: dict[str, PinData], key: str, pin_id: str) -> PinData:
    return pins.get(key) or PinData(pin_id=pin_id, label=None, content=None, tokens=None, created_turn=0)


#: The summary's rows: (key of `RunData.summary()`, label). `compressions.L1` reads the nested counts.
SUMMARY_LABELS: tuple[tuple[str, str], ...] = (
    ("status", "Status"),
    ("model", "Model"),
    ("turns", "Turns"),
    ("steps", "Steps"),
    ("prompt_tokens", "Prompt tokens"),
    ("completion_tokens", "Completion tokens"),
    ("peak_utilization", "Peak context"),
    ("compressions.L1", "Compressions to L1"),
    ("compressions.L2", "Compressions to L2"),
    ("compressions.L3", "Compressions to L3"),
    ("drops", "Drops"),
    ("summaries", "Summaries"),
    ("pins_made", "Pins made"),
    ("pins_rejected", "Pins rejected"),
    ("pins_active_at_end", "Pins active at the end"),
    ("recalls_found", "Recalls found"),
    ("recalls_not_found", "Recalls not found"),
    ("tool_calls", "Tool calls"),
    ("errors", "Errors"),
    ("duration_seconds", "Duration (s)"),
    ("final_answer", "Final answer"),
)


def _align(
    a: Sequence[TurnData], b: Sequence[TurnData]
) -> tuple[list[tuple[TurnData | None, TurnData | None]], str]:
    users_a = [t.user for t in a]
    users_b = [t.user for t in b]
    recorded = all(u is not None for u in users_a + users_b) and a and b
    if not recorded or users_a == users_b:
        by_a = {t.number: t for t in a}
        by_b = {t.number: t for t in b}
        return [(by_a.get(n), by_b.get(n)) for n in sorted(by_a.keys() | by_b.keys())], "number"
    out: list[tuple[TurnData | None, TurnData | None]] = []
    matcher = difflib.SequenceMatcher(a=users_a, b=users_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(zip(a[i1:i2], b[j1:j2], strict=True))
        else:
            # Unmatched turns stand alone, A's first: a changed message is two different turns.
            out.extend((t, None) for t in a[i1:i2])
            out.extend((None, t) for t in b[j1:j2])
    return out, "message"


def compare(a: RunData, b: RunData) -> Comparison:
    """Align the two runs' turns, find the first divergence of their working sets (module docstring)."""
    aligned, how = _align(a.turns, b.turns)
    pins_a = {p.key: p for p in a.pins}
    pins_b = {p.key: p for p in b.pins}
    pairs: list[TurnPair] = []
    divergence: Divergence | None = None
    for i, (ta, tb) in enumerate(aligned):
        same: bool | None = None
        if ta is not None and tb is not None:
            steps_a = {s.step: s for s in ta.steps}
            steps_b = {s.step: s for s in tb.steps}
            same = True
            for number in sorted(steps_a.keys() | steps_b.keys()):
                sa, sb = steps_a.get(number), steps_b.get(number)
                if sa is not None and sb is not None and sa.same_working_set(sb):
                    continue
                same = False
                if divergence is None:  # why: worked out for the first divergence only
                    reason = _step_pair_reason(sa, sb, pins_a, pins_b) or "working sets differ"
                    divergence = Divergence(i, ta.number, tb.number, number, reason)
                break
        pairs.append(TurnPair(i, ta, tb, how, same))
    return Comparison(a=a, b=b, pairs=pairs, divergence=divergence, aligned_by=how)


# --------------------------------------------------------------------------------------------------
# From trace events (both producers)


def _usage(value: Any) -> tuple[int, int]:
    u = value if isinstance(value, dict) else {}
    p, c = u.get("prompt_tokens"), u.get("completion_tokens")
    return (p if type(p) is int else 0), (c if type(c) is int else 0)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def run_data_from_events(run_id: str, events: Iterable[TraceEvent], agent: str | None = None) -> RunData:
    """A `RunData` from a run's trace events (ours or arcana-agent 1.2's), read with `runtime.facts`.
    `agent`: the pool agent to compare (default: the first agent, or the plain chat)."""
    evs = list(events)
    norm = normalize_events(evs)
    all_turns = build_steps(norm)
    agents = [t.agent for t in all_turns]
    if agent is None and agents:
        agent = agents[0]
    turns_v = [t for t in all_turns if t.agent == agent]
    lifetimes = pin_lifetimes(turns_v)
    pins = [
        PinData(p.pin_id, p.label, p.content, p.tokens, p.created_turn, p.until_turn, p.unpinned_turn)
        for p in lifetimes
    ]
    key_of = {p.pin_id: p.key for p in pins}
    outcome = run_outcome(all_turns, evs)
    data = RunData(
        run_id=run_id,
        pins=pins,
        status=outcome.status,
        failure=outcome.reason,
        agent=agent,
        producer="arcana-console" if any(ev.is_ours for ev in evs) else "arcana-1.2",
    )
    stamps = [ev.timestamp_dt for ev in evs]
    if stamps:
        data.duration_seconds = (max(stamps) - min(stamps)).total_seconds()
    for tv in turns_v:
        td = TurnData(number=tv.turn)
        for sv in tv.steps:
            te = sv.turn_event
            md = te.metadata if te is not None else {}
            raw_facts = md.get("facts")
            facts: dict[str, Any] = raw_facts if isinstance(raw_facts, dict) else {}
            p, c = _usage(facts.get("usage"))
            if not facts.get("usage"):
                for ev in sv.llm_calls:
                    if ev.is_ours and ev.metadata.get("purpose") != "summarize":
                        dp, dc = _usage(ev.metadata.get("usage"))
                        p, c = p + dp, c + dc
            td.prompt_tokens += p
            td.completion_tokens += c
            if data.model is None and te is not None and te.model:
                data.model = te.model
            messages = md.get("messages")
            if td.user is None and isinstance(messages, list):
                td.user = next(
                    (m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"
                     and isinstance(m.get("content"), str)),
                    None,
                )  # fmt: skip
            text = facts.get("assistant_text")
            if isinstance(text, str) and text:
                td.answer = text
            results = tool_results(sv)
            td.tool_calls += len(results)
            td.errors += len(step_errors(sv))
            for ev in sv.primitive_calls:
                emd = ev.metadata
                o = primitive_outcome(emd.get("primitive"), emd.get("args"), emd.get("result"))
                td.primitives.append(o.line)
                if o.primitive == "pin" and not o.ok:
                    data.pins_rejected += 1
                elif o.primitive == "recall":
                    if o.ok:
                        data.recalls_found += 1
                    else:
                        data.recalls_not_found += 1
            td.steps.append(_step_from_view(sv, lifetimes, key_of))
            util = td.steps[-1].utilization
            if util is not None and (td.peak_utilization is None or util > td.peak_utilization):
                td.peak_utilization = util
        data.tool_calls += td.tool_calls
        data.errors += td.errors
        data.turns.append(td)
    return data


def _step_from_view(sv: Any, lifetimes: Any, key_of: dict[str, str]) -> StepData:
    cd = sv.context_decision
    if cd is None:
        return StepData(turn=sv.turn, step=sv.step, has_decision=False)
    md = cd.metadata
    report = md.get("context_report") if isinstance(md.get("context_report"), dict) else {}
    decision = md.get("context_decision") if isinstance(md.get("context_decision"), dict) else {}
    strategy = decision.get("strategy")
    rows = decision_rows(cd)
    snapshot = sv.prompt_snapshot.metadata.get("prompt_snapshot") if sv.prompt_snapshot else None
    blocks = iter(
        pinned_blocks(
            rows,
            lifetimes,
            sv.turn,
            arcana=not cd.is_ours,
            snapshot_messages=snapshot.get("messages") if isinstance(snapshot, dict) else None,
        )
    )
    pins: dict[str, str] = {}
    messages: dict[int, tuple[int, str | None, int | None]] = {}
    for row in rows:
        if is_pinned_row(row):
            block = next(blocks, None)
            pid = block.pin_id if block is not None else None
            pins[key_of.get(pid or "") or pin_key(pid, None, None)] = pid or "?"
            continue
        index = row.get("index")
        if type(index) is not int:
            continue
        tokens = row.get("token_count_after")
        role = row.get("role")
        messages[index] = (
            level_of(row.get("outcome"), row.get("fidelity")),
            role if isinstance(role, str) else None,
            tokens if type(tokens) is int else None,
        )
    return StepData.from_messages(
        sv.turn,
        sv.step,
        messages,
        pins=pins,
        utilization=_num(report.get("utilization")),
        strategy=strategy if isinstance(strategy, str) else None,
    )
