"""Conversations run by our own workers, streamed into the store as they happen (issue 12).

The worker runs `runtime` in-process and hands each trace event to `traces.ingest` through
`StoreSink`, so pages show the run while it is still going (the one ingest path, DESIGN.md §3).
Nothing else is shared between worker processes: the session state is saved on the `Conversation`
row after every turn, and no trace file is needed to continue (DESIGN.md §7).

Interface (for the pages and the API; the model is `traces.models.Conversation`):

* `available_providers() -> list[ProviderChoice]` — what the operator configured
  (`settings.ARCANA_PROVIDERS`, from the `ARCANA_PROVIDERS` env JSON) plus the built-in offline
  `scripted` provider whose models are the named scenarios (`pin-recall-demo`, ...). Each
  `ProviderChoice` is `{"name", "models": [str], "default_model", "kind": "scripted" | "openai"}`;
  API keys never appear (they stay in the env vars the config names).
* `check_conversation_request(data) -> ConversationSpec` — validates the body of
  `POST /api/v1/conversations` (the same dict the new-run form should build: provider, model,
  system, cognitive_primitives, context_window, pin_budget_fraction, prompt_snapshots, script,
  agents); raises `ConversationInputError` with `.detail = [{"field", "message"}]`.
* `start_conversation(project, spec, *, user=None) -> Conversation` — creates the row (`queued`,
  with its `run_id`) and enqueues `traces.tasks.run_conversation` on commit. Raises
  `ConversationLimitError` when the project already runs `ARCANA_MAX_CONCURRENT_CONVERSATIONS`.
* `post_message(conversation, content, *, agent=None) -> Conversation` — a playground turn; raises
  `ConversationBusyError` (409) unless the conversation is `waiting_for_user`.
* `cancel_conversation(conversation) -> Conversation` — queued/waiting: cancelled at once; running:
  stops after the current step.
* `sweep_conversations() -> dict` — the periodic sweeper (re-queues rows whose lease expired).

Pages read: `conversation.status` (`Conversation.Status`), `.reason`, `.transcript`
(`[{"index", "agent", "turn", "user", "assistant", "outcome", "steps"}]`), `.active_pins()`,
`.accepts_messages`, `.created_at/.started_at/.finished_at`, and from a run `run.conversation`
(None for imported runs). Token counts that are calibrated estimates (a model whose tokenizer
tiktoken does not have) are marked by `ContextDecision.estimated` / `Run.tokens_estimated`
(show "≈").
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
