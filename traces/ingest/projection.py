"""Stage 4, project (its pure part): a run's projection rows computed from its raw events, no database
access. `traces.ingest.projecting` decides which runs are projected how and writes the rows."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

from runtime import TraceEvent
from runtime.facts import (
    ANNOTATION_EVENT_TYPES,
    DecisionCounts,
    PinLifetime,
    StepView,
    TurnView,
    as_dict,
    as_int,
    as_number,
    as_str,
    build_steps,
    decision_counts,
    decision_rows,
    normalize_events,
    pin_lifetimes,
    pinned_blocks,
    primitive_outcome,
    run_labels,
    run_links,
    run_outcome,
    step_errors,
    step_failure,
    step_model,
    tool_results,
    turn_outcome,
)
from runtime.otlp import OTLP_PRODUCER
from runtime.pricing import step_usage
from traces.ingest.events import local_turn
from traces.models import (
    MESSAGE_DECISION_KEYS,
    Run,
    pack_message_decisions,
    report_estimated,
)

_time_order = attrgetter("timestamp_dt", "step_id")
# A normalised event's time and type, read at C speed in the per-event passes.
_event_time, _event_type = attrgetter("event.timestamp_dt"), attrgetter("event.event_type")


# The tolerant coercers every reading of a trace uses (`runtime.facts`), under this module's short names.
_int, _num, _str, _dict = as_int, as_number, as_str, as_dict


def message_decision(d: Any) -> list[Any]:
    """One message decision as a stored row: the values of `MESSAGE_DECISION_KEYS`, in that order
    (`pinned` true for `reason == "pinned"` as well)."""
    src = _dict(d)
    return [
        _int(src.get("index")),
        _str(src.get("role")),
        _str(src.get("outcome")),
        _str(src.get("fidelity")),
        _num(src.get("relevance_score")),
        _int(src.get("token_count_before")),
        _int(src.get("token_count_after")),
        _str(src.get("reason")),
        src.get("pinned") is True or src.get("reason") == "pinned",
        _str(src.get("pin_id")),
        _int(src.get("index")),
    ]


# The row layout above, and the indexes `_decision_row` reads.
assert MESSAGE_DECISION_KEYS == (
    "index", "role", "outcome", "fidelity", "relevance_score", "token_count_before", "token_count_after",
    "reason", "pinned", "pin_id", "raw_index",
)  # fmt: skip


_INDEX, _OUTCOME, _PINNED, _PIN_ID = 0, 2, 8, 9
#: The keys `message_decisions` reads from each producer's object, in the order it unpacks them.
_SOURCE_KEYS = (
    "index", "role", "outcome", "fidelity", "relevance_score", "token_count_before", "token_count_after",
    "reason", "pinned", "pin_id",
)  # fmt: skip
_outcome_of, _pinned_of = itemgetter(_OUTCOME), itemgetter(_PINNED)


def _decision_counts(rows: list[list[Any]], d: dict[str, Any], md: dict[str, Any]) -> DecisionCounts:
    """`runtime.facts.decision_counts(d, md)`, counted from `rows` (`message_decisions` of the same
    `decisions` list: one row per object, `pinned` and `outcome` as that function reads them) with
    C-level counting instead of a second pass over the objects. The producer's `compressed_count`
    (and its fallback) is read by `decision_counts` itself. Equal by test
    (tests/traces/ingest/test_projection_counts.py)."""
    pinned = sum(map(_pinned_of, rows))
    outcomes = Counter(
        map(_outcome_of, rows) if not pinned else (r[_OUTCOME] for r in rows if not r[_PINNED])
    )
    producer = decision_counts({"compressed_count": d.get("compressed_count")}, md).compressed_count
    return DecisionCounts(
        kept=outcomes["kept"],
        compressed=outcomes["compressed"],
        dropped=outcomes["dropped"],
        summarized=outcomes["summarized"],
        pinned=pinned + outcomes["pinned"],  # decision_counts also counts an outcome "pinned"
        listed=bool(rows),
        compressed_count=producer,
    )


def message_decisions(value: Any) -> list[list[Any]]:
    """`message_decision` of every object in a `decisions` list (other items are skipped).

    Same result as `[message_decision(x) for x in value if isinstance(x, dict)]`, with the common
    types tested inline: a context decision carries up to hundreds of these per step."""
    if not isinstance(value, list):
        return []
    out: list[list[Any]] = []
    append = out.append
    for src in value:
        if src.__class__ is not dict:
            if isinstance(src, dict):
                append(message_decision(src))
            continue
        # One C-level pass for the ten look-ups (`map` over the bound `get`), not ten method calls.
        index, role, outcome, fidelity, score, before, after, reason, pinned, pin_id = map(
            src.get, _SOURCE_KEYS
        )
        index = index if index.__class__ is int else _int(index)
        append(
            [
                index,
                role if role is None or role.__class__ is str else _str(role),
                outcome if outcome is None or outcome.__class__ is str else _str(outcome),
                fidelity if fidelity is None or fidelity.__class__ is str else _str(fidelity),
                float(score) if score.__class__ is float else _num(score),
                before if before.__class__ is int else _int(before),
                after if after.__class__ is int else _int(after),
                reason if reason is None or reason.__class__ is str else _str(reason),
                pinned is True or reason == "pinned",
                pin_id if pin_id is None or pin_id.__class__ is str else _str(pin_id),
                index,
            ]
        )  # fmt: skip
    return out


@dataclass
class Projection:
    """Projection rows of one run as plain dicts of column values (attnames; FKs filled in at write)."""

    run_fields: dict[str, Any]
    turns: list[dict[str, Any]]
    steps: list[tuple[int, dict[str, Any]]]  # (index of its turn in `turns`, step row)
    decisions: list[tuple[int, dict[str, Any]]]  # (index of its step in `steps`, decision row)
    primitives: list[tuple[int | None, dict[str, Any]]]
    pins: list[dict[str, Any]]


def _step_row(sv: StepView) -> dict[str, Any]:
    te = sv.turn_event
    md = te.metadata if te is not None else {}
    facts = _dict(md.get("facts"))
    assessment = _dict(md.get("assessment"))
    usage = step_usage(sv)  # the turn event's usage, else its chat llm_calls' (runtime.pricing)
    chat_calls = [e for e in sv.llm_calls if e.metadata.get("purpose") != "summarize" and e.is_ours]
    model = step_model(sv) or ""
    latency = te.llm_latency_ms if te is not None else None
    if latency is None and chat_calls:
        lat = [_int(e.metadata.get("latency_ms")) or e.llm_latency_ms for e in chat_calls]
        latency = sum(x for x in lat if x is not None) if any(x is not None for x in lat) else None
    tool_calls = facts.get("tool_calls")
    snapshot = sv.prompt_snapshot.metadata.get("prompt_snapshot") if sv.prompt_snapshot is not None else None
    messages = md.get("messages")
    completed = assessment.get("completed")
    failed = assessment.get("failed")
    tool_calls = tool_calls if isinstance(tool_calls, list) else []
    return {
        "agent": sv.agent or "",
        "turn_number": sv.turn,
        "number": sv.step,
        "step_id": sv.step_id,
        "model": model[:200],
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
        "finish_reason": (_str(facts.get("finish_reason")) or "")[:50],
        "assistant_text": _str(facts.get("assistant_text")),
        "tool_calls": tool_calls,
        "tool_results": tool_results(sv),
        "messages": messages if isinstance(messages, list) else None,
        "prompt_snapshot": snapshot if isinstance(snapshot, dict) else None,
        "latency_ms": latency if latency is None or latency >= 0 else None,
        "completed": completed if isinstance(completed, bool) else None,
        "failed": failed if isinstance(failed, bool) else None,
        "errors": [e.to_dict() for e in step_errors(sv)],
        "failure": step_failure(sv) or "",
        "started_at": min(map(_event_time, sv.events)),
    }


def _decision_row(sv: StepView, pins: list[PinLifetime]) -> dict[str, Any] | None:
    """The step's decision row. Pinned blocks are stored where they really were, with their pin
    (`runtime.facts.pinned_blocks`; `raw_index` keeps the index the producer wrote). `pins`: the pins
    of the step's agent (needed for arcana-agent 1.2 rows, which name no pin)."""
    cd = sv.context_decision
    if cd is None:
        return None
    md = cd.metadata
    d = _dict(md.get("context_decision"))
    report = md.get("context_report")
    rows = message_decisions(d.get("decisions"))
    counts = _decision_counts(rows, d, md)
    if counts.pinned:
        snapshot = _dict(sv.prompt_snapshot.metadata.get("prompt_snapshot")) if sv.prompt_snapshot else {}
        blocks = iter(
            pinned_blocks(
                decision_rows(cd),
                pins,
                sv.turn,
                arcana=not cd.is_ours,
                snapshot_messages=snapshot.get("messages"),
            )
        )
        for r in rows:
            if r[_PINNED]:
                b = next(blocks)
                r[_INDEX], r[_PIN_ID] = b.index, b.pin_id
    explanation = _str(d.get("explanation")) or _str(md.get("explanation")) or ""
    return {
        "agent": sv.agent or "",
        "turn_number": sv.turn,
        "step_number": sv.step,
        "strategy": (_str(d.get("strategy")) or _str(_dict(report).get("strategy_used")) or "")[:100],
        "budget_total": _int(d.get("budget_total")),
        "budget_used": _int(d.get("budget_used")),
        "budget_tools": _int(d.get("budget_tools")),
        "budget_reserve": _int(d.get("budget_reserve")),
        "messages_in": _int(d.get("messages_in", md.get("messages_in"))),
        "messages_out": _int(d.get("messages_out", md.get("messages_out"))),
        "compressed_count": counts.compressed_count,
        "pinned_count": counts.pinned,
        "dropped_count": counts.dropped,
        "explanation": explanation,
        "utilization": _num(_dict(report).get("utilization")),
        "report": report if isinstance(report, dict) else None,
        "counts_estimated": report_estimated(report),
        "message_table": pack_message_decisions(rows),
    }


