"""`check_*`: untrusted input (request bodies, decoded events) checked before anything is written.

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
  `llm_latency_ms` 0 … 2**31 − 1.

The nesting, string and number rules are checked by a walk over every decoded value, unless the body
of `POST /api/v1/ingest` proves them from its text at once (`_plain_body`: a few C passes over its
bytes, and a decoder that refuses NaN, Infinity and overflowing floats); on any doubt the walk runs.
"""

from __future__ import annotations

import io
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from runtime import ENVELOPE_KEYS, TraceEvent
from runtime.errors import ErrorDetail, TraceFormatError, error_detail

Status = Literal["accepted", "duplicate", "rejected"]
Source = Literal["api", "upload", "cli", "worker", "rebuild"]

#: Deepest nesting of objects and arrays in one event (the event object itself is level 1). Deep
#: enough for any real trace (ours reach 6); shallow enough that no reader, renderer or serializer of
#: a stored event comes near Python's recursion limit.
MAX_DEPTH = 32
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


@dataclass
class IngestResult:
    """Counts and per-item results of one `ingest_events` call, and the run ids it touched."""

    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    results: list[EventResult] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The API's answer. With rejections it also carries the one error shape (`error`, `detail`)."""
        out: dict[str, Any] = {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "results": [r.to_dict() for r in self.results],
        }
        if self.rejected:
            n = len(self.results)
            rest = "nothing was stored" if self.rejected == n else "the others were stored"
            out["error"] = f"{self.rejected} of {n} event{'s' if n != 1 else ''} rejected; {rest}"
            out["detail"] = [r.detail() for r in self.results if r.status == "rejected"]
        return out


@dataclass(slots=True)
class CheckedEvent:
    """A validated event with its raw JSON text, ready for `do_ingest`."""

    index: int
    event: TraceEvent
    raw: str


