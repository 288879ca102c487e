"""Read trace files — ours and arcana-agent 1.2's — into runs, turns, steps and pins.

`docs/trace-format.md` is the contract this module implements. Every line goes through
`TraceEvent.from_json`, the one parser of the product; a bad line becomes a `LineError` and is skipped,
never an exception.

    >>> reader = TraceReader("./traces")              # a directory (searched recursively) or one file
    >>> [r.run_id for r in reader.runs()]             # newest first by first event time
    >>> reader.normalized(run_id)[0].turn             # 1-based, for both producers
    >>> reader.active_pins_at(run_id, turn=4)         # pins in effect at turn 4, as of turn 4
    >>> reader.messages_for_turn(run_id, turn=1)      # the conversation messages of turn 1 (our traces)
    >>> reader.line_errors                            # every skipped line so far, with its 1-based number

The normalisation is also a pure function, `normalize_events(events)`, for callers that hold events in
memory (the server's ingestion works on batches).

Numbering, for both producers (DESIGN.md §1): turns and steps are 1-based. Our runtime writes
`metadata.turn` / `metadata.step` on every event of a step. For Arcana 1.2 files each LLM iteration is a
turn (`turn.metadata.step + 1`), every turn has one step, and an event finds its turn through
`parent_step_id` (the id of its step's `turn` event).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._trace import PRODUCER, TraceEvent, decode_jsonl_line, parse_timestamp
from .errors import TraceFormatError

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
    "pin_lifetimes",
]

#: The producer name the reader gives to events without `metadata.producer` (arcana-agent 1.2).
ARCANA_PRODUCER = "arcana-1.2"


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
class NormalizedEvent:
    """One event with the numbering both producers share.

    `index` is the 1-based position in the input (file order). `turn`/`step` are 1-based, or None
    for events outside any step (`history_seeded`, unknown types with no link). `step_key` identifies
    the step (the `step_id` of its `turn` event when known); `agent` is the pool agent or None.
    """

    index: int
    event: TraceEvent
    turn: int | None
    step: int | None
    agent: str | None
    step_key: str | None
    producer: str

    @property
    def event_type(self) -> str:
        return self.event.event_type


@dataclass
class StepView:
    """One LLM call and what surrounds it: decision, snapshot, `turn` event, tool/primitive/LLM calls."""

    agent: str | None
    turn: int
    step: int
    step_id: str | None = None
    context_decision: TraceEvent | None = None
    prompt_snapshot: TraceEvent | None = None
    turn_event: TraceEvent | None = None
    tool_calls: list[TraceEvent] = field(default_factory=list)
    primitive_calls: list[TraceEvent] = field(default_factory=list)
    llm_calls: list[TraceEvent] = field(default_factory=list)
    errors: list[TraceEvent] = field(default_factory=list)
    other: list[TraceEvent] = field(default_factory=list)
    events: list[NormalizedEvent] = field(default_factory=list)


@dataclass
class TurnView:
    """The steps of one turn of one agent, in order."""

    agent: str | None
    turn: int
    steps: list[StepView] = field(default_factory=list)


def pin_active_at(created_turn: int, until_turn: int | None, unpinned_turn: int | None, turn: int) -> bool:
    """Whether a pin is in effect at `turn` (DESIGN.md §1): created ≤ t, not unpinned before t (an
    unpin in turn t still counts: the pin was rendered in that turn's steps), `until_turn` null or ≥ t.
    The one statement of the rule for traces read from files and for stored pins alike."""
    return (
        created_turn <= turn
        and (unpinned_turn is None or unpinned_turn >= turn)
        and (until_turn is None or turn <= until_turn)
    )


@dataclass(frozen=True)
class PinLifetime:
    """A pin seen in the trace: when it was made, until when it was asked to live, when it was removed.

    `tokens` is the size of the rendered pinned block when the trace says it (our `metadata.tokens`,
    or the `[PIN]` decision of a working set that rendered it), else None.
    """

    pin_id: str
    label: str | None
    content: str | None
    tokens: int | None
    created_turn: int
    until_turn: int | None
    unpinned_turn: int | None
    agent: str | None = None
    created_step: int | None = None

    def is_active_at(self, turn: int) -> bool:
        return pin_active_at(self.created_turn, self.until_turn, self.unpinned_turn, turn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pin_id": self.pin_id,
            "label": self.label,
            "content": self.content,
            "tokens": self.tokens,
            "created_turn": self.created_turn,
            "until_turn": self.until_turn,
            "unpinned_turn": self.unpinned_turn,
            "agent": self.agent,
        }


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
        }


# --------------------------------------------------------------------------------------------------
# Normalisation (pure)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalize_events(events: Iterable[TraceEvent]) -> list[NormalizedEvent]:
    """Give every event its 1-based turn, step and agent, keeping the input order.

    1. Ours (`metadata.producer == "arcana-console"`): `metadata.turn` / `metadata.step`.
    2. `turn` events of Arcana 1.2: turn = `metadata.step + 1` (0-based iteration), step 1.
    3. Other Arcana events: the turn event their `parent_step_id` names; failing that (a send that
       died before its first turn event) `metadata.turn + 1` of a context decision / prompt snapshot.
    4. Arcana's summarizer `llm_call` (parent null) belongs to the step whose decision follows it.
    The agent is the event's `source_agent`, else its step's (Arcana drops it on per-agent tool calls).
    """
    items = list(events)
    # step id of each turn event -> (turn, step, agent)
    spine: dict[str, tuple[int, int, str | None]] = {}
    for ev in items:
        if ev.event_type != "turn":
            continue
        if ev.is_ours:
            turn, step = _int_or_none(ev.metadata.get("turn")), _int_or_none(ev.metadata.get("step"))
            if turn is not None:
                spine[ev.step_id] = (turn, step or 1, ev.source_agent)
        else:
            iteration = _int_or_none(ev.metadata.get("step"))
            if iteration is not None:
                spine[ev.step_id] = (iteration + 1, 1, ev.source_agent)

    out: list[NormalizedEvent] = []
    pending: list[int] = []  # positions in `out` waiting for the next step (summarizer llm_call)
    for i, ev in enumerate(items, start=1):
        producer = PRODUCER if ev.is_ours else ARCANA_PRODUCER
        turn: int | None = None
        step: int | None = None
        agent = ev.source_agent
        key: str | None = None
        if ev.is_ours and _int_or_none(ev.metadata.get("turn")) is not None:
            turn = _int_or_none(ev.metadata.get("turn"))
            step = _int_or_none(ev.metadata.get("step")) or 1
            key = ev.step_id if ev.event_type == "turn" else ev.parent_step_id
            if key is None or (key not in spine and ev.event_type != "turn"):
                key = f"{agent or ''}#{turn}.{step}"
        elif ev.event_type == "turn" and ev.step_id in spine:
            turn, step, _ = spine[ev.step_id]
            key = ev.step_id
        elif ev.parent_step_id is not None and ev.parent_step_id in spine:
            turn, step, spine_agent = spine[ev.parent_step_id]
            agent = agent or spine_agent
            key = ev.parent_step_id
        elif ev.event_type in ("context_decision", "prompt_snapshot"):
            iteration = _int_or_none(ev.metadata.get("turn"))
            if iteration is not None:
                turn, step = iteration + 1, 1
                key = ev.parent_step_id or f"{agent or ''}#{turn}.1"
        normalized = NormalizedEvent(i, ev, turn, step, agent, key, producer)
        if turn is None and ev.event_type == "llm_call" and not ev.is_ours:
            pending.append(len(out))
        elif turn is not None and pending:
            for pos in pending:
                prev = out[pos]
                out[pos] = NormalizedEvent(
                    prev.index, prev.event, turn, step, prev.agent or agent, key, prev.producer
                )
            pending = []
        out.append(normalized)
    # Our keys for events of a step are the turn event's id when it is known; make them uniform so a
    # step whose events point at its turn event and one keyed by number are the same step.
    by_number: dict[tuple[str | None, int, int], str] = {}
    for ne in out:
        if ne.event_type == "turn" and ne.turn is not None and ne.step is not None:
            by_number.setdefault((ne.agent, ne.turn, ne.step), ne.event.step_id)
    fixed: list[NormalizedEvent] = []
    for ne in out:
        if ne.turn is not None and ne.step is not None:
            real = by_number.get((ne.agent, ne.turn, ne.step))
            if real is not None and ne.step_key != real:
                ne = NormalizedEvent(ne.index, ne.event, ne.turn, ne.step, ne.agent, real, ne.producer)
        fixed.append(ne)
    return fixed


def build_steps(normalized: Iterable[NormalizedEvent], agent: str | None = None) -> list[TurnView]:
    """Group normalised events into turns and steps, ordered by (agent, turn, step) of first appearance.

    `agent=None` keeps every agent; otherwise only that agent's events.
    """
    steps: dict[tuple[str | None, int, int], StepView] = {}
    for ne in normalized:
        if ne.turn is None or ne.step is None:
            continue
        if agent is not None and ne.agent != agent:
            continue
        k = (ne.agent, ne.turn, ne.step)
        sv = steps.get(k)
        if sv is None:
            sv = steps[k] = StepView(agent=ne.agent, turn=ne.turn, step=ne.step)
        ev = ne.event
        sv.events.append(ne)
        kind = ev.event_type
        if kind == "turn":
            sv.turn_event = sv.turn_event or ev
            sv.step_id = ev.step_id
        elif kind == "context_decision" and sv.context_decision is None:
            sv.context_decision = ev
        elif kind == "prompt_snapshot" and sv.prompt_snapshot is None:
            sv.prompt_snapshot = ev
        elif kind == "tool_call":
            sv.tool_calls.append(ev)
        elif kind == "cognitive_primitive":
            sv.primitive_calls.append(ev)
        elif kind == "llm_call":
            sv.llm_calls.append(ev)
        elif kind == "error":
            sv.errors.append(ev)
        else:
            sv.other.append(ev)
        # Synthetic keys (no turn event known) contain "#"; real ones are the turn event's step_id.
        if sv.step_id is None and ne.step_key and "#" not in ne.step_key:
            sv.step_id = ne.step_key
    agents_order: list[str | None] = []
    for k in steps:
        if k[0] not in agents_order:
            agents_order.append(k[0])
    turns: dict[tuple[str | None, int], TurnView] = {}
    for k in sorted(steps, key=lambda k: (agents_order.index(k[0]), k[1], k[2])):
        tv = turns.get((k[0], k[1]))
        if tv is None:
            tv = turns[(k[0], k[1])] = TurnView(agent=k[0], turn=k[1])
        tv.steps.append(steps[k])
    return list(turns.values())


# --------------------------------------------------------------------------------------------------
# Pins


def _pinned_decisions(cd: TraceEvent | None) -> list[dict[str, Any]]:
    if cd is None:
        return []
    decision = cd.metadata.get("context_decision")
    rows = decision.get("decisions") if isinstance(decision, dict) else None
    if not isinstance(rows, list):
        return []
    return [
        d for d in rows if isinstance(d, dict) and (d.get("reason") == "pinned" or d.get("pinned") is True)
    ]


def pin_lifetimes(turns: Iterable[TurnView]) -> list[PinLifetime]:
    """Every pin created in these turns, in creation order, with its lifetime and token count.

    Creation: a `pin` primitive whose result has `pinned: true, already_pinned: false`. End: an `unpin`
    whose result has `unpinned: true`. Pins are per agent (their ids are unique anyway).
    Token counts: our `metadata.tokens`, else a `[PIN]` decision naming the `pin_id`, else (Arcana 1.2,
    whose decisions carry no pin id) the k-th `[PIN]` decision of a step that rendered exactly the pins
    Arcana renders there (created in an earlier iteration, not yet unpinned, `until_turn` ≥ the 0-based
    iteration — its §3.5 rule), in creation order.
    """
    turn_list = list(turns)
    found: dict[tuple[str | None, str], dict[str, Any]] = {}
    for tv in turn_list:
        for sv in tv.steps:
            for ev in sv.primitive_calls:
                md = ev.metadata
                result = md.get("result") if isinstance(md.get("result"), dict) else {}
                args = md.get("args") if isinstance(md.get("args"), dict) else {}
                prim = md.get("primitive")
                pin_id = result.get("pin_id")
                if not isinstance(pin_id, str):
                    continue
                key = (sv.agent, pin_id)
                if (
                    prim == "pin"
                    and result.get("pinned") is True
                    and result.get("already_pinned") is not True
                ):
                    if key in found:
                        continue
                    content = args.get("content")
                    label = result.get("label", args.get("label"))
                    found[key] = {
                        "pin_id": pin_id,
                        "label": label if isinstance(label, str) else None,
                        "content": content if isinstance(content, str) else None,
                        "tokens": _int_or_none(md.get("tokens")),
                        "created_turn": tv.turn,
                        "created_step": sv.step,
                        "until_turn": _int_or_none(result.get("until_turn")),
                        "unpinned_turn": None,
                        "agent": sv.agent,
                        "producer": PRODUCER if ev.is_ours else ARCANA_PRODUCER,
                    }
                elif prim == "unpin" and result.get("unpinned") is True and key in found:
                    if found[key]["unpinned_turn"] is None:
                        found[key]["unpinned_turn"] = tv.turn
    # Token counts from the working sets that rendered the pins.
    for tv in turn_list:
        for sv in tv.steps:
            rows = _pinned_decisions(sv.context_decision)
            if not rows:
                continue
            unnamed: list[dict[str, Any]] = []
            for row in rows:
                pid = row.get("pin_id")
                tokens = _int_or_none(row.get("token_count_after")) or _int_or_none(
                    row.get("token_count_before")
                )
                if isinstance(pid, str) and (sv.agent, pid) in found:
                    entry = found[(sv.agent, pid)]
                    if entry["tokens"] is None:
                        entry["tokens"] = tokens
                else:
                    unnamed.append(row)
            if not unnamed:
                continue
            rendered = [
                p
                for p in found.values()
                if p["agent"] == sv.agent
                and p["producer"] == ARCANA_PRODUCER
                and p["created_turn"] < sv.turn
                and (p["unpinned_turn"] is None or p["unpinned_turn"] >= sv.turn)
                and (p["until_turn"] is None or p["until_turn"] >= sv.turn - 1)
            ]
            if len(rendered) == len(unnamed):
                for p, row in zip(rendered, unnamed, strict=True):
                    if p["tokens"] is None:
                        p["tokens"] = _int_or_none(row.get("token_count_after"))
    return [
        PinLifetime(
            pin_id=p["pin_id"],
            label=p["label"],
            content=p["content"],
            tokens=p["tokens"],
            created_turn=p["created_turn"],
            until_turn=p["until_turn"],
            unpinned_turn=p["unpinned_turn"],
            agent=p["agent"],
            created_step=p["created_step"],
        )
        for p in found.values()
    ]


def active_pins(pins: Iterable[PinLifetime], turn: int) -> list[PinLifetime]:
    """The pins in effect at `turn`, judged as of that turn (DESIGN.md §1, `PinLifetime.is_active_at`)."""
    return [p for p in pins if p.is_active_at(turn)]


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


def read_file(path: str | Path) -> tuple[list[TraceEvent], list[LineError]]:
    """Parse one `.jsonl` / `.jsonl.gz` file. Bad lines are skipped and returned as `LineError`s
    (a UTF-8 BOM and CRLF line ends are accepted; blank lines are ignored). Never raises for content;
    a file that cannot be opened or decompressed yields one `LineError` with line 0 (or at the line
    where reading stopped)."""
    p = Path(path)
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
    return p.is_file() and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz"))


def _stem(p: Path) -> str:
    name = p.name
    for suffix in (".jsonl.gz", ".jsonl"):
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
