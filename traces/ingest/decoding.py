"""Stage 1, decode: a `POST /api/v1/ingest` body into JSON values (`read_body`, `parse_batch`).

A file's lines are decoded by `traces.ingest.jsonl` (`iter_jsonl`); the worker's sink hands decoded
values over. Either way, `ingest_events` receives decoded values and starts at stage 2 (validation).

What the decoder already knows is handed on so validation need not find it again: an item it could not
turn into a value is an `Undecodable` (rejected by `check_event` with its reason), and a body whose
text proves every value plain gives its texts as a `BodyTexts` (`check_events` then skips the walk).
"""

from __future__ import annotations

import io
import json
import re
import zlib
from typing import Any

import msgspec

from runtime import ENVELOPE_KEYS, TraceEvent

#: Deepest nesting of objects and arrays in one event (the event object itself is level 1). Deep
#: enough for any real trace (ours reach 6); shallow enough that no reader, renderer or serializer of
#: a stored event comes near Python's recursion limit.
MAX_DEPTH = 32

TOO_MANY_DIGITS = "it holds a number of more than 4,300 digits"


class Undecodable:
    """An item of a batch body that the JSON decoder could not turn into a value (nested too deep, an
    integer too long); `check_event` rejects it with `reason`."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class BodyTexts(list[str | None]):
    """`parse_batch`'s `raw_texts` for a body whose text proved every value plain: `plain_events` is
    the list of decoded events it holds (and `check_events` skips the walk only for that list)."""

    __slots__ = ("plain_events",)

    plain_events: list[Any]


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
    what the envelope's parse does not (the ranges of what can be stored).
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

    The values are the ones `json` gives (tests/traces/ingest/test_validation_fast.py, with hypothesis): this
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
