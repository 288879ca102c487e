"""Spans -> runs: which spans make one run (`group_runs`) and that run's structure (`assemble_run`).

Both are pure and deterministic: the same spans in any order, in any batches, give the same answer
(every ordering below ends on trace id and span id). A run may be incomplete (a parent not arrived
yet, a long agent span exported after its children): what is there is assembled, and the ids of the
parents not there are listed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from ._types import (
    ErrorInfo,
    Message,
    NormalizedSpan,
    OtlpAgent,
    OtlpHandoff,
    OtlpRun,
    OtlpSpanError,
    OtlpStep,
    OtlpToolCall,
    OtlpTurn,
    RunKeySource,
    Usage,
)

__all__ = ["assemble_run", "group_runs"]

_Key = tuple[str, str]  # (trace id, span id)


def _by_end(s: NormalizedSpan) -> tuple[int, int, str, str]:
    return (s["end_time"], s["start_time"], s["trace_id"], s["span_id"])


def _by_start(s: NormalizedSpan) -> tuple[int, int, str, str]:
    return (s["start_time"], -s["end_time"], s["trace_id"], s["span_id"])


def group_runs(spans: Iterable[NormalizedSpan]) -> dict[str, list[NormalizedSpan]]:
    """Split spans into runs: `{run key: [spans]}`, keys sorted. A run is a conversation
    (`gen_ai.conversation.id`, else `session.id`), else a trace, and a trace is never split: all its
    spans belong to the conversation of its outermost span that names one (the earliest started;
    then conversation ids before session ids, then alphabetically). So the spans an application
    opens around an agent stay in the agent's run, and a side agent run inside a call (a summarizer
    in a history processor, which frameworks give a conversation id of its own) stays in the run it
    worked for."""
    spans = list(spans)
    trace_key: dict[str, tuple[int, int, str]] = {}
    for s in spans:
        source = s["run_key_source"]
        if source == "trace_id":
            continue
        rank = (s["start_time"], 0 if source == "gen_ai.conversation.id" else 1, s["run_key"])
        best = trace_key.get(s["trace_id"])
        if best is None or rank < best:
            trace_key[s["trace_id"]] = rank
    runs: dict[str, list[NormalizedSpan]] = {}
    for s in spans:
        found = trace_key.get(s["trace_id"])
        key = found[2] if found else s["trace_id"]
        runs.setdefault(key, []).append(s)
    return {key: sorted(runs[key], key=_by_start) for key in sorted(runs)}


def assemble_run(spans: Iterable[NormalizedSpan]) -> OtlpRun:
    """The structure of one run from its spans (any order, possibly incomplete):

    1. Spans seen twice (same trace and span id) count once: the one that ended last (then the
       greater JSON text, so the choice does not depend on arrival order).
    2. Steps: one per model call, ordered by span *end* time (a summarizer called inside a chat
       span ends first, and its input is what the outer call's input was made from); `nested_in`
       points a nested call at the step that encloses it.
    3. Agents: each agent span's agent; a sub-agent is an agent span inside another agent's span; a
       hand-off is a `handoff to X` span or an agent whose `graph.node.parent_id` names another agent
       of the same trace that is not its ancestor.
    4. Turns: one per top-level agent invocation (an agent span inside no other agent span; the
       agent handed off to continues the turn of the agent that handed off), and, for model calls
       under no agent span, one per new user message (the last user text of the input changed).
    5. Tool calls: each `tool_call` part of a step's output is one; a tool span is matched to it by
       call id (same trace first), else attached to the last step of its agent (or trace) that ended
       before it started; results come from the tool span, else from a later input's
       `tool_call_response` part with that id.
    """
    tree = _SpanTree(_dedupe(spans))  # 1.
    steps, model_spans = _steps(tree)  # 2.
    agents, handoffs, invocation = _agents(tree)  # 3.
    turns = _turns(tree, steps, model_spans, invocation)  # 4.
    unattached = _tool_calls(tree, steps, model_spans)  # 5.

    ordered = tree.ordered
    errors: list[OtlpSpanError] = [
        {"span_id": s["span_id"], "name": s["name"], "kind": s["kind"], "error": s["error"]}
        for s in ordered
        if s["error"] is not None
    ]
    keyed = [s for s in ordered if s["run_key_source"] != "trace_id"]
    keyed.sort(key=lambda s: (s["run_key_source"] != "gen_ai.conversation.id", s["run_key"]))
    run_key_source: RunKeySource = keyed[0]["run_key_source"] if keyed else "trace_id"
    return {
        "run_key": keyed[0]["run_key"] if keyed else ordered[0]["trace_id"],
        "run_key_source": run_key_source,
        "trace_ids": sorted({s["trace_id"] for s in ordered}),
        "span_count": len(ordered),
        "start_time": min(s["start_time"] for s in ordered),
        "end_time": max(s["end_time"] for s in ordered),
        "turns": turns,
        "steps": steps,
        "agents": agents,
        "handoffs": sorted(
            handoffs, key=lambda h: (h["time"], h["target"], h["source"] or "", h["span_id"] or "")
        ),
        "unattached_tool_calls": unattached,
        "usage": _total_usage(steps),
        "errors": errors,
        "missing_parents": tree.missing_parents(),
    }


# --------------------------------------------------------------------------------------------------
# 1. Spans seen twice count once


def _dedupe(spans: Iterable[NormalizedSpan]) -> dict[_Key, NormalizedSpan]:
    """Each span once, by (trace id, span id): the one that ended last (then the greater JSON text,
    so the choice does not depend on arrival order)."""
    unique: dict[_Key, NormalizedSpan] = {}
    for s in spans:
        old = unique.get(_k(s))
        if old is None or _newer(s, old):
            unique[_k(s)] = s
    return unique


class _SpanTree:
    """The spans of a run in start order, their parents, and the nearest and outermost agent span
    above each."""

    def __init__(self, unique: dict[_Key, NormalizedSpan]) -> None:
        self.unique = unique
        self.ordered = sorted(unique.values(), key=_by_start)
        if not self.ordered:
            raise ValueError("assemble_run needs at least one span")
        self.nearest_agent: dict[_Key, NormalizedSpan | None] = {}
        self.outer_agent: dict[_Key, NormalizedSpan | None] = {}
        for s in self.ordered:
            agents_above = [a for a in self.ancestors(s) if a["kind"] == "agent"]
            self.nearest_agent[_k(s)] = agents_above[0] if agents_above else None
            self.outer_agent[_k(s)] = agents_above[-1] if agents_above else None

    def parent_of(self, s: NormalizedSpan) -> NormalizedSpan | None:
        p = s["parent_span_id"]
        return self.unique.get((s["trace_id"], p)) if p else None

    def ancestors(self, s: NormalizedSpan) -> list[NormalizedSpan]:
        out: list[NormalizedSpan] = []
        seen = {s["span_id"]}
        p = self.parent_of(s)
        while p is not None and p["span_id"] not in seen:
            out.append(p)
            seen.add(p["span_id"])
            p = self.parent_of(p)
        return out

    def missing_parents(self) -> list[str]:
        """The parent span ids no span of the run has."""
        return sorted(
            {s["parent_span_id"] for s in self.ordered if s["parent_span_id"] and self.parent_of(s) is None}
        )


# --------------------------------------------------------------------------------------------------
# 2. Steps


def _steps(tree: _SpanTree) -> tuple[list[OtlpStep], list[NormalizedSpan]]:
    """One step per model call, by end time (the steps, and their spans in the same order);
    `nested_in` points a nested call at the step that encloses it. Turns and tool calls are filled
    in by the stages after."""
    model_spans = sorted((s for s in tree.ordered if s["kind"] == "model_call"), key=_by_end)
    step_of: dict[_Key, int] = {_k(s): i for i, s in enumerate(model_spans)}
    steps: list[OtlpStep] = []
    for i, s in enumerate(model_spans):
        above = tree.nearest_agent[_k(s)]
        enclosing = next((step_of[_k(a)] for a in tree.ancestors(s) if _k(a) in step_of), None)
        steps.append(
            {
                "index": i,
                "turn": -1,
                "trace_id": s["trace_id"],
                "span_id": s["span_id"],
                "agent": s["agent_name"] or (above["agent_name"] if above else None),
                "model": s["model"],
                "start_time": s["start_time"],
                "end_time": s["end_time"],
                "system_instructions": s["system_instructions"],
                "input_messages": s["input_messages"],
                "output_messages": s["output_messages"],
                "usage": s["usage"],
                "finish_reasons": s["finish_reasons"],
                "error": s["error"],
                "tool_calls": [],
                "nested_in": enclosing,
                "provider": s["provider"],
                "request_model": s["request_model"],
                "tool_definitions": s["tool_definitions"],
                "arcana": s["arcana"],
            }
        )
    return steps, model_spans


# --------------------------------------------------------------------------------------------------
# 3. Agents and hand-offs


def _agents(tree: _SpanTree) -> tuple[list[OtlpAgent], list[OtlpHandoff], dict[_Key, _Key]]:
    """(agents, hand-offs, invocation): each agent span's agent, a sub-agent being an agent span
    inside another agent's span; a hand-off is a `handoff to X` span or an agent whose
    `graph.node.parent_id` names another agent of the same trace that is not its ancestor.
    `invocation` gives each top-level agent span the top-level invocation it belongs to (its own,
    or that of the agent that handed off to it)."""
    handoffs, handoff_sources = _handoff_spans(tree)
    invocation: dict[_Key, _Key] = {}
    latest_by_name: dict[tuple[str, str], _Key] = {}  # (trace, agent name) -> its invocation
    agent_info: dict[str, OtlpAgent] = {}
    for s in (s for s in tree.ordered if s["kind"] == "agent"):
        name = s["agent_name"] or s["name"]
        parent_agent = tree.nearest_agent[_k(s)]
        via: Literal["root", "subagent", "handoff"] = "root"
        parent_name: str | None = None
        if parent_agent is not None:
            via, parent_name = "subagent", parent_agent["agent_name"] or parent_agent["name"]
        else:
            graph_parent = s["graph_node"]["parent_id"] if s["graph_node"] else None
            sources = [
                src for t, src in handoff_sources.get((s["trace_id"], name), []) if t <= s["start_time"]
            ]
            source = graph_parent if graph_parent is not None else (sources[-1] if sources else None)
            source_key = latest_by_name.get((s["trace_id"], source)) if source is not None else None
            if source_key is not None:
                via, parent_name = "handoff", source
                if graph_parent is not None and not sources:
                    handoffs.append(
                        {"source": graph_parent, "target": name, "span_id": None, "time": s["start_time"]}
                    )
            invocation[_k(s)] = source_key if source_key is not None else _k(s)
            latest_by_name[(s["trace_id"], name)] = invocation[_k(s)]
        info = agent_info.setdefault(name, {"name": name, "span_ids": [], "parent": None, "via": via})
        info["span_ids"].append(s["span_id"])
        if info["parent"] is None and parent_name is not None:
            info["parent"], info["via"] = parent_name, via
    return list(agent_info.values()), handoffs, invocation


def _handoff_spans(
    tree: _SpanTree,
) -> tuple[list[OtlpHandoff], dict[tuple[str, str], list[tuple[int, str | None]]]]:
    """The hand-offs of `handoff to X` spans, and by (trace, target) the (time, source) of each."""
    handoffs: list[OtlpHandoff] = []
    handoff_sources: dict[tuple[str, str], list[tuple[int, str | None]]] = {}
    for s in tree.ordered:
        if s["handoff"] is not None:
            source = s["handoff"]["source"]
            if source is None:
                above = tree.nearest_agent[_k(s)]
                source = above["agent_name"] if above else None
            target_name = s["handoff"]["target"]
            handoffs.append(
                {"source": source, "target": target_name, "span_id": s["span_id"], "time": s["start_time"]}
            )
            handoff_sources.setdefault((s["trace_id"], target_name), []).append((s["start_time"], source))
    return handoffs, handoff_sources


# --------------------------------------------------------------------------------------------------
# 4. Turns


def _turns(
    tree: _SpanTree, steps: list[OtlpStep], model_spans: list[NormalizedSpan], invocation: dict[_Key, _Key]
) -> list[OtlpTurn]:
    """One turn per top-level agent invocation, and, for model calls under no agent span, one per
    new user message (the last user text of the input changed); a nested step joins the turn of the
    step that encloses it. Sets each step's `turn`."""
    turns_by_key = _agent_turns(tree, invocation)
    step_turn = _place_steps(tree, steps, model_spans, invocation, turns_by_key)
    for step in steps:
        outer = step
        while outer["nested_in"] is not None:
            outer = steps[outer["nested_in"]]
        draft = step_turn[outer["index"]]
        if draft is not None:
            draft.steps.append(step["index"])
    ordered_turns = sorted(turns_by_key.values(), key=lambda t: t.sort_key())
    turns: list[OtlpTurn] = []
    for i, t in enumerate(ordered_turns):
        t.steps.sort()
        for index in t.steps:
            steps[index]["turn"] = i
        first = steps[t.steps[0]] if t.steps else None
        turns.append(
            {
                "index": i,
                "trace_id": t.trace_id,
                "span_id": t.span_id,
                "agent": t.agent,
                "start_time": t.start_time,
                "end_time": t.end_time,
                "user_message": _last_user_message(first["input_messages"]) if first else None,
                "steps": t.steps,
                "error": t.error,
                "arcana": t.arcana,
            }
        )
    return turns


def _agent_turns(tree: _SpanTree, invocation: dict[_Key, _Key]) -> dict[tuple[str, ...], _TurnDraft]:
    """A turn draft per top-level agent invocation, keyed `("agent", trace id, span id)`."""
    turns_by_key: dict[tuple[str, ...], _TurnDraft] = {}
    for s in tree.ordered:
        if s["kind"] != "agent" or tree.nearest_agent[_k(s)] is not None:
            continue
        key = ("agent", *invocation[_k(s)])
        draft = turns_by_key.get(key)
        if draft is None:
            turns_by_key[key] = _TurnDraft(s["trace_id"], s["span_id"], s["agent_name"] or s["name"], s)
        else:
            draft.end_time = max(draft.end_time, s["end_time"])
            draft.error = draft.error or s["error"]
    return turns_by_key


def _place_steps(
    tree: _SpanTree,
    steps: list[OtlpStep],
    model_spans: list[NormalizedSpan],
    invocation: dict[_Key, _Key],
    turns_by_key: dict[tuple[str, ...], _TurnDraft],
) -> list[_TurnDraft | None]:
    """The turn of each step not nested in another (None for a nested one): its outermost agent's
    invocation, else, under no agent, the turn of the latest new user message (a new draft keyed
    `("message", trace id, span id)` when the message changed)."""
    step_turn: list[_TurnDraft | None] = [None] * len(steps)
    previous_user: str | None = None
    message_key: tuple[str, ...] | None = None
    key: tuple[str, ...]
    for step, s in zip(steps, model_spans, strict=True):
        if step["nested_in"] is not None:
            continue  # joins the turn of the step that encloses it
        top = tree.outer_agent[_k(s)]
        if top is not None:
            key = ("agent", *invocation[_k(top)])
        else:
            user = _last_user_text(step["input_messages"])
            if message_key is None or (user is not None and user != previous_user):
                message_key = ("message", s["trace_id"], s["span_id"])
            if user is not None:
                previous_user = user
            key = message_key
        draft = turns_by_key.get(key)
        if draft is None:
            draft = turns_by_key[key] = _TurnDraft(s["trace_id"], None, step["agent"], s)
        draft.start_time = min(draft.start_time, s["start_time"])
        draft.end_time = max(draft.end_time, s["end_time"])
        step_turn[step["index"]] = draft
    return step_turn


# --------------------------------------------------------------------------------------------------
# 5. Tool calls


def _tool_calls(
    tree: _SpanTree, steps: list[OtlpStep], model_spans: list[NormalizedSpan]
) -> list[OtlpToolCall]:
    """Each `tool_call` part of a step's output is one tool call (added to the step's
    `tool_calls`); a tool span is matched to one by call id (same trace first), else attached to the
    last step of its agent (or trace) that ended before it started; results come from the tool span,
    else from a later input's `tool_call_response` part with that id. Returns the tool calls of no
    step."""
    by_call_id = _asked_calls(steps)
    unattached: list[OtlpToolCall] = []
    for s in sorted((s for s in tree.ordered if s["kind"] == "tool_call"), key=_by_start):
        tool = s["tool"]
        if tool is None:
            continue
        target = _call_for(s, tool["call_id"], by_call_id)
        if target is None:
            target = _new_call(tool["call_id"], tool["name"], tool["arguments"])
            host = _host_step(tree, s, steps, model_spans)
            (host["tool_calls"] if host is not None else unattached).append(target)
        target["span_id"] = s["span_id"]
        target["start_time"], target["end_time"] = s["start_time"], s["end_time"]
        target["error"] = s["error"]
        target["arcana"] = s["arcana"]
        if target["name"] is None:
            target["name"] = tool["name"]
        if target["arguments"] is None:
            target["arguments"] = tool["arguments"]
        if tool["result"] is not None:
            target["result"] = tool["result"]
    for step in steps:
        for message in step["input_messages"] or []:
            for part in message.get("parts", []):
                if part.get("type") != "tool_call_response":
                    continue
                for _, call in by_call_id.get(_text_or_none(part.get("id")) or "", []):
                    if call["result"] is None and _step_before(call, step, steps):
                        call["result"] = part.get("result")
    return unattached


def _asked_calls(steps: list[OtlpStep]) -> dict[str, list[tuple[OtlpStep, OtlpToolCall]]]:
    """Adds each `tool_call` part of a step's output to its `tool_calls`; returns those with a call
    id by call id (with their step), in step order."""
    by_call_id: dict[str, list[tuple[OtlpStep, OtlpToolCall]]] = {}
    for step in steps:
        for message in step["output_messages"] or []:
            for part in message.get("parts", []):
                if part.get("type") != "tool_call":
                    continue
                call = _new_call(
                    _text_or_none(part.get("id")), _text_or_none(part.get("name")), part.get("arguments")
                )
                step["tool_calls"].append(call)
                if call["call_id"]:
                    by_call_id.setdefault(call["call_id"], []).append((step, call))
    return by_call_id


def _call_for(
    s: NormalizedSpan, call_id: str | None, by_call_id: dict[str, list[tuple[OtlpStep, OtlpToolCall]]]
) -> OtlpToolCall | None:
    """The asked call a tool span answers, by call id: one no span has answered yet, of the same
    trace if there is one, the last one asked by a step that ended before the span started, else
    the first."""
    if not call_id:
        return None
    candidates = [(st, c) for st, c in by_call_id.get(call_id, []) if c["span_id"] is None]
    same_trace = [(st, c) for st, c in candidates if st["trace_id"] == s["trace_id"]]
    pool = same_trace or candidates
    before = [(st, c) for st, c in pool if st["end_time"] <= s["start_time"]]
    if before or pool:
        return (before[-1] if before else pool[0])[1]
    return None


def _host_step(
    tree: _SpanTree, s: NormalizedSpan, steps: list[OtlpStep], model_spans: list[NormalizedSpan]
) -> OtlpStep | None:
    """For a tool span with no call to match: the last step of the same agent (or trace) that
    ended before it started."""
    agent = tree.nearest_agent[_k(s)]
    host = None
    for step, m in zip(steps, model_spans, strict=True):
        if m["trace_id"] != s["trace_id"] or m["end_time"] > s["start_time"]:
            continue
        if agent is not None and tree.nearest_agent[_k(m)] is not agent:
            continue
        host = step
    return host


def _new_call(call_id: str | None, name: str | None, arguments: Any) -> OtlpToolCall:
    return {
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "result": None,
        "span_id": None,
        "error": None,
        "start_time": None,
        "end_time": None,
        "arcana": None,
    }


# --------------------------------------------------------------------------------------------------


class _TurnDraft:
    """A turn while the steps are being placed."""

    def __init__(self, trace_id: str, span_id: str | None, agent: str | None, first: NormalizedSpan) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.agent = agent
        self.start_time = first["start_time"]
        self.end_time = first["end_time"]
        self.error: ErrorInfo | None = first["error"] if span_id is not None else None
        self.arcana = first["arcana"] if span_id is not None else None
        self.steps: list[int] = []

    def sort_key(self) -> tuple[int, str, str, list[int]]:
        return (self.start_time, self.trace_id, self.span_id or "", self.steps)


def _k(s: NormalizedSpan) -> _Key:
    return (s["trace_id"], s["span_id"])


def _newer(a: NormalizedSpan, b: NormalizedSpan) -> bool:
    if (a["end_time"], a["start_time"]) != (b["end_time"], b["start_time"]):
        return (a["end_time"], a["start_time"]) > (b["end_time"], b["start_time"])
    return json.dumps(a, sort_keys=True, default=str) > json.dumps(b, sort_keys=True, default=str)


def _text_or_none(value: Any) -> str | None:
    return value if type(value) is str and value else None


def _user_texts(messages: list[Message] | None) -> list[Message]:
    return [
        m
        for m in messages or []
        if m.get("role") == "user" and any(p.get("type") == "text" for p in m.get("parts", []))
    ]


def _last_user_message(messages: list[Message] | None) -> Message | None:
    found = _user_texts(messages)
    return found[-1] if found else None


def _last_user_text(messages: list[Message] | None) -> str | None:
    m = _last_user_message(messages)
    if m is None:
        return None
    return json.dumps([p.get("content") for p in m.get("parts", []) if p.get("type") == "text"], default=str)


def _step_before(call: OtlpToolCall, step: OtlpStep, steps: list[OtlpStep]) -> bool:
    """Whether `call` was asked for by a step that ended before `step` started reading it."""
    for s in steps:
        if any(c is call for c in s["tool_calls"]):
            return s["index"] < step["index"]
    return False


def _total_usage(steps: list[OtlpStep]) -> Usage:
    total: dict[str, int | None] = dict.fromkeys(
        (
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "cached_input_tokens",
            "cache_creation_input_tokens",
            "reasoning_tokens",
        )
    )
    for step in steps:
        usage = step["usage"]
        if usage is None:
            continue
        for key in total:
            n = usage[key]  # type: ignore[literal-required]
            if n is not None:
                total[key] = (total[key] or 0) + n
    return total  # type: ignore[return-value]
