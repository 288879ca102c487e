"""Read trace files — ours and arcana-agent 1.2's — into runs, turns, steps and pins.

`docs/trace-format.md` is the contract this module implements. Every line goes through
`TraceEvent.from_json`, the one parser of the product; a bad line becomes a `LineError` and is skipped,
never an exception.

    >>> reader = TraceReader("./arcana-traces")              # a directory (searched recursively) or one file
    >>> [r.run_id for r in reader.runs()]             # newest first by first event time
    >>> reader.normalized(run_id)[0].turn             # 1-based, for both producers
    >>> reader.active_pins_at(run_id, turn=4)         # pins in effect at turn 4, as of turn 4
    >>> reader.messages_for_turn(run_id, turn=1)      # the conversation messages of turn 1 (our traces)
    >>> reader.line_errors                            # every skipped line so far, with its 1-based number

What the events mean (numbering, pins, outcomes, failures) is `runtime.facts`; this module reads files
and groups their events by run.

Numbering, for both producers (DESIGN.md §1): turns and steps are 1-based. Our runtime writes
`metadata.turn` / `metadata.step` on every event of a step. For Arcana 1.2 files each LLM iteration is a
turn (`turn.metadata.step + 1`), every turn has one step, and an event finds its turn through
`parent_step_id` (the id of its step's `turn` event).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._trace import PRODUCER, TraceEvent, decode_jsonl_line, parse_timestamp
from .errors import TraceFormatError

# What events mean is `runtime.facts`; these names stay importable from here for older callers.
from .facts import (
    ARCANA_PRODUCER,
    NormalizedEvent,
    PinLifetime,
    StepView,
    TurnView,
    active_pins,
    build_steps,
    normalize_events,
    pin_active_at,
    pin_lifetimes,
    run_links,
    run_outcome,
)

__all__ = [
    "ARCANA_PRODUCER",
    "LineError",
    "NormalizedEvent",
    "PinLifetime",
    "RunNotFound",
    "RunSummary",
    "StepView",
    "TraceReader",
    "TurnView",
    "active_pins",
    "build_steps",
    "messages_for_steps",
    "normalize_events",
    "pin_active_at",
    "pin_lifetimes",
]


class RunNotFound(KeyError):
    """Raised by `TraceReader` methods when no event of the run id (or unique prefix) was read."""

    def __init__(self, run_id: str, *, candidates: Sequence[str] = ()) -> None:
        super().__init__(run_id)
        self.run_id = run_id
        self.candidates = list(candidates)

    def __str__(self) -> str:
        if self.candidates:
            return f"run id prefix {self.run_id!r} is ambiguous: {', '.join(self.candidates[:5])}"
        return f"no run {self.run_id!r} in the trace files"


@dataclass(frozen=True)
class LineError:
    """A line that was skipped. `line` is 1-based; 0 means the whole file could not be read."""

    path: str
    line: int
    error: str

    def __str__(self) -> str:
        where = self.path if self.line == 0 else f"{self.path}:{self.line}"
        return f"{where}: {self.error}"


@dataclass(frozen=True)
class RunSummary:
    """One line of `arcana trace list`."""

    run_id: str
    files: tuple[str, ...]
    agents: tuple[str, ...]
    turns: int
    steps: int
    events: int
    primitives: int
    size: int
    started: str | None
    producer: str
    # `runtime.facts.run_outcome` and `run_links` of the run: the same answers the server gives.
    status: str = "running"
    errors: int = 0
    failure: str | None = None
    bundle_id: str | None = None
    delegated_by_run_id: str | None = None

    @property
    def file(self) -> str:
        return self.files[0] if self.files else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "file": self.file,
            "files": list(self.files),
            "agents": list(self.agents),
            "turns": self.turns,
            "steps": self.steps,
            "events": self.events,
            "primitives": self.primitives,
            "size": self.size,
            "started": self.started,
            "producer": self.producer,
            "status": self.status,
            "errors": self.errors,
            "failure": self.failure,
            "bundle_id": self.bundle_id,
            "delegated_by_run_id": self.delegated_by_run_id,
        }


# --------------------------------------------------------------------------------------------------
# Messages of a turn (recall fallback)


def _tool_content(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def messages_for_steps(steps: Iterable[StepView]) -> list[dict[str, Any]] | None:
    """Rebuild the conversation messages these steps appended to the history (docs/trace-format.md).

    Per step: the `turn` event's `metadata.messages`, then one `{"role": "tool", "tool_call_id",
    "content"}` per primitive / tool call (and per `error` event naming a `tool_call_id`: an unknown
    tool, whose content is the error's `result` or `message`), in the order the assistant message
    asked for them (file order for calls the assistant message does not list). Primitive results are
    JSON-encoded; string tool results are used as they are. Returns None when no step carries
    `metadata.messages` (Arcana 1.2 files do not record the messages).
    """
    out: list[dict[str, Any]] = []
    any_messages = False
    for sv in steps:
        turn_ev = sv.turn_event
        messages = turn_ev.metadata.get("messages") if turn_ev is not None else None
        if not isinstance(messages, list):
            continue
        any_messages = True
        step_messages = [dict(m) for m in messages if isinstance(m, dict)]
        out.extend(step_messages)
        results: list[tuple[str, str]] = []
        calls = sorted(
            [e for e in sv.events if e.event_type in ("cognitive_primitive", "tool_call", "error")],
            key=lambda e: e.index,
        )
        for ne in calls:
            md = ne.event.metadata
            call_id = md.get("tool_call_id")
            if not isinstance(call_id, str):
                continue
            value = md.get("result")
            if ne.event_type == "error" and value is None:
                # An unknown tool: the model was told so in a tool message; the error event says what.
                value = md.get("message") or md.get("error") or ""
            if ne.event_type == "tool_call" and value is None and ne.event.tool_call:
                value = ne.event.tool_call.get("error") or ""
            results.append((call_id, _tool_content(value)))
        order: list[str] = []
        for m in step_messages:
            for tc in m.get("tool_calls") or []:
                if isinstance(tc, dict) and isinstance(tc.get("id"), str):
                    order.append(tc["id"])
        position = {cid: i for i, cid in enumerate(order)}
        results.sort(key=lambda r: position.get(r[0], len(order)))
        out.extend({"role": "tool", "tool_call_id": cid, "content": content} for cid, content in results)
    return out if any_messages else None


# --------------------------------------------------------------------------------------------------
# Files


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        yield from enumerate(fh, start=1)


def _is_otlp_file(p: Path) -> bool:
    """A `.json` / `.json.gz` file whose first bytes name OTLP's `resourceSpans` (other JSON files in a
    folder of traces, such as a scenario, are not traces)."""
    if not p.name.endswith((".json", ".json.gz")):
        return False
    try:
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rb") as fh:
            head = fh.read(4096)
    except (OSError, EOFError, gzip.BadGzipFile):
        return True  # named as one: read_otlp_file reports why it cannot be read
    return b"resourceSpans" in head or b"resource_spans" in head


def read_otlp_file(path: str | Path) -> tuple[list[TraceEvent], list[LineError]]:
    """Parse one OTLP/JSON file — an `ExportTraceServiceRequest` per line (what the OpenTelemetry
    Collector's file exporter writes) or one for the whole file — into the events of its runs, as the
    server derives them (`runtime.otlp`: conventions read, runs assembled, context decisions
    reconstructed). A refused span or an unreadable line is a `LineError`; the rest is read."""
    from .otlp import (
        OtlpDecodeError,
        assemble_run,
        decode_request,
        events_for_run,
        group_runs,
        normalize_span,
    )

    p = Path(path)
    spans: list[Any] = []
    errors: list[LineError] = []
    try:
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        return [], [LineError(str(p), 0, f"cannot read file: {exc}")]
    stripped = data.strip()
    lines = (
        [(1, stripped)]
        if stripped.startswith(b"{") and b"\n{" not in stripped
        else list(enumerate(data.splitlines(), start=1))
    )
    for number, raw in lines:
        if not raw.strip():
            continue
        try:
            decoded = decode_request(raw, "application/json")
        except OtlpDecodeError as exc:
            errors.append(LineError(str(p), number, str(exc)))
            continue
        errors.extend(LineError(str(p), number, r["message"]) for r in decoded.rejections)
        spans.extend(normalize_span(s) for s in decoded.spans)
    events: list[TraceEvent] = []
    for run_spans in group_runs(spans).values():
        for ev in events_for_run(assemble_run(run_spans)):
            try:
                events.append(TraceEvent.from_dict(ev))
            except TraceFormatError as exc:
                errors.append(LineError(str(p), 0, exc.reason))
    return events, errors


def read_file(path: str | Path) -> tuple[list[TraceEvent], list[LineError]]:
    """Parse one `.jsonl` / `.jsonl.gz` file (an OTLP/JSON `.json` file: `read_otlp_file`). Bad lines are skipped and returned as `LineError`s
    (a UTF-8 BOM and CRLF line ends are accepted; blank lines are ignored). Never raises for content;
    a file that cannot be opened or decompressed yields one `LineError` with line 0 (or at the line
    where reading stopped)."""
    p = Path(path)
    if _is_otlp_file(p):
        return read_otlp_file(p)
    events: list[TraceEvent] = []
    errors: list[LineError] = []
    last = 0
    try:
        for number, raw in _iter_lines(p):
            last = number
            decoded, error = decode_jsonl_line(number, raw)
            if error is not None:
                errors.append(LineError(str(p), number, error))
            if decoded is None:
                continue
            try:
                events.append(TraceEvent.from_json(decoded, line=number))
            except TraceFormatError as exc:
                errors.append(LineError(str(p), number, exc.reason))
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        errors.append(LineError(str(p), last + 1 if last else 0, f"cannot read file: {exc}"))
    return events, errors


def _is_trace_file(p: Path) -> bool:
    return p.is_file() and (p.name.endswith((".jsonl", ".jsonl.gz")) or _is_otlp_file(p))


def _stem(p: Path) -> str:
    name = p.name
    for suffix in (".jsonl.gz", ".jsonl", ".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class TraceReader:
    """Runs from a directory of trace files (searched recursively) or from one file.

    Files are parsed lazily and at most once per reader. Run ids may be given as a unique prefix.
    `line_errors` lists every line skipped in the files read so far. Methods raise `RunNotFound` for
    an unknown run id; nothing else raises for bad trace content.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._files: list[Path] | None = None
        self._parsed: dict[Path, list[TraceEvent]] = {}
        self._errors: dict[Path, list[LineError]] = {}
        self._runs: dict[str, list[tuple[Path, TraceEvent]]] | None = None
        self._norm_cache: dict[str, list[NormalizedEvent]] = {}

    # -- files ---------------------------------------------------------------------------------------
    @property
    def files(self) -> list[Path]:
        """Trace files under `path`, sorted by path. Empty if `path` does not exist."""
        if self._files is None:
            if self.path.is_file():
                self._files = [self.path]
            elif self.path.is_dir():
                self._files = sorted(p for p in self.path.rglob("*") if _is_trace_file(p))
            else:
                self._files = []
        return self._files

    @property
    def line_errors(self) -> list[LineError]:
        """Every line skipped in the files parsed so far, in file then line order."""
        return [err for p in sorted(self._errors) for err in self._errors[p]]

    def _parse(self, p: Path) -> list[TraceEvent]:
        if p not in self._parsed:
            self._parsed[p], self._errors[p] = read_file(p)
        return self._parsed[p]

    def _load_all(self) -> dict[str, list[tuple[Path, TraceEvent]]]:
        if self._runs is None:
            runs: dict[str, list[tuple[Path, TraceEvent]]] = {}
            for p in self.files:
                for ev in self._parse(p):
                    runs.setdefault(ev.run_id, []).append((p, ev))
            self._runs = runs
        return self._runs

    def resolve(self, run_id: str) -> str:
        """The full run id for `run_id` or a unique prefix of one. Raises `RunNotFound`."""
        # Fast path: a file named after the run (both producers name files `<run_id>.jsonl`).
        if self._runs is None:
            named = [p for p in self.files if _stem(p) == run_id]
            if named and any(ev.run_id == run_id for p in named for ev in self._parse(p)):
                return run_id
        runs = self._load_all()
        if run_id in runs:
            return run_id
        matches = sorted(r for r in runs if r.startswith(run_id)) if run_id else []
        if len(matches) == 1:
            return matches[0]
        raise RunNotFound(run_id, candidates=matches)

    def files_of(self, run_id: str) -> list[str]:
        """The files holding events of the run."""
        rid = self.resolve(run_id)
        return sorted({str(p) for p, _ in self._run_events(rid)})

    def _run_events(self, rid: str) -> list[tuple[Path, TraceEvent]]:
        if self._runs is None:
            named = [p for p in self.files if _stem(p) == rid]
            return [(p, ev) for p in named for ev in self._parse(p) if ev.run_id == rid]
        return self._runs.get(rid, [])

    # -- runs ----------------------------------------------------------------------------------------
    def runs(self) -> list[RunSummary]:
        """Every run, newest first by its first event time (runs without a valid time last)."""
        summaries = [self._summary(rid, pairs) for rid, pairs in self._load_all().items()]

        def sort_key(s: RunSummary) -> tuple[int, datetime | str, str]:
            if s.started is None:
                return (1, "", s.run_id)
            return (0, parse_timestamp(s.started), s.run_id)

        started = sorted((s for s in summaries if s.started is not None), key=sort_key, reverse=True)
        return started + sorted((s for s in summaries if s.started is None), key=lambda s: s.run_id)

    def _summary(self, rid: str, pairs: list[tuple[Path, TraceEvent]]) -> RunSummary:
        normalized = self.normalized(rid)
        files = sorted({str(p) for p, _ in pairs})
        size = sum(Path(f).stat().st_size for f in files if Path(f).exists())
        agents = sorted({ne.agent for ne in normalized if ne.agent})
        turns = {(ne.agent, ne.turn) for ne in normalized if ne.turn is not None}
        steps = {(ne.agent, ne.turn, ne.step) for ne in normalized if ne.turn is not None}
        first = min((ev.timestamp_dt for _, ev in pairs), default=None)
        ours = any(ne.producer == PRODUCER for ne in normalized)
        events = [ev for _, ev in pairs]
        outcome = run_outcome(build_steps(normalized), events)
        links = run_links(events)
        return RunSummary(
            run_id=rid,
            files=tuple(files),
            agents=tuple(agents),
            turns=len(turns),
            steps=len(steps),
            events=len(normalized),
            primitives=sum(1 for ne in normalized if ne.event_type == "cognitive_primitive"),
            size=size,
            started=first.astimezone(UTC).isoformat() if first is not None else None,
            producer=PRODUCER if ours else ARCANA_PRODUCER,
            status=outcome.status,
            errors=outcome.errors,
            failure=outcome.reason,
            bundle_id=links.bundle_id,
            delegated_by_run_id=links.delegated_by_run_id,
        )

    def summary(self, run_id: str) -> RunSummary:
        rid = self.resolve(run_id)
        return self._summary(rid, self._run_events(rid))

    # -- one run -------------------------------------------------------------------------------------
    def events(self, run_id: str) -> list[TraceEvent]:
        """The run's events in file order (files sorted by path). Raises `RunNotFound`."""
        rid = self.resolve(run_id)
        return [ev for _, ev in self._run_events(rid)]

    def normalized(self, run_id: str) -> list[NormalizedEvent]:
        """`normalize_events(self.events(run_id))`, cached."""
        rid = self.resolve(run_id)
        if rid not in self._norm_cache:
            self._norm_cache[rid] = normalize_events(ev for _, ev in self._run_events(rid))
        return self._norm_cache[rid]

    def agents(self, run_id: str) -> list[str]:
        """Names of the pool agents of the run (empty for a plain chat)."""
        return sorted({ne.agent for ne in self.normalized(run_id) if ne.agent})

    def turns(self, run_id: str, agent: str | None = None) -> list[TurnView]:
        """The run's turns (all agents when `agent` is None), each with its steps in order."""
        return build_steps(self.normalized(run_id), agent=agent)

    def steps(self, run_id: str, turn: int, agent: str | None = None) -> list[StepView]:
        """The steps of `turn` (1-based); of every agent that has that turn when `agent` is None."""
        return [sv for tv in self.turns(run_id, agent) if tv.turn == turn for sv in tv.steps]

    def pins(self, run_id: str, agent: str | None = None) -> list[PinLifetime]:
        """Every pin of the run (of `agent` if given), in creation order."""
        return pin_lifetimes(self.turns(run_id, agent))

    def active_pins_at(self, run_id: str, turn: int, agent: str | None = None) -> list[PinLifetime]:
        """Pins in effect at `turn` (1-based), judged as of that turn: pins created later, unpinned in an
        earlier turn or expired (`until_turn` < turn) are not listed."""
        return active_pins(self.pins(run_id, agent), turn)

    def messages_for_turn(
        self, run_id: str, turn: int, agent: str | None = None
    ) -> list[dict[str, Any]] | None:
        """The messages turn `turn` (1-based) added to the conversation, rebuilt from a trace of ours
        (see `messages_for_steps`). None when the run or the turn is not in the trace, or the trace does
        not record messages (Arcana 1.2). Never raises for a missing run."""
        try:
            steps = self.steps(run_id, turn, agent)
        except RunNotFound:
            return None
        if agent is None:
            # A plain chat has one unnamed agent; in a pool the caller must say whose turn it is.
            steps = [sv for sv in steps if sv.agent is None] or steps
        if not steps:
            return None
        return messages_for_steps(steps)
