"""`check_*`: untrusted input (request bodies, decoded events) checked before anything is written.

Every item is checked on its own; a bad one raises `TraceFormatError` with a reason and becomes a
`rejected` `EventResult` with its index, so the valid items of the same batch are still written.
"""

from __future__ import annotations

import io
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime._trace import TraceEvent
from runtime.errors import TraceFormatError

Status = Literal["accepted", "duplicate", "rejected"]


Source = Literal["api", "upload", "cli", "worker", "rebuild"]


@dataclass(frozen=True)
class EventResult:
    """The fate of one input item. `index` is 0-based in the batch (a file line for JSONL callers)."""

    index: int
    status: Status
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class IngestResult:
    """Counts and per-item results of one `ingest_events` call, and the run ids it touched."""

    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    results: list[EventResult] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "results": [r.to_dict() for r in self.results],
        }


@dataclass(frozen=True)
class CheckedEvent:
    """A validated event with its raw JSON text, ready for `do_ingest`."""

    index: int
    event: TraceEvent
    raw: str


def check_event(data: Any, *, index: int | None = None) -> TraceEvent:
    """Validate one untrusted decoded JSON value as a trace event. Raises `TraceFormatError`."""
    ev = TraceEvent.from_dict(data, line=index)
    agent = ev.metadata.get("source_agent")
    if agent is not None and not isinstance(agent, str):
        raise TraceFormatError("'metadata.source_agent' must be a string", line=index)
    return ev


def check_events(
    items: list[Any], *, raw_texts: list[str | None] | None = None
) -> tuple[list[CheckedEvent], list[EventResult]]:
    """Check every item; returns the valid ones and a `rejected` result for each bad one."""
    ok: list[CheckedEvent] = []
    bad: list[EventResult] = []
    for i, item in enumerate(items):
        try:
            ev = check_event(item)
        except TraceFormatError as exc:
            bad.append(EventResult(i, "rejected", exc.reason))
            continue
        raw = raw_texts[i] if raw_texts is not None else None
        if raw is None:
            raw = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        ok.append(CheckedEvent(i, ev, raw))
    return ok, bad


def parse_batch(body: bytes | str) -> tuple[Any, list[str | None] | None]:
    """Decode a `POST /api/v1/ingest` body. Returns `(payload, raw_texts)`.

    For the usual shape, an object whose only key is `"events"` holding an array, `payload` is
    `{"events": [...]}` and `raw_texts[i]` is the exact JSON text of `events[i]` in the body (stored as
    the raw event, so nothing is re-serialised and the producer's bytes are kept). Any other body is
    decoded with `json.loads` and `raw_texts` is None. Raises `json.JSONDecodeError` /
    `UnicodeDecodeError` for a body that is not JSON, exactly as `json.loads(body)` would.
    """
    try:
        return _scan_batch(body.decode("utf-8") if isinstance(body, bytes | bytearray) else body)
    except (ValueError, IndexError):
        # Not the usual shape (or not JSON): the plain decoder gives the answer and the error message.
        return json.loads(body), None


_WS = " \t\n\r"


_decode_at = json.JSONDecoder().raw_decode


def _skip(text: str, i: int) -> int:
    while text[i] in _WS:
        i += 1
    return i


def _scan_batch(text: str) -> tuple[dict[str, Any], list[str | None]]:
    """`{"events": [v, …]}` scanned element by element with the C decoder; raises ValueError otherwise."""
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
    if text[i] == "]":
        i += 1
    else:
        while True:
            value, end = _decode_at(text, i)
            events.append(value)
            raws.append(text[i:end])
            i = _skip(text, end)
            if text[i] == ",":
                i = _skip(text, i + 1)
                continue
            if text[i] == "]":
                i += 1
                break
            raise ValueError("bad array")
    i = _skip(text, i)
    if text[i] != "}":
        raise ValueError("more keys")
    if text[i + 1 :].strip(_WS):
        raise ValueError("trailing data")
    return {"events": events}, raws


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