def _primitive_row(ev: TraceEvent, sv: StepView | None, agent: str | None) -> dict[str, Any]:
    md = ev.metadata
    primitive = _str(md.get("primitive")) or ""
    result = md.get("result")
    args = md.get("args")
    outcome = primitive_outcome(primitive, args, result)
    ok, note = outcome.ok, outcome.summary
    return {
        "agent": (sv.agent if sv is not None else agent) or "",
        "turn_number": sv.turn if sv is not None else None,
        "step_number": sv.step if sv is not None else None,
        "event_step_id": ev.step_id,
        "primitive": primitive[:50],
        "args": args if isinstance(args, dict) else {},
        "result": result if isinstance(result, dict) else {},
        "ok": ok,
        "note": note,
        "tool_call_id": (_str(md.get("tool_call_id")) or "")[:200],
        "timestamp": ev.timestamp_dt,
    }


def _new_turn(agent: str, number: int) -> dict[str, Any]:
    return {
        "agent": agent, "number": number, "steps": 0, "prompt_tokens": 0, "completion_tokens": 0,
        "tokens": 0, "peak_utilization": None, "strategy": "", "compressions": 0, "primitives": 0,
        "tool_calls": 0, "errors": 0, "failure": "", "started_at": None, "ended_at": None,
    }  # fmt: skip


