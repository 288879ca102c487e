"""`StoreSink`: the runtime's events into the store through `traces.ingest`, as they happen."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import uuid
from typing import Any

from django import db
from django.conf import settings

from runtime import (
    CallableSink,
    JsonlFileSink,
    TraceEvent,
    TraceWriter,
)
from runtime.demo import run_demo
from runtime.facts import CANCELLED_STOP
from traces import ingest
from traces.models import Conversation, Project, Run

log = logging.getLogger(__name__)


def record_cancellation(conv: Conversation, reason: str) -> None:
    """Write into the conversation's run that it was cancelled: a `state_change` event with
    `stop_reason "user_cancelled"` (`runtime.facts.CANCELLED_STOP`), after every event of the run, so
    the run's status — a pure function of its events, kept by `rebuild_projections` — is `cancelled`
    on every page, the runs list, the API and compare. The runtime writes one itself when a turn is
    stopped after a step; this one covers a conversation cancelled between turns (queued, waiting for
    the user, or seen by the worker before the next turn). It belongs to no turn or step
    (docs/trace-format.md), and has one step id per run, so writing it twice stores it once. A run with
    no event yet gets none: it was cancelled before it began (the conversation says so); nor does a run
    whose events already say it was cancelled."""
    run = Run.objects.filter(project_id=conv.project_id, run_id=conv.run_id).only("status").first()
    if run is None or run.status == Run.Status.CANCELLED:
        return  # no event yet, or the runtime's own stop (after a step) already says so
    events: list[dict[str, Any]] = []  # a callable sink gets each event as its dict
    TraceWriter(CallableSink(events.append), conv.run_id).emit(
        "state_change",
        turn=None,
        step=None,
        step_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"arcana-console/{conv.run_id}/cancelled")),
        stop_reason=CANCELLED_STOP,
        stop_detail=reason[:500],
        metadata={"stopped": CANCELLED_STOP, "detail": reason[:500]},
    )
    ingest.ingest_events(conv.project, events, source="worker")


class StoreSink:
    """Streams the runtime's events into the store as they happen.

    The runtime calls sinks from inside its event loop, where Django's ORM must not block, so
    `write()` only enqueues; one writer thread ingests whatever has queued up, waiting up to `linger`
    seconds after an event for the rest of its step (one transaction per batch: a step's handful of
    events costs one ingest call instead of one each, and pages still see them well within a second).
    `flush()` waits until everything written so far is stored (and raises if a batch failed);
    `close()` drains the queue and waits for the writer.
    """

    def __init__(self, project: Project, *, max_batch: int = 500, linger: float = 0.05) -> None:
        self.project = project
        self.max_batch = max_batch
        self.linger = linger
        self.accepted = 0
        self.duplicates = 0
        self.rejected = 0
        self.error: BaseException | None = None
        self.errors_written = 0  # `error` events seen (the worker records a failure only once)
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="arcana-store-sink", daemon=True)
        self._thread.start()

    def write(self, event: TraceEvent) -> None:
        if event.event_type == "error":
            self.errors_written += 1
        self._queue.put(event.to_dict())

    def flush(self) -> None:
        self._queue.join()
        if self.error is not None:
            raise RuntimeError(f"storing the conversation's events failed: {self.error}") from self.error

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _drain(self) -> None:
        try:
            done = False
            while not done:
                batch: list[dict[str, Any]] = []
                taken = 0
                item = self._queue.get()
                taken += 1
                deadline = time.monotonic() + self.linger
                while True:
                    if item is None:
                        done = True
                        break
                    batch.append(item)
                    if len(batch) >= self.max_batch:
                        break
                    try:
                        item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                        taken += 1
                    except queue.Empty:
                        break
                try:
                    if batch:
                        result = ingest.ingest_events(self.project, batch, source="worker")
                        self.accepted += result.accepted
                        self.duplicates += result.duplicates
                        self.rejected += result.rejected
                except Exception as exc:  # keep draining; flush() reports it
                    log.exception("storing %d events failed", len(batch))
                    self.error = exc
                finally:
                    for _ in range(taken):
                        self._queue.task_done()
        finally:
            # This thread opened its own database connection; give it back.
            db.connection.close()


def run_demo_conversation(project: Project) -> dict[str, Any]:
    """Play the runtime's scripted demo (a chat with pins, compression and recall, and a pool of two
    agents) and stream its events into `project`. Returns the run ids and ingest counts."""
    store = StoreSink(project)
    try:
        summary = asyncio.run(run_demo(None, trace_sinks=[JsonlFileSink(settings.ARCANA_TRACE_DIR), store]))
    finally:
        store.close()
    return {
        "chat_run_id": summary["chat"]["run_id"],
        "pool_run_id": summary["pool"]["run_id"],
        "accepted": store.accepted,
        "rejected": store.rejected,
    }
