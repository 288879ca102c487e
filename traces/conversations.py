"""Conversations run by our own workers, streamed into the store as they happen.

The worker runs `runtime` in-process and hands each trace event to `traces.ingest` through a
`CallableSink`, so pages show the run while it is still going (the one ingest path, DESIGN.md §3).
Each event is also written to the trace folder, so `recall` can fall back to the file and the
`arcana trace` CLI can read it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from django import db
from django.conf import settings

from runtime import JsonlFileSink, TraceEvent
from runtime.demo import run_demo
from traces import ingest
from traces.models import Project


class StoreSink:
    """Streams the runtime's events into the store as they happen.

    The runtime calls sinks from inside its event loop, where Django's ORM must not block, so
    `write()` only enqueues; one writer thread ingests whatever has queued up since its last batch
    (one transaction per batch, so a busy run is written in bulk and a quiet one event by event).
    `close()` drains the queue and waits for the writer.
    """

    def __init__(self, project: Project, *, max_batch: int = 500) -> None:
        self.project = project
        self.max_batch = max_batch
        self.accepted = 0
        self.duplicates = 0
        self.rejected = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="arcana-store-sink", daemon=True)
        self._thread.start()

    def write(self, event: TraceEvent) -> None:
        self._queue.put(event.to_dict())

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _drain(self) -> None:
        try:
            done = False
            while not done:
                batch: list[dict[str, Any]] = []
                item = self._queue.get()
                while True:
                    if item is None:
                        done = True
                        break
                    batch.append(item)
                    if len(batch) >= self.max_batch:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    result = ingest.ingest_events(self.project, batch, source="worker")
                    self.accepted += result.accepted
                    self.duplicates += result.duplicates
                    self.rejected += result.rejected
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
