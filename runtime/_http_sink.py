"""A trace sink that uploads events in batches to Arcana Console's `POST /api/v1/ingest`.

    sink = HttpBatchSink("http://127.0.0.1:8000/api/v1/ingest", api_key="ak_...")
    sink.write(event)          # never blocks on the network
    sink.close()               # delivers (or spills) everything still buffered

`write()` only appends to a buffer; one background thread cuts batches and POSTs them, so a
conversation never waits for the server. What the server cannot take ends up in a local JSONL spill
file, which is an ordinary trace file (upload it later with `arcana trace upload` or the upload page).
"""

from __future__ import annotations

import atexit
import gzip as gzip_module
import json
import logging
import random
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from ._retry import parse_retry_after, retry_delay
from ._trace import TraceEvent
from .errors import ConfigError

logger = logging.getLogger("runtime.http_sink")

__all__ = ["HttpBatchSink"]

#: Where spilled events go when no `spill_path` is given (relative to the working directory).
DEFAULT_SPILL_DIR = Path("arcana-traces") / "_spill"

# Bytes the batch envelope adds around the events: {"events":[ ... ]}
_ENVELOPE_BYTES = len(b'{"events":[]}')
_SAFE_FILE_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass
class _Batch:
    seq: int
    events: list[tuple[str, bytes]]  # (run_id, compact JSON of the event)


