"""Stage 2, validate: `check_*`, untrusted decoded events checked before anything is written.

Every source (`POST /api/v1/ingest`, uploads, `import_traces`, the worker's sink) goes through
`check_events`. Each item is checked on its own; a bad one becomes a `rejected` `EventResult` with its
index, the field to blame and a message, and the valid items of the same batch are still written.

The rules (docs/guide/ingestion.md, "Limits and rules"), beyond the envelope of `TraceEvent.from_dict`
(which also holds the id rule: `run_id` / `step_id` 1–200 characters, no `/`, no control character):

- nesting: objects and arrays at most `MAX_DEPTH` levels deep (a deeper body is refused while parsing);
- strings, object keys included, anywhere: no NUL (PostgreSQL cannot store it) and no lone surrogate
  (it is not Unicode: it cannot be encoded to UTF-8);
- numbers anywhere: finite (no NaN / Infinity, which Python's json accepts) and integers within
  ±(2**53 − 1), the range every JSON reader keeps exactly;
- `timestamp`: inside what the database and every page can hold once converted to UTC
  (`MIN_TIMESTAMP` … `MAX_TIMESTAMP`);
- columns: `event_type` at most 100 characters, `parent_step_id` and `metadata.source_agent` (a
  string) at most 200; `metadata.turn` / `metadata.step` (when integers) 0 … `MAX_TURN`;
  `llm_latency_ms` 0 … 2**31 − 1;
- a `score` event: its `metadata.score` as `runtime.facts.score_problem` has it (a name, a value, a
  comment, a target and the turn and step that target needs; docs/trace-format.md, "Score events").

The nesting, string and number rules are checked by a walk over every decoded value, unless the body
of `POST /api/v1/ingest` proved them from its text at once when it was decoded (stage 1,
`traces.ingest.decoding`: a `BodyTexts`); on any doubt the walk runs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runtime import TraceEvent
from runtime.errors import ErrorDetail, TraceFormatError, error_detail
from runtime.facts import SCORE_EVENT, event_position, score_problem
from traces.ingest.decoding import MAX_DEPTH, BodyTexts, Undecodable

Status = Literal["accepted", "duplicate", "rejected"]
Source = Literal["api", "upload", "cli", "worker", "rebuild", "otlp"]

#: Largest integer magnitude anywhere in an event: 2**53 − 1, what JavaScript and most JSON readers keep
#: exactly. Beyond it a page would show another number than the one stored.
MAX_SAFE_INT = 2**53 - 1
#: Largest `metadata.turn` / `metadata.step`: a turn number is a 32-bit column and a path segment.
MAX_TURN = 1_000_000_000
MAX_INT32 = 2**31 - 1
#: Event timestamps stored and shown: a day inside the years 1–9999 at each end, so the time is a valid
#: date once converted to UTC and in every time zone a page may show it in.
MIN_TIMESTAMP = datetime(1, 1, 2, tzinfo=UTC)
MAX_TIMESTAMP = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
#: Column widths of `Event` that the envelope check does not bound.
MAX_EVENT_TYPE = 100
MAX_NAME = 200

_SURROGATE = re.compile("[\ud800-\udfff]")


# Not frozen (nor `CheckedEvent`): a frozen dataclass's __init__ sets each field through
# `object.__setattr__`, three times the cost, and both are made once per event of every batch.
@dataclass(slots=True)
class EventResult:
    """The fate of one input item. `index` is 0-based in the batch (a file line for JSONL callers);
    a rejected item says why (`error`) and, when one value is to blame, where (`field`, a dotted path)."""

    index: int
    status: Status
    error: str | None = None
    field: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        if self.field is not None:
            out["field"] = self.field
        return out

    def detail(self, *, line: int | None = None) -> ErrorDetail:
        """This rejection as an item of the one error shape (by `line` for files, else by index)."""
        if line is not None:
            return error_detail(self.error or "rejected", line=line, field=self.field)
        return error_detail(self.error or "rejected", index=self.index, field=self.field)


@dataclass(slots=True)
class CheckedEvent:
    """A validated event with its raw JSON text, ready for `do_ingest`."""

    index: int
    event: TraceEvent
    raw: str


# --------------------------------------------------------------------------------------------------
# check_*


def check_event(data: Any, *, index: int | None = None) -> TraceEvent:
    """Validate one untrusted decoded JSON value as a trace event. Raises `TraceFormatError` (with
    `field` set when one value is to blame). See the module docstring for the rules."""
    if data.__class__ is Undecodable:
        raise TraceFormatError(data.reason, line=index)
    parsed = data.__class__ is TraceEvent  # parsed while its body was decoded (`_event_of`)
    if parsed:
        data = data.to_dict()  # walked as the object it was read from, then its ranges checked
    if isinstance(data, dict):
        # Before the envelope: `from_dict` must never see a NaN (int(nan) raises) or a NUL.
        problem = _scan(data, 1)
        if problem is not None:
            path, message = problem
            where = _field(path)
            raise TraceFormatError(
                f"'{where}' {message}" if where else message, line=index, field=where or None
            )
    return _check_envelope(data, index)


def value_problem(value: Any) -> tuple[str, str] | None:
    """The first part of a decoded JSON value that breaks the nesting, string or number rules above,
    as `(field, message)` (`field`: its path such as `script[2].content`, "" for `value` itself); None
    when there is none. The request decoder of every other endpoint applies these rules with it
    (`traces.core.jsonbody`)."""
    if not isinstance(value, dict | list):
        message = _scalar_problem(value)
        return None if message is None else ("", message)
    problem = _scan(value, 1)
    if problem is None:
        return None
    path, message = problem
    return _field(path), message


def _check_envelope(data: Any, index: int | None) -> TraceEvent:
    """`check_event` after the walk over every value (or for a value whose JSON text proved that the
    walk finds nothing: `_plain_body`)."""
    return _check_ranges(TraceEvent.from_dict(data, line=index), index)


def _check_ranges(ev: TraceEvent, index: int | None) -> TraceEvent:
    """The rules beyond the envelope's (`from_dict`'s): what the columns and pages can hold."""
    ts = ev.timestamp_dt
    # Aware datetimes compare as instants: the same verdict as comparing `ts.astimezone(UTC)`, which
    # cannot be computed (OverflowError) exactly when the instant is outside years 1–9999.
    if not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
        raise TraceFormatError(
            f"'timestamp' {_show(ev.timestamp)} is outside the range stored "
            f"({MIN_TIMESTAMP.date().isoformat()} to {MAX_TIMESTAMP.date().isoformat()} once converted to UTC)",
            line=index,
            field="timestamp",
        )
    if len(ev.event_type) > MAX_EVENT_TYPE:
        _too_long("event_type", ev.event_type, MAX_EVENT_TYPE, index)
    if ev.parent_step_id is not None and len(ev.parent_step_id) > MAX_NAME:
        _too_long("parent_step_id", ev.parent_step_id, MAX_NAME, index)
    md = ev.metadata
    agent = md.get("source_agent")
    if agent is not None:
        if not isinstance(agent, str):
            raise TraceFormatError(
                "'metadata.source_agent' must be a string or null", line=index, field="metadata.source_agent"
            )
        if len(agent) > MAX_NAME:
            _too_long("metadata.source_agent", agent, MAX_NAME, index)
    for key in _NUMBER_KEYS:
        n = md.get(key)
        if type(n) is int and not 0 <= n <= MAX_TURN:
            raise TraceFormatError(
                f"'metadata.{key}' is {n}; a {key} number must be between 0 and {MAX_TURN:,}",
                line=index,
                field=f"metadata.{key}",
            )
    if ev.event_type == SCORE_EVENT:
        problem = score_problem(md.get("score"), *event_position(ev))
        if problem is not None:
            raise TraceFormatError(
                f"'metadata.{problem[0]}': {problem[1]}", line=index, field=f"metadata.{problem[0]}"
            )
    latency = ev.llm_latency_ms
    if latency is not None and not 0 <= latency <= MAX_INT32:
        raise TraceFormatError(
            f"'llm_latency_ms' is {latency}; it must be between 0 and {MAX_INT32:,}",
            line=index,
            field="llm_latency_ms",
        )
    return ev


_NUMBER_KEYS = ("turn", "step", "console_turn", "console_step")


def check_events(
    items: list[Any], *, raw_texts: list[str | None] | None = None
) -> tuple[list[CheckedEvent], list[EventResult]]:
    """Check every item; returns the valid ones and a `rejected` result for each bad one.

    When `raw_texts` is what `parse_batch` returned for `items` and the body's text proved every value
    plain (`_plain_body`), the walk over every value is skipped: it would find nothing."""
    ok: list[CheckedEvent] = []
    bad: list[EventResult] = []
    plain = isinstance(raw_texts, BodyTexts) and raw_texts.plain_events is items
    check = _check_plain if plain else check_event
    for i, item in enumerate(items):
        try:
            ev = check(item)
        except TraceFormatError as exc:
            bad.append(EventResult(i, "rejected", exc.reason, exc.field))
            continue
        raw = raw_texts[i] if raw_texts is not None else None
        if raw is None:
            raw = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        ok.append(CheckedEvent(i, ev, raw))
    return ok, bad


def _check_plain(data: Any) -> TraceEvent:
    """`check_event` for an item of a body `_plain_body` proved: no NUL, no lone surrogate, no number
    out of range, nothing nested too deep anywhere in it."""
    cls = data.__class__
    if cls is TraceEvent:  # parsed while the body was decoded (`_event_of`)
        return _check_ranges(data, None)
    if cls is Undecodable:  # never in a proved body; kept so the two agree on any input
        raise TraceFormatError(data.reason)
    return _check_envelope(data, None)


def _too_long(name: str, value: str, limit: int, index: int | None) -> None:
    raise TraceFormatError(
        f"'{name}' is {len(value)} characters long; at most {limit} are allowed", line=index, field=name
    )


def _string_problem(s: str) -> str | None:
    if "\x00" in s:
        return f"contains a NUL character (U+0000) at position {s.index(chr(0)) + 1}; it cannot be stored"
    m = _SURROGATE.search(s)
    if m is not None:
        return (
            f"contains a lone surrogate (U+{ord(m.group()):04X}) at position {m.start() + 1}; "
            "it is not valid Unicode text"
        )
    return None


def _scalar_problem(x: Any) -> str | None:
    """What is wrong with a non-container value, or None (subclasses of str, int and float included)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, str):
        return _string_problem(x)
    if isinstance(x, int):
        if -MAX_SAFE_INT <= x <= MAX_SAFE_INT:
            return None
        return f"is {_show_int(x)}, outside ±(2**53 − 1), the range of integers JSON readers keep exactly"
    if isinstance(x, float):
        return None if math.isfinite(x) else f"is {x}, not a finite number (NaN and Infinity are not JSON)"
    return None


