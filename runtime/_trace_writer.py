"""Where trace events go: sinks, and the `TraceWriter` that stamps our metadata on every event.

    >>> JsonlFileSink("./arcana-traces")                     # <trace_dir>/<run_id>.jsonl, one file per run
    >>> CallableSink(lambda event: events.append(event))   # in-process: fn(dict) per event
    >>> MultiSink(JsonlFileSink("./arcana-traces"), CallableSink(ingest_one))
    >>> Runtime(..., trace_sinks=[CallableSink(fn)])  # replaces the default file sink

A sink is anything with `write(event: TraceEvent) -> None` and `close() -> None` (`flush()` is
optional). Sinks are synchronous and fast (file append, a function call, a queue put); the
`HttpBatchSink` batches in the background. A sink that raises does not stop a conversation: the error
is logged and the other sinks still get the event (tracing must never break the agent).

`TraceWriter` is what sessions use: one per run (a chat session, or a whole pool), it adds
`metadata.producer`, `metadata.turn`, `metadata.step` and, for pool agents, `metadata.source_agent`,
keeps the run's running budget totals, and serializes every event in the Arcana 1.2 envelope
(`docs/trace-format.md`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from . import _json_text
from ._json_text import MessageTexts, canonical_text, canonical_utf8
from ._trace import PRODUCER, TraceEvent

logger = logging.getLogger("runtime.trace")

#: The uuid5 namespace of deterministic step ids (`TraceWriter(deterministic_ids=True)`).
_ID_NAMESPACE = uuid.UUID("5b0e5a4c-4b8e-4a57-9c1e-6d1f2a3c7e10")

__all__ = ["CallableSink", "JsonlFileSink", "MultiSink", "TraceSink", "TraceWriter", "digest"]


@runtime_checkable
class TraceSink(Protocol):
    """Receives every event of every run the runtime writes."""

    def write(self, event: TraceEvent) -> None: ...

    def close(self) -> None: ...


class JsonlFileSink:
    """Appends each event as one JSON line to `<trace_dir>/<run_id>.jsonl`.

    Files are opened in append mode, line-buffered, and kept open until `close()` (a long chat writes
    many events); a lock makes writes from several threads safe and whole-line. Events of one run
    always go to the same file, so a session restored in another process keeps appending to it."""

    def __init__(self, trace_dir: str | os.PathLike[str]) -> None:
        self.trace_dir = Path(trace_dir)
        self._lock = threading.Lock()
        self._files: dict[str, IO[str]] = {}

    def path_for(self, run_id: str) -> Path:
        return self.trace_dir / f"{run_id}.jsonl"

    def write(self, event: TraceEvent) -> None:
        line = event.to_json() + "\n"
        with self._lock:
            fh = self._files.get(event.run_id)
            if fh is None:
                self.trace_dir.mkdir(parents=True, exist_ok=True)
                fh = open(self.path_for(event.run_id), "a", encoding="utf-8", buffering=1)  # noqa: SIM115
                self._files[event.run_id] = fh
            fh.write(line)

    def flush(self) -> None:
        with self._lock:
            for fh in self._files.values():
                fh.flush()

    def close_run(self, run_id: str) -> None:
        """Close the file of one finished run (a later event reopens it in append mode)."""
        with self._lock:
            fh = self._files.pop(run_id, None)
        if fh is not None:
            fh.close()

    def close(self) -> None:
        with self._lock:
            files, self._files = list(self._files.values()), {}
        for fh in files:
            fh.close()

    def __repr__(self) -> str:
        return f"JsonlFileSink({str(self.trace_dir)!r})"


class CallableSink:
    """Calls `fn(event_dict)` for every event, in the writer's thread. `event_dict` is the event as
    it would be serialized (every envelope key present) — what `POST /api/v1/ingest` takes. Pass
    `as_dict=False` to receive the `TraceEvent` itself."""

    def __init__(self, fn: Callable[[Any], Any], *, as_dict: bool = True) -> None:
        self.fn = fn
        self.as_dict = as_dict

    def write(self, event: TraceEvent) -> None:
        self.fn(event.to_dict() if self.as_dict else event)

    def close(self) -> None:
        pass


class MultiSink:
    """Fans every event out to several sinks. One failing sink does not starve the others."""

    def __init__(self, *sinks: TraceSink) -> None:
        self.sinks: tuple[TraceSink, ...] = tuple(sinks)

    def write(self, event: TraceEvent) -> None:
        for sink in self.sinks:
            try:
                sink.write(event)
            except Exception:
                logger.exception("trace sink %r failed to write an event of run %s", sink, event.run_id)

    def flush(self) -> None:
        for sink in self.sinks:
            flush = getattr(sink, "flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception:
                    logger.exception("trace sink %r failed to flush", sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("trace sink %r failed to close", sink)


def digest(value: Any) -> str:
    """Arcana's 16-hex digest: SHA-256 of canonical JSON (sorted keys, compact), first 16 hex."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def request_digest(
    messages: Sequence[Any], tools: Any, texts: Sequence[MessageTexts | None] | None = None
) -> str:
    """`digest({"messages": messages, "tools": tools})`, the same 16 hex digits, with each message's
    canonical JSON remembered across steps and the hash of the previous request's messages resumed.

    Why: a step's request repeats the history of the step before, so encoding it whole with sorted keys
    cost more than the rest of the runtime's bookkeeping (4.8 ms of a send with 200 messages, against a
    1.8 ms working set; bench/runtime_overhead.py). The canonical text of `{"messages": [...], "tools": T}`
    is `{"messages":[` + the messages' texts joined by "," + `],"tools":` + T's text + `}` (sorted keys,
    compact separators), so only messages not seen before are encoded (`runtime._json_text`); and when
    the previous request's message texts begin this one's, the SHA-256 state after them is copied and
    fed only the rest (UTF-8 of a concatenation is the concatenation of the UTF-8); otherwise from the
    last checkpoint (every 64 messages) both requests share. `texts`, if given, must be `message_texts(messages)` (the ones the request body was encoded with)."""
    global _LAST_MESSAGES
    if not _json_text.REMEMBER:
        return digest({"messages": messages, "tools": tools})
    # Each message's canonical text as UTF-8 bytes, encoded once per message (`canonical_utf8`).
    if texts is None or len(texts) != len(messages):
        parts = [canonical_text(m).encode("utf-8") for m in messages]
    else:
        parts = canonical_utf8(messages, texts)
    last = _LAST_MESSAGES
    h = None
    start = 0
    checks: list[Any] = []
    if last is not None:
        prev_parts, prev_checks, prev_state = last
        m = len(prev_parts)
        if 0 < m <= len(parts) and parts[:m] == prev_parts:
            h, start = prev_state.copy(), m
        else:
            # The last checkpoint both requests share: a step that sends an earlier message at
            # another fidelity (or drops it) differs near the end of the history, seldom before.
            j = min(len(prev_checks) - 1, len(parts) // _CHECKPOINT)
            while j > 0 and parts[: j * _CHECKPOINT] != prev_parts[: j * _CHECKPOINT]:
                j -= 1
            h, start = prev_checks[j].copy(), j * _CHECKPOINT
        checks = prev_checks[: start // _CHECKPOINT + 1]
    if h is None:
        h = hashlib.sha256(b'{"messages":[')
        checks = [h.copy()]
    # The rest, a checkpoint's worth of messages at a time.
    pos, n = start, len(parts)
    while pos < n:
        end = min((pos // _CHECKPOINT + 1) * _CHECKPOINT, n)
        chunk = b",".join(parts[pos:end])
        h.update(b"," + chunk if pos else chunk)
        pos = end
        if pos % _CHECKPOINT == 0:
            checks.append(h.copy())
    if parts:
        _LAST_MESSAGES = (parts, checks, h.copy())
    h.update(('],"tools":' + canonical_text(tools) + "}").encode("utf-8"))
    return h.hexdigest()[:16]


# The UTF-8 of the canonical texts of the last request's messages, the SHA-256 states after
# `{"messages":[` + the first 0, _CHECKPOINT, 2 × _CHECKPOINT, ... of those texts joined by ",", and
# the state after all of them. Replaced whole (never changed), so threads may share it.
_LAST_MESSAGES: tuple[list[bytes], list[Any], Any] | None = None
_CHECKPOINT = 64


class _Budgets:
    """Running totals of one run, shared by every agent of a pool."""

    def __init__(self) -> None:
        self.tokens_used = 0
        self.time_ms = 0
        self.iterations_used = 0
        # Steps begun in the run (all agents): the next step's 0-based LLM iteration, the number
        # arcana-agent 1.2's CLI knows a step by (see `TraceWriter.emit`).
        self.steps = 0

    def add(self, total_tokens: int, latency_ms: int) -> dict[str, Any]:
        """Count one provider call; the envelope `budgets` of its `llm_call` event. `tokens_used` there is
        the call's own tokens, not the running total: arcana-agent 1.2.0 sums `tokens_used` over a run's
        events (its `get_summary`), so a running total would be counted many times over."""
        self.tokens_used += total_tokens
        self.time_ms += latency_ms
        self.iterations_used += 1
        return {**self.snapshot(), "tokens_used": total_tokens}

    def snapshot(self) -> dict[str, Any]:
        # Arcana's BudgetSnapshot keys. We have no price table, so cost stays 0.0 (not null: readers sum it).
        return {
            "max_tokens": None,
            "max_cost_usd": None,
            "max_time_ms": None,
            "max_iterations": None,
            "tokens_used": self.tokens_used,
            "cost_usd": 0.0,
            "time_ms": self.time_ms,
            "iterations_used": self.iterations_used,
        }

    def to_dict(self) -> dict[str, int]:
        return {
            "tokens_used": self.tokens_used,
            "time_ms": self.time_ms,
            "iterations_used": self.iterations_used,
            "steps": self.steps,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.tokens_used = int(data.get("tokens_used", 0))
        self.time_ms = int(data.get("time_ms", 0))
        self.iterations_used = int(data.get("iterations_used", 0))
        # State saved before `steps` existed: one step per provider call is the closest count.
        self.steps = int(data.get("steps", self.iterations_used))


class TraceWriter:
    """Writes the events of one run. `for_agent(name)` gives a view that tags `source_agent`.

    `sink` may be None (tracing off): `emit()` then builds nothing and returns None, so the session
    code does not branch on whether tracing is on."""

    #: Context decisions are emitted with `plain_metadata` (no JSON round trip); False takes the
    #: round trip every other event takes (the reference the tests compare the events against).
    plain_decisions = True

    def __init__(
        self,
        sink: TraceSink | None,
        run_id: str,
        *,
        source_agent: str | None = None,
        deterministic_ids: bool = False,
        _budgets: _Budgets | None = None,
    ) -> None:
        self.sink = sink
        self.run_id = run_id
        self.source_agent = source_agent
        self.budgets = _budgets if _budgets is not None else _Budgets()
        # With deterministic ids, the n-th event of (agent, turn, step) always gets the same step_id, so
        # a turn re-run from saved state (a worker that died mid-turn) stores nothing twice.
        self.deterministic_ids = deterministic_ids
        self._seq: dict[tuple[int, int], int] = {}
        self._iterations: dict[tuple[int, int], int] = {}
        #: The run's name and tags (`metadata.run_name` / `run_tags`), stamped on every `turn` event when
        #: set (`Runtime.chat(name=…, tags=…)`); shared with the writers of a pool's agents.
        self.labels: dict[str, Any] = {}

    def iteration_of(self, turn: int, step: int) -> int:
        """The run-wide 0-based LLM iteration of this agent's step (`turn`, `step`), assigned when the
        step writes its first event."""
        key = (turn, step)
        if key not in self._iterations:
            self._iterations[key] = self.budgets.steps
            self.budgets.steps += 1
        return self._iterations[key]

    def step_id_for(self, turn: int, step: int) -> str:
        """The id of step (`turn`, `step`)'s `turn` event: random, or derived from the run, agent, turn
        and step when `deterministic_ids` is on."""
        if not self.deterministic_ids:
            return str(uuid.uuid4())
        return self._derived_id(f"{turn}/{step}/turn")

    def _derived_id(self, suffix: str) -> str:
        return str(uuid.uuid5(_ID_NAMESPACE, f"{self.run_id}\x1f{self.source_agent or ''}\x1f{suffix}"))

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    def for_agent(self, name: str) -> TraceWriter:
        """A writer for pool agent `name`: same run, same sink, same budget totals."""
        return TraceWriter(
            self.sink,
            self.run_id,
            source_agent=name,
            deterministic_ids=self.deterministic_ids,
            _budgets=self.budgets,
        )._sharing_labels(self.labels)

    def _sharing_labels(self, labels: dict[str, Any]) -> TraceWriter:
        self.labels = labels
        return self

    def emit(
        self,
        event_type: str,
        *,
        turn: int | None,
        step: int | None,
        metadata: Mapping[str, Any] | None = None,
        parent_step_id: str | None = None,
        step_id: str | None = None,
        plain_metadata: bool = False,
        decision_texts: tuple[list[dict[str, Any]], list[str]] | None = None,
        **envelope: Any,
    ) -> TraceEvent | None:
        """Write one event. `metadata` keys come after producer/turn/step/source_agent; envelope
        fields (`model`, `llm_latency_ms`, `tool_call`, `budgets`, digests, `stop_reason`, ...) are
        passed as keywords.

        Numbering (docs/trace-format.md): every event of a step carries our 1-based `console_turn` /
        `console_step`, and `turn` / `step` as before, except where arcana-agent 1.2.0's CLI reads
        its own 0-based LLM iteration: `metadata.turn` of `context_decision` and `prompt_snapshot`
        (its `replay --turn N`) and `metadata.step` of `turn` events (`explain --turn N`, `flow`).

        `plain_metadata=True` says `metadata` was built for this event alone, of dicts, lists, strings,
        ints, floats, bools and None only (as `ContextDecision.to_metadata()` is): it is then taken as
        it is, without the JSON round trip that otherwise copies it (the same values either way; the
        round trip of a context decision with a decision per message cost as much as writing it).

        `decision_texts` = (shapes, texts), for a `context_decision` event: the message decisions'
        dicts and each one's compact JSON text (`ContextDecision.decision_shapes()` and
        `decision_texts()`); the event's JSON then splices those texts in while its message decisions
        equal those dicts (`TraceEvent.to_json`)."""
        if self.sink is None:
            return None
        md: dict[str, Any] = {"producer": PRODUCER, "turn": turn, "step": step}
        if turn is not None and step is not None:
            md["console_turn"], md["console_step"] = turn, step
            iteration = self.iteration_of(turn, step)
            if event_type in ("context_decision", "prompt_snapshot"):
                md["turn"] = iteration
            elif event_type == "turn":
                md["step"] = iteration
        if event_type == "turn" and self.labels:
            md.update(self.labels)
        if self.source_agent is not None:
            md["source_agent"] = self.source_agent
        if metadata:
            for key, value in metadata.items():
                # Never let event-specific metadata overwrite the stamps above.
                if key not in md:
                    md[key] = value
        fields: dict[str, Any] = dict(envelope)
        if step_id is None and self.deterministic_ids and turn is not None and step is not None:
            n = self._seq.get((turn, step), 0)
            self._seq[(turn, step)] = n + 1
            step_id = self._derived_id(f"{turn}/{step}/{n}")
        if step_id is not None:
            fields["step_id"] = step_id
        event = TraceEvent.new(
            event_type,
            run_id=self.run_id,
            parent_step_id=parent_step_id,
            metadata=md if plain_metadata else _json_safe(md),
            **fields,
        )
        if decision_texts is not None:
            event.__dict__["_decision_texts"] = decision_texts
        try:
            self.sink.write(event)
        except Exception:
            logger.exception("trace sink failed to write a %s event of run %s", event_type, self.run_id)
        return event

    def flush(self) -> None:
        flush = getattr(self.sink, "flush", None)
        if callable(flush):
            flush()


def make_sink(sinks: Iterable[TraceSink] | TraceSink | None) -> TraceSink | None:
    """One sink for a list of sinks (None when empty)."""
    if sinks is None:
        return None
    if not isinstance(sinks, Iterable) or hasattr(sinks, "write"):
        return sinks  # type: ignore[return-value]
    items = list(sinks)
    if not items:
        return None
    return items[0] if len(items) == 1 else MultiSink(*items)


def _json_safe(value: Any) -> Any:
    """Round-trip through JSON so an event never holds objects a sink cannot serialize (and never
    aliases live session state that may change after the event was written)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))
