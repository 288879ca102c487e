"""JSONL files (uploads and `import_traces`): stage 1 (decode) for a file, line by line (`iter_jsonl`),
and `ingest_jsonl`, which hands the decoded lines to `ingest_events` in chunks."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from django.conf import settings

from runtime.errors import ErrorDetail, error_detail
from runtime.tracefiles import decode_jsonl_line
from traces.ingest.decoding import MAX_DEPTH, TOO_MANY_DIGITS
from traces.ingest.pipeline import ingest_events
from traces.ingest.validation import Source
from traces.models import (
    Project,
)


@dataclass(frozen=True)
class LineError:
    """A line of a file that was not stored: its 1-based number, why, and the field to blame if one is."""

    line: int
    error: str
    field: str | None = None

    def to_dict(self) -> ErrorDetail:
        """The one error shape's detail item: `{"line": n, "field": "...", "message": "..."}`."""
        return error_detail(self.error, line=self.line, field=self.field)


@dataclass
class JsonlResult:
    """Totals of one file. `line_errors` are capped at `MAX_LINE_ERRORS` (the counts are not)."""

    lines: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    line_errors: list[LineError] = field(default_factory=list)
    runs: set[str] = field(default_factory=set)

    def add_error(self, line: int, error: str, field: str | None = None) -> None:
        self.rejected += 1
        if len(self.line_errors) < MAX_LINE_ERRORS:
            self.line_errors.append(LineError(line, error, field))


MAX_LINE_ERRORS = 1000


def max_line_bytes() -> int:
    """The longest JSONL line accepted: one event may not exceed the API batch limit."""
    return int(settings.ARCANA_MAX_INGEST_BYTES)


def open_jsonl(fh: IO[bytes], *, name: str = "") -> IO[bytes]:
    """Wrap `fh` in a gzip reader when the file is gzip (by magic bytes, whatever its name)."""
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def iter_jsonl(
    fh: IO[bytes], *, limit: int | None = None
) -> Iterator[tuple[int, Any, str | None, str | None]]:
    """Yield `(line, value, raw_text, error)` for every non-blank line of a JSONL stream.

    `line` is 1-based. On a good line `value` is the decoded JSON and `error` None; on a bad one
    `value` is None and `error` says why. A UTF-8 BOM on line 1 and CRLF endings are accepted. A line
    longer than `limit` bytes is skipped without being held in memory. A stream that cannot be read
    further (a truncated gzip) yields one error at the line where reading stopped, then ends.
    """
    limit = limit or max_line_bytes()
    number = 0
    while True:
        try:
            raw = fh.readline(limit + 1)
        except (EOFError, OSError, zlib.error) as exc:
            yield number + 1, None, None, f"cannot read further: {_read_error(exc)}"
            return
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            # Skip the rest of an oversized line in bounded reads.
            try:
                while True:
                    more = fh.readline(1 << 20)
                    if not more or more.endswith(b"\n"):
                        break
            except (EOFError, OSError, zlib.error) as exc:
                yield number, None, None, f"line is longer than the {limit:,}-byte limit for one event"
                yield number + 1, None, None, f"cannot read further: {_read_error(exc)}"
                return
            yield number, None, None, f"line is longer than the {limit:,}-byte limit for one event"
            continue
        text, error = decode_jsonl_line(number, raw)
        if error is not None:
            yield number, None, None, error
        if text is None:
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            yield number, None, None, json_line_error(exc)
            continue
        except RecursionError:
            yield number, None, None, f"the event is nested more than {MAX_DEPTH} levels deep"
            continue
        except ValueError:  # an integer of more than 4,300 digits
            yield number, None, None, f"the event cannot be decoded: {TOO_MANY_DIGITS}"
            continue
        yield number, value, text, None


def json_line_error(exc: json.JSONDecodeError) -> str:
    """A line's JSON error with its column: "not valid JSON: Expecting value at column 4". Some of
    Python's messages end in "at" already ("Unterminated string starting at"): not said twice."""
    return f"not valid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}"


def _read_error(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "the compressed file ended before its end-of-stream marker (truncated gzip)"
    return str(exc) or type(exc).__name__


def count_lines(fh: IO[bytes]) -> int:
    """The number of lines in a (possibly gzip) stream, reading what can be read.

    A gzip stream is read with `read1` (one decompression step a call): a truncated file raises at
    its end, and `read` would drop what the failing call had already decompressed (a small file: all
    of it), counting 0 lines where `ingest_jsonl` then stores every whole one."""
    n = 0
    last = b"\n"
    read = getattr(fh, "read1", fh.read)
    try:
        while chunk := read(1 << 16):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    except (EOFError, OSError, zlib.error):
        pass
    return n + (0 if last == b"\n" else 1)


def ingest_jsonl(
    project: Project,
    fh: IO[bytes],
    *,
    source: Source,
    chunk_lines: int = 500,
    skip_lines: int = 0,
    on_chunk: Callable[[int, JsonlResult], bool | None] | None = None,
) -> JsonlResult:
    """Ingest a JSONL stream in chunks of `chunk_lines` lines, one `ingest_events` call per chunk.

    A bad line is a line error and never costs the good lines around it. `skip_lines` resumes after
    a cursor (lines before it are not re-read into the database). `on_chunk(last_line, totals)` runs
    after each chunk is committed; returning True stops early (the caller re-queues with a cursor)."""
    total = JsonlResult()
    buf: list[Any] = []
    texts: list[str | None] = []
    lines: list[int] = []
    last_line = 0
    since_flush = 0

    def flush() -> bool:
        if buf:
            res = ingest_events(project, buf, source=source, raw_texts=texts)
            total.accepted += res.accepted
            total.duplicates += res.duplicates
            total.runs.update(res.runs)
            for r in res.results:
                if r.status == "rejected":
                    total.add_error(lines[r.index], r.error or "rejected", r.field)
            # Lines that could not be read were added as they came; keep the list in file order.
            total.line_errors.sort(key=lambda e: e.line)
            buf.clear()
            texts.clear()
            lines.clear()
        total.lines = last_line
        return bool(on_chunk(last_line, total)) if on_chunk is not None else False

    for number, value, text, error in iter_jsonl(fh):
        last_line = max(last_line, number)
        if number <= skip_lines:
            continue
        if error is not None:
            total.add_error(number, error)
        else:
            buf.append(value)
            texts.append(text)
            lines.append(number)
        since_flush += 1
        # Flush on lines read, not only on good lines, so progress moves through a run of bad lines.
        if since_flush >= chunk_lines:
            since_flush = 0
            if flush():
                return total
    flush()
    return total


def iter_chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