def _scan(value: Any, depth: int) -> tuple[list[Any], str] | None:
    """The first problem in a decoded JSON container at nesting level `depth`: (path, message).

    Recursive, but never deeper than `MAX_DEPTH` + 1 frames: a container is refused before its
    children are visited. The checks are inlined and cheapest first (this runs on every value of
    every event): `str.isascii()` is a flag test in CPython, so the surrogate search runs only on
    non-ASCII text, and `x - x != 0` is true exactly for NaN and ±Infinity (bench/validation.py)."""
    if depth > MAX_DEPTH:
        return [], f"is nested more than {MAX_DEPTH} levels deep"
    if value.__class__ is dict:
        items: Any = value.items()
    else:
        items = enumerate(value)
    for k, x in items:
        if k.__class__ is str and ("\x00" in k or (not k.isascii() and _SURROGATE.search(k))):
            return [k], f"(an object key) {_string_problem(k)}"
        cls = x.__class__
        if cls is str:
            if "\x00" in x or (not x.isascii() and _SURROGATE.search(x)):
                return [k], _string_problem(x) or ""
        elif cls is dict or cls is list:
            if cls is list and depth + 2 <= MAX_DEPTH and _plain_rows(x):  # its rows within the depth
                continue
            found = _scan(x, depth + 1)
            if found is not None:
                found[0].insert(0, k)
                return found
        elif cls is int:
            if not -MAX_SAFE_INT <= x <= MAX_SAFE_INT:
                return [k], _scalar_problem(x) or ""
        elif cls is float:
            if x - x != 0:
                return [k], _scalar_problem(x) or ""
        elif cls is bool or x is None:
            pass
        elif isinstance(x, dict | list):  # a subclass (never from json; from a Python caller)
            found = _scan(x, depth + 1)
            if found is not None:
                found[0].insert(0, k)
                return found
        else:
            message = _scalar_problem(x)
            if message is not None:
                return [k], message
    return None