class Undecodable:
    """An item of a batch body that the JSON decoder could not turn into a value (nested too deep, an
    integer too long); `check_event` rejects it with `reason`."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


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


class BodyTexts(list[str | None]):
    """`parse_batch`'s `raw_texts` for a body whose text proved every value plain: `plain_events` is
    the list of decoded events it holds (and `check_events` skips the walk only for that list)."""

    __slots__ = ("plain_events",)

    plain_events: list[Any]


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
            text = _printable(part, 60)
            out += f".{text}" if out else text
        if len(out) > 200:
            return out[:200] + "…"
    return out


TOO_MANY_DIGITS = "it holds a number of more than 4,300 digits"


def _printable(s: str, limit: int) -> str:
    """`s` with every non-printable character escaped (so a message or a field path can be stored and
    shown anywhere), cut to about `limit` characters."""
    cut = s[:limit]
    if not cut.isprintable() or _SURROGATE.search(cut):
        cut = json.dumps(cut)[1:-1]
    return cut + ("…" if len(s) > limit else "")


def _show(s: str) -> str:
    return f"'{_printable(s, 40)}'"


def _show_int(n: int) -> str:
    digits = len(str(abs(n))) if abs(n) < 10**4000 else 4000
    return str(n) if digits <= 30 else f"{'-' if n < 0 else ''}(a {digits}-digit number)"


# --------------------------------------------------------------------------------------------------
# Request bodies


def parse_batch(body: bytes | str) -> tuple[Any, list[str | None] | None]:
    """Decode a `POST /api/v1/ingest` body. Returns `(payload, raw_texts)`.

    For the usual shape, an object whose only key is `"events"` holding an array, `payload` is
    `{"events": [...]}` and `raw_texts[i]` is the exact JSON text of `events[i]` in the body (stored as
    the raw event, so nothing is re-serialised and the producer's bytes are kept). An item the decoder
    cannot turn into a value (nested hundreds of levels deep, an integer of thousands of digits) is an
    `Undecodable` in its place, so only that event is rejected. Any other body is decoded with
    `json.loads` and `raw_texts` is None. Raises `ValueError` (`json.JSONDecodeError`,
    `UnicodeDecodeError`, or a plain `ValueError` for a body nested too deep) for a body that is not
    JSON; its message says why.

    For a UTF-8 body (`bytes`) of the usual shape whose text proves that no value breaks a rule of the
    walk (`_plain_body`), `raw_texts` is a `BodyTexts` and `check_events` skips the walk. Such a body is
    decoded by msgspec when it can (`_fast_batch`), else element by element with `json`'s decoder.
    msgspec gives an event of the usual shape (envelope keys only, of the envelope's types) as the
    `TraceEvent` already parsed from it (`_event_of`), not as a dict: `check_events` then checks only
    what the envelope's parse does not (`_check_ranges`).
    """
    data = bytes(body) if isinstance(body, bytearray) else body
    try:
        if isinstance(data, bytes):
            if data.__class__ is not bytes:  # a subclass: decoded as bytes, walked as usual
                return _scan_batch(data.decode("utf-8"), _plain_scan)[:2]
            fast = _fast_batch(data)
            if fast is not None:
                return fast
            payload, raws, plain = _scan_batch(data.decode("utf-8"), _checking_scan)
            if plain and _plain_body(data):
                texts = BodyTexts(raws)
                texts.plain_events = payload["events"]
                return payload, texts
            return payload, raws
        return _scan_batch(data, _plain_scan)[:2]
    except (ValueError, IndexError, RecursionError, StopIteration):
        # Not the usual shape (or not JSON): the plain decoder gives the answer and the error message.
        pass
    try:
        return json.loads(body), None
    except RecursionError:
        raise ValueError(
            f"the body is nested too deeply (an event may be at most {MAX_DEPTH} levels deep)"
        ) from None
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as exc:  # a ValueError too: before the digits' case, which it is not
        raise ValueError(f"the body is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except ValueError:  # an integer longer than Python converts (4,300 digits)
        raise ValueError(f"the body cannot be decoded: {TOO_MANY_DIGITS}") from None


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    """The usual body: `{"events": [...]}` and no other key, each event kept as its exact bytes."""

    events: list[msgspec.Raw]


#: An event whose keys are all envelope keys, each of the envelope's type (`TraceEvent.from_typed`):
#: decoded into these fields by msgspec, which checks the types as it reads. Any other event (another
#: key beside these, a value of another type, not an object) is decoded as a plain value instead.
#: Made from `ENVELOPE_KEYS`, so it follows the envelope.
_ENVELOPE_TYPES: dict[str, Any] = {
    "llm_latency_ms": int | float | None,
    "tool_call": dict[str, Any] | None,
    "budgets": dict[str, Any] | None,
    "metadata": dict[str, Any] | None,
}
_Envelope = msgspec.defstruct(
    "_Envelope",
    [(key, _ENVELOPE_TYPES.get(key, str | None), None) for key in ENVELOPE_KEYS],
    forbid_unknown_fields=True,
)


_decode_body = msgspec.json.Decoder(_Body).decode
_decode_event = msgspec.json.Decoder().decode
_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_envelope_fields = msgspec.structs.asdict


def _event_of(raw: msgspec.Raw) -> Any:
    """An event of a body msgspec decodes: the `TraceEvent` when its envelope is of the usual shape and
    passes `TraceEvent.from_typed`, else its decoded value (checked by `from_dict` as any other)."""
    try:
        event = TraceEvent.from_typed(_envelope_fields(_decode_envelope(raw)))
    except msgspec.DecodeError:  # a key or a type of another shape (ValidationError), or any doubt
        event = None
    return _decode_event(raw) if event is None else event


def _fast_batch(body: bytes) -> tuple[dict[str, Any], BodyTexts] | None:
    """`parse_batch`'s answer for the usual body, decoded by msgspec (about twice as fast as the
    element-by-element scan with `json`'s decoder, which took 40% of the ingest view's time for a batch
    of conversation events); None when the scan must answer.

    The values are the ones `json` gives (tests/traces/test_validation_fast.py, with hypothesis): this
    is taken only when msgspec decodes the whole body and `_plain_body` proves it plain. msgspec refuses
    what `json` accepts with values of its own or flags (NaN, Infinity, a float out of range, a lone
    surrogate escape, nesting past its limit): the scan then decodes the body as before. Each event's
    text is its exact bytes (`msgspec.Raw`), decoded as strict UTF-8."""
    try:
        raw_events = _decode_body(body).events
        events = [_event_of(raw) for raw in raw_events]
        texts = BodyTexts([bytes(raw).decode("utf-8") for raw in raw_events])
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError, ValueError):
        return None
    if not _plain_body(body):
        return None
    texts.plain_events = events
    return {"events": events}, texts


class _NotPlain(Exception):
    """Raised by the checking decoder's hooks: the value holds a NaN, an Infinity or a float that
    overflows. The item is then decoded again by the plain decoder (so its value is exactly that)."""


def _finite_float(text: str) -> float:
    x = float(text)  # what the decoder does without the hook
    if x - x != 0:
        raise _NotPlain
    return x


def _no_constant(text: str) -> float:
    raise _NotPlain


_WS = " \t\n\r"
_plain_decoder = json.JSONDecoder()
_decode_at = _plain_decoder.raw_decode
_plain_scan = _plain_decoder.scan_once  # type: ignore[attr-defined]
# The same values as the plain decoder, or `_NotPlain` when a number is not finite.
_checking_scan = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant).scan_once  # type: ignore[attr-defined]
# One JSON token: a string, a bracket, or a run of scalar characters (numbers and literals).
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|[^\s,:\[\]{}"]+')


def _skip(text: str, i: int) -> int:
    while text[i] in _WS:
        i += 1
    return i


def _skip_value(text: str, i: int) -> int:
    """The end of the JSON value starting at `i`, found without decoding it (for an item the C decoder
    refused: too deep, or too long a number). Raises ValueError when it is not well-formed."""
    depth = 0
    for m in _TOKEN.finditer(text, i):
        tok = m.group()
        if tok in ("[", "{"):
            depth += 1
        elif tok in ("]", "}"):
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced")
        if depth == 0:
            return m.end()
    raise ValueError("unterminated value")


def _decode_item(text: str, i: int) -> tuple[Any, int]:
    try:
        return _decode_at(text, i)
    except RecursionError:
        end = _skip_value(text, i)
        return Undecodable(f"the event is nested more than {MAX_DEPTH} levels deep"), end
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of more than 4,300 digits
        end = _skip_value(text, i)
        return Undecodable(f"the event cannot be decoded: {TOO_MANY_DIGITS}"), end


def _scan_batch(text: str, scan: Any) -> tuple[dict[str, Any], list[str | None], bool]:
    """`{"events": [v, …]}` scanned element by element with the C decoder's `scan` (`_plain_scan`, or
    `_checking_scan`); raises ValueError (or IndexError, StopIteration) otherwise. The flag is False
    when an item needed the plain decoder (`_NotPlain`, or an `Undecodable`)."""
    i = _skip(text, 0)
    if text[i] != "{":
        raise ValueError("not an object")
    i = _skip(text, i + 1)
    key, i = _decode_at(text, i)
    if key != "events":
        raise ValueError("not the events key")
    i = _skip(text, i)
    if text[i] != ":":
        raise ValueError("no colon")
    i = _skip(text, i + 1)
    if text[i] != "[":
        raise ValueError("events is not an array")
    i = _skip(text, i + 1)
    events: list[Any] = []
    raws: list[str | None] = []
    plain = True
    if text[i] == "]":
        i += 1
    else:
        append_event = events.append
        append_raw = raws.append
        ws = _WS
        while True:
            try:
                value, end = scan(text, i)
            except StopIteration:
                raise ValueError("no value") from None
            except (_NotPlain, RecursionError, ValueError):
                # A number that is not finite, nesting too deep, an integer too long, or not JSON:
                # decoded (or refused) exactly as the plain decoder does.
                plain = False
                value, end = _decode_item(text, i)
                if value.__class__ is Undecodable:
                    append_event(value)
                    append_raw(None)
                    i = _skip(text, end)
                    if text[i] == ",":
                        i = _skip(text, i + 1)
                        continue
                    if text[i] == "]":
                        i += 1
                        break
                    raise ValueError("bad array") from None
            append_event(value)
            append_raw(text[i:end])
            c = text[end]
            if c in ws:
                end = _skip(text, end)
                c = text[end]
            if c == ",":
                i = end + 1
                if text[i] in ws:
                    i = _skip(text, i)
                continue
            if c == "]":
                i = end + 1
                break
            raise ValueError("bad array")
    i = _skip(text, i)
    if text[i] != "}":
        raise ValueError("more keys")
    if text[i + 1 :].strip(_WS):
        raise ValueError("trailing data")
    return {"events": events}, raws, plain


# --------------------------------------------------------------------------------------------------
# The body's text as proof


#: Every byte to "x" but digits to "0" (the delete argument makes `bytes.translate` take its faster
#: loop; a JSON body holds no NUL byte).
_DIGIT_RUNS = bytes(48 if 48 <= c <= 57 else 120 for c in range(256))
#: `[{` to "(", `]}` to ")", quotes kept, the rest deleted.
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
#: The bytes a JSON number's integer digits can follow (whitespace, `:`, `,`, `[`, its sign).
_NUMBER_LEAD = b" \t\n\r:,[-"
_SIXTEEN_DIGITS = b"0" * 16
_NUL_OR_SURROGATE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


def _plain_body(body: bytes) -> bool:
    """True when the JSON text `body` (valid JSON, decoded from UTF-8 with the checking decoder, so
    with no NaN, Infinity or non-finite float) proves that the walk (`_scan`) finds nothing in any of
    its events: False on any doubt. What its bytes prove, at a few C passes over them:

    - no NUL and no lone surrogate in any string or key: strict UTF-8 decoding refuses an encoded
      surrogate and strict JSON a raw control character, so both can only come from a `\\u0000` or
      `\\uD800`–`\\uDFFF` escape; none is in the text (a surrogate pair counts as a doubt);
    - no integer beyond ±(2**53 − 1): it would need a run of 16 digits that follows what a number's
      digits follow; a run that follows anything else (a `.`, a letter: a fraction, a hex digest) is
      not an integer;
    - nesting: the body (an object, its array, the events) is at most `MAX_DEPTH` + 2 levels deep,
      counted on its brackets outside strings (escaped backslashes and quotes removed, strings cut
      out at their quotes, then innermost pairs removed level by level).
    """
    escapes = b"\\" in body
    if escapes and _NUL_OR_SURROGATE_ESCAPE.search(body) is not None:
        return False
    digits = body.translate(_DIGIT_RUNS, b"\0")
    if len(digits) != len(body):
        return False
    i = digits.find(_SIXTEEN_DIGITS)
    while i >= 0:
        if i == 0 or body[i - 1] in _NUMBER_LEAD:
            return False
        end = digits.find(b"x", i + 16)
        if end < 0:
            break
        i = digits.find(_SIXTEEN_DIGITS, end)
    text = body
    if escapes:
        # Left to right, each `\\` is an escaped backslash; what backslashes remain each start
        # an escape of another character, so each `\"` left is an escaped quote.
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = text.translate(_BRACKETS, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in brackets:  # strings with brackets in them: keep what is between strings
        brackets = b"".join(brackets.split(b'"')[::2])
    for _ in range(MAX_DEPTH + 2):
        if not brackets:
            return True
        brackets = brackets.replace(b"()", b"")
    return not brackets


def read_body(data: bytes, *, gzip_encoded: bool, limit: int) -> bytes:
    """Decode a request body; raises `BodyTooLarge` when the decoded size exceeds `limit` bytes
    (a gzip bomb is refused while decompressing, never truncated) and `ValueError` for bad gzip."""
    if not gzip_encoded:
        if len(data) > limit:
            raise BodyTooLarge(limit)
        return data
    out = io.BytesIO()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        chunk = d.decompress(data, limit + 1)
        out.write(chunk)
        if out.tell() > limit or d.unconsumed_tail:
            raise BodyTooLarge(limit)
        out.write(d.flush())
    except zlib.error as exc:
        raise ValueError(f"body is not valid gzip: {exc}") from None
    if not d.eof:
        raise ValueError("body is not valid gzip: the compressed data ended early (truncated)")
    if out.tell() > limit:
        raise BodyTooLarge(limit)
    return out.getvalue()


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"body is larger than the {limit:,}-byte limit")
        self.limit = limit
