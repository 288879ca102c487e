"""Per-message bookkeeping of one build: message text and keywords for relevance, the fidelity
ladder's inputs (`MessageInfo`), the mutable `Slot` of each input message, and tool-call units."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._json_text import MessageTexts
from .config import message_text
from .records import Outcome

_WORD = re.compile(r"[a-zA-Z_]\w{2,}")
ALARM = re.compile(r"error|failed|recovery|exception", re.IGNORECASE)
BASE_SCORE = {"tool": 0.5, "assistant": 0.3, "user": 0.2}


# Words too common to say two messages are about the same thing.
_STOPWORDS = frozenset(
    "the and for you are was were with that this have has had not but all any can from they them their "
    "there what when where which who will would should could about into than then also just like some "
    "our your its his her she him how why yes please thanks thank been being does did done".split()
)


@functools.lru_cache(maxsize=32_768)
def keywords_of(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower())) - _STOPWORDS


def scoring_text(msg: Mapping[str, Any]) -> str:
    text = message_text(msg)
    calls = msg.get("tool_calls")
    if calls:
        bits = [text]
        for tc in calls:
            fn = tc.get("function") if isinstance(tc, Mapping) else None
            if isinstance(fn, Mapping):
                bits.append(f"{fn.get('name') or ''} {fn.get('arguments') or ''}")
        text = " ".join(bits)
    return text


Rung = tuple[str, dict[str, Any] | None, int]


class MessageInfo:
    """What the builder knows about one message that does not change from step to step: its L0
    count, its fidelity ladder (levels rendered so far, strictly decreasing in tokens; extended
    lazily, only as far as grading and demotion need) and its scoring keywords. Cached by the
    builder, so a steady-state step neither re-renders nor re-counts old messages."""

    __slots__ = (
        "msg",
        "turn",
        "rungs",
        "probe",
        "keywords",
        "alarm",
        "base_counts",
        "relevance",
        "rung_for",
        "rung_texts",
        "sources",
    )

    def __init__(self, msg: Mapping[str, Any], turn: int, l0: int) -> None:
        self.msg = msg
        self.turn = turn
        self.rungs: list[Rung] = [("L0", None, l0)]
        self.probe = 1  # index in LEVELS of the next level to try
        self.keywords: frozenset[str] | None = None
        self.alarm = False
        # (a plain counter, {rung: its count of the rung's message}): see `base_tokens`.
        self.base_counts: tuple[Any, dict[int, int]] | None = None
        # (goal, role, score before the position term) last worked out: see the builder's `_relevance`.
        self.relevance: tuple[frozenset[str], str, float] | None = None
        # The rung graded to for each target level (index in LEVELS), once found.
        self.rung_for: dict[int, int] = {}
        # The JSON texts of each lower rung's render (made only of strings and None), once asked for.
        self.rung_texts: dict[int, MessageTexts | None] = {}
        # (this info, rung) for each rung: what a sent message's `WorkingSet.sources` entry is.
        self.sources: list[tuple[MessageInfo, int]] = [(self, 0)]


class Slot:
    """Builder-internal state of one input message in one build."""

    __slots__ = (
        "index",
        "msg",
        "role",
        "turn",
        "l0",
        "info",
        "region",
        "unit",
        "score",
        "rung",
        "outcome",
        "reason",
    )

    def __init__(
        self, index: int, msg: Mapping[str, Any], info: MessageInfo, role: str | None = None
    ) -> None:
        self.index = index
        self.msg = msg
        self.role = str(msg.get("role") or "") if role is None else role
        self.turn = info.turn
        self.l0 = info.rungs[0][2]
        self.info = info
        self.region = "middle"
        self.unit = -1
        self.score: float | None = None
        self.rung = 0  # position in info.rungs currently used
        self.outcome: Outcome = "kept"
        self.reason = ""

    @property
    def level(self) -> str:
        return self.info.rungs[self.rung][0]

    @property
    def sent(self) -> bool:
        return self.outcome in ("kept", "compressed")

    @property
    def tokens(self) -> int:
        """Tokens of this message at its current level."""
        return self.info.rungs[self.rung][2]


def find_units(
    history: Sequence[Mapping[str, Any]], start: int, *, resume: int | None = None
) -> list[list[int]]:
    """Partition `history[start:]` into units: an assistant message with `tool_calls` together with
    the tool messages right after it that answer those calls; every other message alone. Units
    before `start` (identity) are singletons. With `resume` (the first message of a unit), only the
    units from there on."""
    units: list[list[int]] = [[i] for i in range(start)] if resume is None else []
    n = len(history)
    i = start if resume is None else resume
    while i < n:
        m = history[i]
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if calls:
            ids = {tc.get("id") for tc in calls if isinstance(tc, Mapping)}
            j = i + 1
            while j < n and history[j].get("role") == "tool" and history[j].get("tool_call_id") in ids:
                j += 1
            units.append(list(range(i, j)))
            i = j
        else:
            units.append([i])
            i += 1
    return units


def is_plain(value: Any) -> bool:
    """Whether `value` is made only of dicts (string keys), lists, strings and None, all of exactly
    those types: then a deep copy of it equals it exactly when the two have the same fields."""
    cls = value.__class__
    if cls is str or value is None:
        return True
    if cls is dict:
        for k, v in value.items():
            if k.__class__ is not str:
                return False
            if v is not None and v.__class__ is not str and not is_plain(v):
                return False
        return True
    if cls is list:
        return all(is_plain(v) for v in value)
    return False


def _copy(value: Any) -> Any:
    """A deep copy of a value for which `is_plain` holds."""
    cls = value.__class__
    if cls is dict:
        return {k: _copy(v) for k, v in value.items()}
    if cls is list:
        return [_copy(v) for v in value]
    return value
