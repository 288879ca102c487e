"""Comparing two stored runs: the projections fed to `runtime.compare`, the one implementation.

`runtime.compare` aligns turns, finds the first divergence of the working sets and diffs them, on
plain data; `arcana trace diff` feeds it trace files, this module feeds it the projections (never the
raw events), so the page (`traces/compare/views.py`) and the API (`GET /api/v1/compare`) answer what
the CLI answers. Reading one run is a fixed number of queries (turns, steps, step-1 messages,
decisions, pins, primitive calls), whatever its length.

Addresses: a run is named `<project_id>:<run_id>` in the `a` / `b` query parameters (DESIGN.md §9).
The project id is an integer, so the first `:` ends it and the rest — colons and any other character
included — is the run id, as stored; the query string is URL-encoded like any other value
(`compare_url` builds it).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.core.cache import cache
from django.urls import reverse

from runtime.compare import (
    ABSENT,
    MAX_INDEX,
    Comparison,
    PinData,
    RunData,
    StepData,
    TurnData,
    compare,
    level_of,
    pin_key,
)
from runtime.facts import primitive_outcome
from traces.core import access
from traces.models import (
    MESSAGE_DECISION_KEYS,
    ContextDecision,
    Pin,
    PrimitiveEvent,
    Run,
    Step,
    Turn,
)

__all__ = ["compare_runs", "compare_url", "find_run", "load_details", "parse_run_ref", "run_data", "run_ref"]


def run_ref(run: Run) -> str:
    """`<project_id>:<run_id>`, how the compare page and API name a run."""
    return f"{run.project_id}:{run.run_id}"


def parse_run_ref(value: str | None) -> tuple[int, str] | None:
    """(project_id, run_id) of `<project_id>:<run_id>`, or None when it is not of that form."""
    if not value:
        return None
    head, sep, rest = value.partition(":")
    if not sep or not rest or not head.isascii() or not head.isdigit() or len(head) > 18:
        return None
    # No stored run id holds a NUL or is longer than 200 characters (ingest's rule), and PostgreSQL
    # refuses a NUL in a query: such a ref names nothing.
    if "\x00" in rest or len(rest) > 200:
        return None
    return int(head), rest


def compare_url(a: Run | str, b: Run | str, **extra: Any) -> str:
    """The compare page of two runs (or two `<project_id>:<run_id>` refs), URL-encoded."""
    params = {"a": a if isinstance(a, str) else run_ref(a), "b": b if isinstance(b, str) else run_ref(b)}
    params.update({k: v for k, v in extra.items() if v is not None})
    return reverse("traces:compare") + "?" + urlencode(params)


def find_run(caller: Any, ref: str | None) -> Run | None:
    """The run `ref` names if `caller` may read it (`traces.core.access`), else None."""
    parsed = parse_run_ref(ref)
    if parsed is None:
        return None
    return access.find_run(caller, *parsed)


def _agent_of(run: Run, agent: str | None) -> str:
    agents = list(run.agents or [])
    if agent is not None and agent in agents:
        return agent
    return agents[0] if agents else ""


def _rows(table: str) -> tuple[list[Any], dict[str, int]]:
    """The packed message table's rows as lists, and the index of each column (`pack_message_decisions`)."""
    value = json.loads(table) if table else {}
    if isinstance(value, list):  # a plain list of decision objects (rows stored long ago)
        cols = list(MESSAGE_DECISION_KEYS)
        return [[d.get(k) for k in cols] for d in value if isinstance(d, dict)], {
            c: i for i, c in enumerate(cols)
        }
    cols = value.get("cols") or list(MESSAGE_DECISION_KEYS)
    return value.get("rows") or [], {c: i for i, c in enumerate(cols)}


#: Bumped when `RunData`'s shape changes, so cached copies of an older shape are not read.
CACHE_VERSION = 1
CACHE_SECONDS = 3600


