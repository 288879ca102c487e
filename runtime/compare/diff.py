"""Comparing two runs: turn alignment, the first divergence of the working sets, the step-level
working-set diff and the summary (`compare` → `Comparison`)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .data import ABSENT, LEVELS, PinData, RunData, StepData, TurnData


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

    @property
    def compared_pairs(self) -> int:
        """How many aligned pairs have a turn of both runs (only those have working sets to compare)."""
        return sum(1 for p in self.pairs if p.a is not None and p.b is not None)

    def no_divergence_text(self) -> str:
        """What to say when `divergence` is None: that the working sets agree in the turns both runs
        have, or (no turn of one lines up with a turn of the other) that nothing could be compared."""
        lengths = f" (A has {len(self.a.turns)} turns, B {len(self.b.turns)})"
        if not self.compared_pairs:
            how = "user message" if self.aligned_by == "message" else "turn number"
            return (
                f"No turn of A lines up with a turn of B by {how}{lengths}, so no working sets were compared."
            )
        same_length = len(self.a.turns) == len(self.b.turns)
        return (
            "The working sets never diverge in the turns both runs have"
            + ("" if same_length else lengths)
            + "."
        )

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


#: Durations closer than this (seconds) are the same: wall-clock noise (scheduling, a slower disk), not
#: a difference between the runs.
DURATION_TOLERANCE_SECONDS = 1.0
#: … and closer than this fraction of the longer duration.
DURATION_TOLERANCE_FRACTION = 0.1


def summary_differs(key: str, a: Any, b: Any) -> bool:
    """Whether a summary row's two values differ enough to flag: exact for counts and text; durations
    only by at least `DURATION_TOLERANCE_SECONDS` and `DURATION_TOLERANCE_FRACTION` of the longer."""
    if key == "duration_seconds" and isinstance(a, int | float) and isinstance(b, int | float):
        gap = abs(a - b)
        return gap >= DURATION_TOLERANCE_SECONDS and gap >= DURATION_TOLERANCE_FRACTION * max(a, b)
    return bool(a != b)


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