def pin_row(p: PinLifetime) -> dict[str, Any]:
    return {
        "agent": p.agent or "",
        "pin_id": p.pin_id[:100],
        "label": (p.label or "")[:500],
        "content": p.content or "",
        "content_hash": hashlib.sha256(p.content.encode("utf-8")).hexdigest() if p.content else "",
        "tokens": p.tokens,
        "created_turn": p.created_turn,
        "created_step": p.created_step,
        "until_turn": p.until_turn,
        "unpinned_turn": p.unpinned_turn,
    }


def project_turns(
    turn_views: list[TurnView], pins: list[PinLifetime] | None = None
) -> tuple[Projection, Counter[str]]:
    """Turn, step, decision and primitive rows of these turns (no pin rows, no run fields), and how many
    steps used each model. `pins` (the run's) name the pinned blocks of arcana-agent 1.2 decisions."""
    pins_of: dict[str | None, list[PinLifetime]] = {}
    for p in pins or []:
        pins_of.setdefault(p.agent, []).append(p)
    proj = Projection({}, [], [], [], [], [])
    turns, steps, decisions, primitives = proj.turns, proj.steps, proj.decisions, proj.primitives
    step_models: Counter[str] = Counter()
    for tv in turn_views:
        turn = _new_turn(tv.agent or "", tv.turn)
        t_index = len(turns)
        turns.append(turn)
        utils: list[float] = []
        strategy = ""
        for sv in tv.steps:
            step = _step_row(sv)
            s_index = len(steps)
            steps.append((t_index, step))
            if step["model"]:
                step_models[step["model"]] += 1
            turn["steps"] += 1
            turn["prompt_tokens"] += step["prompt_tokens"]
            turn["completion_tokens"] += step["completion_tokens"]
            turn["tokens"] += step["total_tokens"]
            turn["tool_calls"] += len(step["tool_results"])
            turn["primitives"] += len(sv.primitive_calls)
            decision = _decision_row(sv, pins_of.get(sv.agent, []))
            if decision is not None:
                decisions.append((s_index, decision))
                turn["compressions"] += decision["compressed_count"]
                strategy = decision["strategy"] or strategy
                if decision["utilization"] is not None:
                    utils.append(decision["utilization"])
            for ev in sv.primitive_calls:
                primitives.append((s_index, _primitive_row(ev, sv, None)))
            stamps = list(map(_event_time, sv.events))
            lo, hi = min(stamps), max(stamps)
            if turn["started_at"] is None or lo < turn["started_at"]:
                turn["started_at"] = lo
            if turn["ended_at"] is None or hi > turn["ended_at"]:
                turn["ended_at"] = hi
        turn["strategy"] = strategy
        turn["peak_utilization"] = max(utils) if utils else None
        outcome = turn_outcome(tv)
        turn["errors"], turn["failure"] = outcome.errors, outcome.reason or ""
    return proj, step_models