def run_data(run: Run, agent: str | None = None) -> RunData:
    """`runtime.compare.RunData` of one agent of a stored run (the first, or the plain chat), from its
    projections: six queries, whatever the run's length.

    Why a cache: the level strings of a long run come from every step's packed decisions (1,000 steps
    × 200 decisions is 16 MB of JSON to parse, ~0.4 s); a finished run never changes, and a changed run
    has a new `updated_at`, hence a new key. Only runs that are not updating are cached."""
    agent = _agent_of(run, agent)
    stamp = run.updated_at.isoformat() if run.updated_at else ""
    key = f"arcana:compare:{CACHE_VERSION}:{run.pk}:{stamp}:{agent}"
    cached = cache.get(key)
    if isinstance(cached, RunData):
        return cached
    data = _run_data(run, agent)
    data.level_changes()  # worked out now, so the cached copy holds it
    if not run.is_updating:
        cache.set(key, data, CACHE_SECONDS)
    return data


def _run_data(run: Run, agent: str) -> RunData:
    pins = [
        PinData(pid, label or None, content or None, tokens, created, until, unpinned)
        for pid, label, content, tokens, created, until, unpinned in Pin.objects.filter(run=run, agent=agent)
        .order_by("created_turn", "created_step", "id")
        .values_list("pin_id", "label", "content", "tokens", "created_turn", "until_turn", "unpinned_turn")
    ]
    key_of = {p.pin_id: p.key for p in pins}
    data = RunData(
        run_id=run.run_id,
        pins=pins,
        status=run.status,
        failure=run.failure or None,
        model=run.model or None,
        producer="arcana-console" if run.source == Run.Source.RUNTIME else "arcana-1.2",
        agent=agent or None,
        duration_seconds=run.duration_seconds,
    )
    turns = _turns(run, agent, data)
    _steps(run, agent, turns, key_of)
    _primitives(run, agent, turns, data)
    data.turns = list(turns.values())
    return data


def _turns(run: Run, agent: str, data: RunData) -> dict[int, TurnData]:
    """The agent's turns with their counts and user message; their tool calls and errors are added to
    `data`'s totals (two queries)."""
    turns: dict[int, TurnData] = {}
    for number, prompt, completion, util, tool_calls, errors in (
        Turn.objects.filter(run=run, agent=agent)
        .order_by("number")
        .values_list(
            "number", "prompt_tokens", "completion_tokens", "peak_utilization", "tool_calls", "errors"
        )
    ):
        turns[number] = TurnData(
            number=number,
            prompt_tokens=prompt,
            completion_tokens=completion,
            peak_utilization=util,
            tool_calls=tool_calls,
            errors=errors,
        )
        data.tool_calls += tool_calls
        data.errors += errors
    # A turn's user message is the first `user` message its first step appended (our runtime only).
    for number, messages in Step.objects.filter(run=run, agent=agent, number=1).values_list(
        "turn_number", "messages"
    ):
        t = turns.get(number)
        if t is not None and isinstance(messages, list):
            t.user = next(
                (m["content"] for m in messages if isinstance(m, dict) and m.get("role") == "user"
                 and isinstance(m.get("content"), str)),
                None,
            )  # fmt: skip
    return turns


def _steps(run: Run, agent: str, turns: dict[int, TurnData], key_of: dict[str, str]) -> None:
    """Each turn's steps, its answer, and each step's working set (two queries)."""
    steps: dict[tuple[int, int], StepData] = {}
    for number, step_number, text in (
        Step.objects.filter(run=run, agent=agent)
        .order_by("turn_number", "number")
        .values_list("turn_number", "number", "assistant_text")
    ):
        t = turns.get(number)
        if t is None:
            continue
        s = StepData(turn=number, step=step_number, has_decision=False)
        steps[(number, step_number)] = s
        t.steps.append(s)
        if text:
            t.answer = text
    for number, step_number, strategy, util, table in ContextDecision.objects.filter(
        run=run, agent=agent
    ).values_list("turn_number", "step_number", "strategy", "utilization", "message_table"):
        found = steps.get((number, step_number))
        if found is None:
            continue
        found.has_decision, found.strategy, found.utilization = True, strategy or None, util
        _fill_working_set(found, table, key_of)


