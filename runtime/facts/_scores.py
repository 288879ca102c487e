"""Score events (`event_type: "score"`): a score a producer gives its own run, turn or step
(`ChatSession.score`), with the one rule for their shape that the runtime and the server's ingest both
apply, and the one reading of them.

A score event is an annotation, not a part of the run: the facts of a run (its turns, steps, outcome,
start and end) leave it out (`is_annotation`), so scoring a finished run, even long after, changes none
of them. docs/trace-format.md, "Score events", is the contract."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .._trace import TraceEvent

SCORE_EVENT = "score"
#: Event types that annotate a run without being part of it.
ANNOTATION_EVENT_TYPES = frozenset({SCORE_EVENT})
SCORE_TARGETS = ("run", "turn", "step")
SCORE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
SCORE_LABEL_MAX = 200
SCORE_COMMENT_MAX = 5000


def is_annotation(ev: TraceEvent) -> bool:
    return ev.event_type in ANNOTATION_EVENT_TYPES


def _whole(n: Any) -> bool:
    return type(n) is int and n >= 1


def score_problem(score: Any, turn: Any, step: Any) -> tuple[str, str] | None:
    """(field under `metadata`, why) when a score event's `metadata.score` (and the turn and step it
    names) breaks the rule; None when it is well formed.

    >>> score_problem({"name": "helpfulness", "value": 4, "target": "turn"}, 2, None) is None
    True
    >>> score_problem({"name": "Helpful!", "value": 4}, None, None)
    ('score.name', 'a score name is 1-64 characters of a-z, 0-9 and _, starting with a letter')
    """
    if not isinstance(score, dict):
        return "score", "a score event carries metadata.score, an object"
    name = score.get("name")
    if not isinstance(name, str) or not SCORE_NAME_RE.match(name):
        return "score.name", "a score name is 1-64 characters of a-z, 0-9 and _, starting with a letter"
    value = score.get("value")
    if isinstance(value, str):
        if not value.strip() or len(value) > SCORE_LABEL_MAX:
            return "score.value", f"a category is 1-{SCORE_LABEL_MAX} characters"
    elif not (isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value))):
        return "score.value", "a number, true / false, or a category (a string)"
    comment = score.get("comment", "")
    if comment is not None and (not isinstance(comment, str) or len(comment) > SCORE_COMMENT_MAX):
        return "score.comment", f"a string of at most {SCORE_COMMENT_MAX:,} characters"
    target = score.get("target", "run")
    if target not in SCORE_TARGETS:
        return "score.target", "run, turn or step"
    if target == "run" and (turn is not None or step is not None):
        return "score.target", "a run's score names no turn or step (metadata.turn and step are null)"
    if target == "turn" and (not _whole(turn) or step is not None):
        return "turn", "a turn's score names its turn (1-based) and no step"
    if target == "step" and (not _whole(turn) or not _whole(step)):
        return "step", "a step's score names its turn and step (1-based)"
    return None


@dataclass(frozen=True)
class ScoreFact:
    """A well-formed score event, read: what it scores and how."""

    run_id: str
    event_id: str  # the event's step_id: the score's identity (the same event stored twice is one)
    name: str
    value: bool | int | float | str
    comment: str
    target: str
    turn: int | None
    step: int | None
    agent: str | None


def event_position(ev: TraceEvent) -> tuple[Any, Any]:
    """The (turn, step) a score event names: our 1-based stamps (`console_turn` / `console_step`,
    else `turn` / `step`)."""
    md = ev.metadata
    turn = md.get("console_turn", md.get("turn"))
    step = md.get("console_step", md.get("step"))
    return turn, step


def score_fact(ev: TraceEvent) -> ScoreFact | None:
    """The score a score event gives, or None for another event or a malformed score."""
    if ev.event_type != SCORE_EVENT:
        return None
    score = ev.metadata.get("score")
    turn, step = event_position(ev)
    if score_problem(score, turn, step) is not None:
        return None
    assert isinstance(score, dict)
    return ScoreFact(
        run_id=ev.run_id,
        event_id=ev.step_id,
        name=score["name"],
        value=score["value"],
        comment=score.get("comment") or "",
        target=score.get("target", "run"),
        turn=turn,
        step=step,
        agent=ev.source_agent,
    )