def top_model(step_models: Counter[str]) -> str | None:
    """The most used step model when one model leads outright, else None."""
    top = step_models.most_common(2)
    if not top or (len(top) == 2 and top[0][1] == top[1][1]):
        return None
    return top[0][0]


def one_turn_event_per_step(turn_views: list[TurnView]) -> bool:
    return all(list(map(_event_type, sv.events)).count("turn") <= 1 for tv in turn_views for sv in tv.steps)


def primitive_counts(events: list[TraceEvent]) -> Counter[str]:
    """Primitive calls among `events` by primitive name; a name that is not a string (a producer's
    mistake) counts as "" — still a call, and hashable."""
    return Counter(
        p if isinstance(p := ev.metadata.get("primitive"), str) else ""
        for ev in events
        if ev.event_type == "cognitive_primitive"
    )


def project_run(events: list[TraceEvent]) -> Projection:
    """Compute every projection row of a run from its raw events (pure; no database access). Score
    events annotate the run (`runtime.facts.is_annotation`): counted among its events, and projected
    into scores (`traces.ingest.scoring`), but no part of its turns, steps, outcome or times."""
    stored = sorted(events, key=_time_order)  # `events.sort_key`, at C speed
    events = [e for e in stored if e.event_type not in ANNOTATION_EVENT_TYPES] or stored
    normalized = normalize_events(events)
    turn_views = build_steps(normalized)
    pins = pin_lifetimes(turn_views)
    proj, step_models = project_turns(turn_views, pins)
    # Primitive calls whose step is not known yet (its turn event has not arrived).
    for ne in normalized:
        if ne.turn is None and ne.event.event_type == "cognitive_primitive":
            proj.primitives.append((None, _primitive_row(ne.event, None, ne.agent)))
    proj.pins = [pin_row(p) for p in pins]
    turns = proj.turns
    by_primitive = primitive_counts(events)
    utils_all = [t["peak_utilization"] for t in turns if t["peak_utilization"] is not None]
    model = (
        step_models.most_common(1)[0][0] if step_models else next((e.model for e in events if e.model), "")
    )
    error_stop = any(e.stop_reason == "error" for e in events)
    outcome = run_outcome(turn_views, events)
    links = run_links(events)
    labels = run_labels(events)
    proj.run_fields = {
        "source": _source(events),
        "agents": sorted({ne.agent for ne in normalized if ne.agent}),
        "model": (model or "")[:200],
        "status": outcome.status,
        "failure": outcome.reason or "",
        "bundle_id": (links.bundle_id or "")[:200],
        "delegated_by_run_id": (links.delegated_by_run_id or "")[:200],
        "name": labels.name,
        "tags": labels.tags,
        "started_at": events[0].timestamp_dt,
        "ended_at": events[-1].timestamp_dt,
        "turns": len(turns),
        "steps": len(proj.steps),
        "events": len(stored),
        "prompt_tokens": sum(t["prompt_tokens"] for t in turns),
        "completion_tokens": sum(t["completion_tokens"] for t in turns),
        "tokens": sum(t["tokens"] for t in turns),
        "tool_calls": sum(t["tool_calls"] for t in turns),
        "errors": outcome.errors,
        "primitives": sum(by_primitive.values()),
        "recall_count": by_primitive.get("recall", 0),
        "pin_count": by_primitive.get("pin", 0),
        "unpin_count": by_primitive.get("unpin", 0),
        "peak_utilization": max(utils_all) if utils_all else None,
        # Whether later batches may re-project only the turns they touch (`do_project_turns`): every
        # event is ours with a turn, and none of the whole-run facts that path does not track occurs.
        "incremental": (
            not error_stop
            and outcome.status != "failed"
            and None not in map(local_turn, events)
            and one_turn_event_per_step(turn_views)
            and top_model(step_models) is not None
        ),
    }
    return proj


def _source(events: list[TraceEvent]) -> str:
    """Who wrote the run: spans of any framework (events derived from OTLP), our runtime, or arcana-agent."""
    if any(e.metadata.get("producer") == OTLP_PRODUCER for e in events):
        return Run.Source.OTLP
    return Run.Source.RUNTIME if any(e.is_ours for e in events) else Run.Source.ARCANA