class HttpBatchSink:
    """Batches trace events and POSTs them as `{"events": [...]}` with `Authorization: Bearer <api_key>`.

    Batching: a batch is cut when it holds `max_events` events, when adding the next event would take
    the request body over `max_bytes` (an event bigger than that on its own is sent alone), or when
    its oldest event has waited `max_interval_s` seconds. Batches are sent in order by one background
    thread.

    Delivery: 200 and 207 mean delivered. On 207 the events the server marked `"rejected"` are logged
    (warning, with index, step_id and reason) and counted, never resent: the server already said they
    are invalid. Connection errors, timeouts, 429 and 5xx are retried up to `max_retries` times with
    exponential backoff (`backoff_base * 2**attempt`, capped at `backoff_max`, plus jitter) or the
    server's `Retry-After` (capped at `max_retry_after`). 413 splits the batch in two and sends the
    halves. Any other status (400, 401, 403, ...) is not retried.

    Spill: a batch that could not be delivered is appended to a JSONL file so nothing is lost:
    `spill_path` if given, else `./arcana-traces/_spill/<run_id>.jsonl` (one file per run; `<YYYY-MM-DD>.jsonl`
    for run ids that are not safe file names). After a batch is spilled the server is taken as down
    and later batches get a single attempt each (no backoff) until one gets through, so `close()` with
    the server gone takes one retry cycle, not one per batch.

    `flush()` waits until everything written so far is delivered or spilled; `close()` flushes, stops
    the thread and closes the HTTP client if the sink created it (an injected `client` is left open).
    Events written after `close()` are spilled directly. Counters: `sent` (events the server took,
    duplicates included), `duplicates`, `rejected`, `spilled`, `lost` (could not even be spilled: the
    spill file was not writable), `batches_sent`. Thread-safe: any thread may call `write()`.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str,
        max_events: int = 500,
        max_bytes: int = 1_000_000,
        max_interval_s: float = 2.0,
        spill_path: str | Path | None = None,
        client: httpx.Client | None = None,
        max_retries: int = 5,
        gzip: bool = False,
        timeout: float = 10.0,
        backoff_base: float = 0.5,
        backoff_max: float = 10.0,
        max_retry_after: float = 30.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"HttpBatchSink url must start with http:// or https://, got {url!r}")
        if not isinstance(api_key, str) or not api_key:
            raise ConfigError("HttpBatchSink needs an api_key")
        if max_events < 1 or max_bytes < 1 or max_interval_s <= 0 or max_retries < 0:
            raise ConfigError(
                "HttpBatchSink: max_events, max_bytes and max_interval_s must be > 0, max_retries >= 0"
            )
        self.url = url
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_interval_s = max_interval_s
        self.max_retries = max_retries
        self.gzip = gzip
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self.spill_path = Path(spill_path) if spill_path is not None else None
        self.spill_files: set[Path] = set()
        self.sent = 0
        self.duplicates = 0
        self.rejected = 0
        self.spilled = 0
        self.lost = 0
        self.batches_sent = 0

        self._client = client if client is not None else httpx.Client(timeout=timeout)
        self._owns_client = client is None
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        if gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._api_key = api_key
        self._rng = random.Random()

        # Everything below is guarded by `_cond`.
        self._cond = threading.Condition()
        self._buffer: list[tuple[str, bytes]] = []
        self._buffer_bytes = _ENVELOPE_BYTES
        self._buffer_since = 0.0
        self._ready: deque[_Batch] = deque()
        self._cut_seq = 0
        self._done_seq = 0
        self._closing = False
        self._closed = False
        self._server_down = False
        self._spill_lock = threading.Lock()

        self._worker = threading.Thread(target=self._run, name="arcana-http-sink", daemon=True)
        self._worker.start()
        _LIVE_SINKS.add(self)

    def __repr__(self) -> str:
        return f"HttpBatchSink(url={self.url!r}, sent={self.sent}, spilled={self.spilled}, rejected={self.rejected})"

    def __enter__(self) -> HttpBatchSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the sink interface ------------------------------------------------------------------------

    def write(self, event: TraceEvent | Mapping[str, Any]) -> None:
        """Buffer one event (a dict is validated with `TraceEvent.from_dict`). Never does network I/O."""
        if not isinstance(event, TraceEvent):
            event = TraceEvent.from_dict(event)
        item = (event.run_id, event.to_json().encode("utf-8"))
        with self._cond:
            if self._closing:
                closed = True
            else:
                closed = False
                # +1 for the comma that joins it to the previous event.
                if self._buffer and self._buffer_bytes + len(item[1]) + 1 > self.max_bytes:
                    self._cut_locked()
                if not self._buffer:
                    self._buffer_since = time.monotonic()
                self._buffer_bytes += len(item[1]) + (1 if self._buffer else 0)
                self._buffer.append(item)
                if len(self._buffer) >= self.max_events or self._buffer_bytes >= self.max_bytes:
                    self._cut_locked()
                elif len(self._buffer) == 1:
                    # Wake the thread so it starts the max_interval_s clock for this batch.
                    self._cond.notify_all()
        if closed:
            logger.warning("HttpBatchSink is closed; spilling event %s", event.step_id)
            self._spill([item])

    __call__ = write

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is buffered and wait until every event written before this call is delivered or
        spilled. Returns False if `timeout` (seconds) ran out first."""
        with self._cond:
            if self._buffer:
                self._cut_locked()
            target = self._cut_seq
            return self._cond.wait_for(lambda: self._done_seq >= target, timeout)

    def close_run(self, run_id: str) -> None:
        """A run ended: send its buffered events now, without waiting for the answer."""
        with self._cond:
            if self._buffer:
                self._cut_locked()

    def close(self, timeout: float | None = None) -> None:
        """Deliver or spill everything buffered, stop the background thread, close an owned client.
        Idempotent. With `timeout`, stop waiting for the thread after that many seconds."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            if self._buffer:
                self._cut_locked()
            self._cond.notify_all()
        self._worker.join(timeout)
        with self._cond:
            self._closed = True
        if self._owns_client and not self._worker.is_alive():
            self._client.close()
        _LIVE_SINKS.discard(self)

    @property
    def stats(self) -> dict[str, int]:
        """The counters as a dict (also `pending`: events written but not yet delivered or spilled)."""
        with self._cond:
            pending = len(self._buffer) + sum(len(b.events) for b in self._ready)
        return {
            "sent": self.sent,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "spilled": self.spilled,
            "lost": self.lost,
            "batches_sent": self.batches_sent,
            "pending": pending,
        }

    # -- background thread -------------------------------------------------------------------------

    def _cut_locked(self) -> None:
        """Move the buffer to the ready queue. Caller holds `_cond`."""
        self._cut_seq += 1
        self._ready.append(_Batch(self._cut_seq, self._buffer))
        self._buffer = []
        self._buffer_bytes = _ENVELOPE_BYTES
        self._cond.notify_all()

    def _next_batch(self) -> _Batch | None:
        """Block until a batch is ready (or the time bound cuts one); None when closing and empty."""
        with self._cond:
            while True:
                if self._ready:
                    return self._ready.popleft()
                if self._buffer:
                    due = self._buffer_since + self.max_interval_s
                    now = time.monotonic()
                    if self._closing or now >= due:
                        self._cut_locked()
                        continue
                    self._cond.wait(due - now)
                elif self._closing:
                    return None
                else:
                    self._cond.wait()

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._deliver(batch.events)
            except Exception:
                # Tracing must never die silently with events in hand: spill them and carry on.
                logger.exception("HttpBatchSink failed to deliver a batch; spilling it")
                self._spill(batch.events)
            finally:
                with self._cond:
                    self._done_seq = batch.seq
                    self._cond.notify_all()

    def _deliver(self, events: list[tuple[str, bytes]]) -> None:
        body = b'{"events":[' + b",".join(data for _, data in events) + b"]}"
        if self.gzip:
            body = gzip_module.compress(body, mtime=0)
        attempts = 1 if self._server_down else self.max_retries + 1
        detail = ""
        for attempt in range(attempts):
            try:
                response = self._client.post(self.url, content=body, headers=self._headers)
            except httpx.TransportError as exc:
                detail, retry_after = f"{type(exc).__name__}: {exc}", None
            else:
                status = response.status_code
                if status in (200, 207):
                    self._server_down = False
                    self._record_delivery(events, response)
                    return
                if status == 413 and len(events) > 1:
                    half = len(events) // 2
                    logger.info("ingest answered 413 for %d events; splitting the batch", len(events))
                    self._deliver(events[:half])
                    self._deliver(events[half:])
                    return
                detail = f"HTTP {status}: {' '.join(response.text[:200].split())}".replace(
                    self._api_key, "***"
                )
                if status != 429 and status < 500:
                    logger.error("ingest refused a batch of %d events (%s); spilling it", len(events), detail)
                    self._spill(events)
                    return
                retry_after = parse_retry_after(response.headers.get("retry-after"), cap=self.max_retry_after)
            if attempt + 1 < attempts:
                time.sleep(
                    retry_delay(
                        attempt, retry_after, base=self.backoff_base, cap=self.backoff_max, rng=self._rng
                    )
                )
        self._server_down = True
        logger.warning(
            "ingest unreachable after %d attempt(s) (%s); spilling %d events", attempts, detail, len(events)
        )
        self._spill(events)

    def _record_delivery(self, events: list[tuple[str, bytes]], response: httpx.Response) -> None:
        rejected: list[tuple[int, str]] = []
        duplicates = 0
        try:
            payload = response.json()
            results = payload.get("results") if isinstance(payload, dict) else None
        except ValueError:
            results = None
        if isinstance(results, list):
            for res in results:
                if not isinstance(res, dict):
                    continue
                if res.get("status") == "rejected" and isinstance(res.get("index"), int):
                    rejected.append((res["index"], str(res.get("error", ""))))
                elif res.get("status") == "duplicate":
                    duplicates += 1
        elif response.status_code == 207:
            logger.warning("ingest answered 207 without readable results; counting the batch as delivered")
        for index, error in rejected:
            step_id = _step_id(events[index][1]) if 0 <= index < len(events) else "?"
            logger.warning("ingest rejected event %d (step_id %s): %s", index, step_id, error)
        with self._cond:
            self.batches_sent += 1
            self.rejected += len(rejected)
            self.duplicates += duplicates
            self.sent += len(events) - len(rejected)

    def _spill_target(self, run_id: str) -> Path:
        if self.spill_path is not None:
            return self.spill_path
        stem = run_id if _SAFE_FILE_STEM.fullmatch(run_id) else datetime.now(UTC).strftime("%Y-%m-%d")
        return DEFAULT_SPILL_DIR / f"{stem}.jsonl"

    def _spill(self, events: list[tuple[str, bytes]]) -> None:
        groups: dict[Path, list[bytes]] = {}
        for run_id, data in events:
            groups.setdefault(self._spill_target(run_id), []).append(data)
        for path, lines in groups.items():
            try:
                with self._spill_lock:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with path.open("ab") as fh:
                        fh.write(b"\n".join(lines) + b"\n")
            except OSError:
                logger.exception("cannot write the spill file %s: %d trace events lost", path, len(lines))
                with self._cond:
                    self.lost += len(lines)
                continue
            with self._cond:
                self.spilled += len(lines)
                self.spill_files.add(path)


def _step_id(data: bytes) -> str:
    try:
        return str(json.loads(data).get("step_id"))
    except ValueError:
        return "?"


# Sinks still open at interpreter exit get a bounded chance to flush, so a script that forgets
# close() does not silently drop its last batch.
_LIVE_SINKS: weakref.WeakSet[HttpBatchSink] = weakref.WeakSet()


@atexit.register
def _close_live_sinks() -> None:
    for sink in list(_LIVE_SINKS):
        sink.close(timeout=5.0)