def _primitives(run: Run, agent: str, turns: dict[int, TurnData], data: RunData) -> None:
    """Each turn's primitive calls in their one wording, and the run's pin / recall counts (one query)."""
    for turn_number, primitive, args, result in (
        PrimitiveEvent.objects.filter(run=run, agent=agent)
        .order_by("timestamp", "id")
        .values_list("turn_number", "primitive", "args", "result")
    ):
        o = primitive_outcome(primitive, args, result)
        owner = turns.get(turn_number) if turn_number is not None else None
        if owner is not None:
            owner.primitives.append(o.line)
        data.count_primitive(o)


_LEVEL_CHAR: dict[tuple[Any, Any], str] = {}


def _level_char(outcome: Any, fidelity: Any) -> str:
    key = (outcome, fidelity)
    char = _LEVEL_CHAR.get(key)
    if char is None:
        char = str(level_of(outcome, fidelity))
        if len(_LEVEL_CHAR) < 1000:  # producers write few distinct pairs; bounded against odd ones
            _LEVEL_CHAR[key] = char
    return char


def _fill_working_set(s: StepData, table: str, key_of: dict[str, str], *, details: bool = False) -> None:
    """The step's level string and pinned blocks from its packed decisions (the hot loop of a long run:
    columns by position, one character per message), and with `details` its roles and token counts."""
    rows, col = _rows(table)
    i_index, i_role, i_out, i_fid = col["index"], col["role"], col["outcome"], col["fidelity"]
    i_after, i_pinned, i_reason = col["token_count_after"], col["pinned"], col["reason"]
    i_pin = col.get("pin_id")
    pins = s.pins
    cache = _LEVEL_CHAR
    chars: list[str] = []
    info: dict[int, tuple[str | None, int | None]] = {}
    for r in rows:
        if r[i_pinned] or r[i_reason] == "pinned":
            pid = r[i_pin] if i_pin is not None else None
            pins[key_of.get(pid or "") or pin_key(pid, None, None)] = pid or "?"
            continue
        index = r[i_index]
        if index.__class__ is not int or not 0 <= index <= MAX_INDEX:
            continue
        char = cache.get((r[i_out], r[i_fid])) or _level_char(r[i_out], r[i_fid])
        n = len(chars)
        if index == n:
            chars.append(char)
        elif index > n:
            chars.extend(ABSENT * (index - n))
            chars.append(char)
        else:
            chars[index] = char
        if details:
            info[index] = (r[i_role], r[i_after])
    s.levels = "".join(chars)
    if details:
        s.details = info


def load_details(run: Run, data: RunData, turns: list[int]) -> None:
    """Roles and token counts of the steps of `turns` (what a working-set diff shows), in one query:
    the cached `RunData` holds only the level strings."""
    agent = data.agent or ""
    wanted = {(t.number, s.step): s for t in data.turns if t.number in turns for s in t.steps}
    if not wanted:
        return
    key_of = {p.pin_id: p.key for p in data.pins}
    for number, step_number, table in ContextDecision.objects.filter(
        run=run, agent=agent, turn_number__in=turns
    ).values_list("turn_number", "step_number", "message_table"):
        s = wanted.get((number, step_number))
        if s is not None:
            s.pins = {}
            _fill_working_set(s, table, key_of, details=True)


def compare_runs(
    a: Run, b: Run, *, agent_a: str | None = None, agent_b: str | None = None, turn: int | None = None
) -> Comparison:
    """`runtime.compare.compare` of two stored runs, with the roles and token counts of the pair a
    working-set diff will show loaded: A's turn `turn`'s pair, else the first divergence's."""
    c = compare(run_data(a, agent_a), run_data(b, agent_b))
    pair = (c.pair_for(a_turn=turn) or c.pair_for(b_turn=turn)) if turn is not None else None
    if pair is None and c.divergence is not None and turn is None:
        pair = c.pairs[c.divergence.pair]
    if pair is not None:
        if pair.a is not None:
            load_details(a, c.a, [pair.a.number])
        if pair.b is not None:
            load_details(b, c.b, [pair.b.number])
    return c