def _plain_rows(rows: list[Any]) -> bool:
    """True when `rows` is a non-empty list of flat objects with the same keys whose values are all
    fine: the hot shape of an event (a context decision's message decisions, a step's messages).
    False when anything else is met (a nested value, other keys, a problem), and `_scan` then walks
    the list as usual and finds (and words) any problem: this only answers faster for the usual case.

    Faster than `_scan` on such a list: the keys are checked once, and there is no call per row."""
    if not rows or rows[0].__class__ is not dict:
        return False
    keys = rows[0].keys()
    for k in keys:
        if k.__class__ is not str or "\x00" in k or (not k.isascii() and _SURROGATE.search(k)):
            return False
    for row in rows:
        if row.__class__ is not dict or row.keys() != keys:
            return False
        for x in row.values():
            cls = x.__class__
            if cls is str:
                if "\x00" in x or (not x.isascii() and _SURROGATE.search(x)):
                    return False
            elif cls is int:
                if not -MAX_SAFE_INT <= x <= MAX_SAFE_INT:
                    return False
            elif cls is float:
                if x - x != 0:
                    return False
            elif not (x is None or cls is bool):
                return False
    return True


def _field(path: list[Any]) -> str:
    """`["metadata", "messages", 2, "content"]` → `metadata.messages[2].content` (keys made printable)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = printable(part, 60)
            out += f".{text}" if out else text
        if len(out) > 200:
            return out[:200] + "…"
    return out


def printable(s: str, limit: int) -> str:
    """`s` with every non-printable character escaped (so a message or a field path can be stored and
    shown anywhere), cut to about `limit` characters."""
    cut = s[:limit]
    if not cut.isprintable() or _SURROGATE.search(cut):
        cut = json.dumps(cut)[1:-1]
    return cut + ("…" if len(s) > limit else "")


def _show(s: str) -> str:
    return f"'{printable(s, 40)}'"


def _show_int(n: int) -> str:
    digits = len(str(abs(n))) if abs(n) < 10**4000 else 4000
    return str(n) if digits <= 30 else f"{'-' if n < 0 else ''}(a {digits}-digit number)"
