"""What one step received, message by message, read back from a run's trace events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._otlp_sink import message_parts
from .._trace import TraceEvent
from ..errors import TraceFormatError
from ..facts import StepView, build_steps, normalize_events
from ..reconstruct import reconstruct

#: The statuses of a `ContextItem`: sent as recorded (`kept`, `compressed`: a shorter form of its
#: original, `summary`: a summary standing for earlier messages, `pinned`: a pinned block, `system`:
#: the system prompt) or not sent (`dropped`, `summarized`: a summary stood for it).
STATUSES = ("system", "pinned", "kept", "compressed", "summary", "summarized", "dropped")

#: What a restore can bring back: a message sent in a shorter form or not sent at all.
RESTORABLE = frozenset({"compressed", "summarized", "dropped"})


@dataclass(frozen=True)
class ContextItem:
    """One message of what a step received, or of its history that it did not receive.

    `sent` is the message as the model got it (None when it was not sent); `original` the message in
    full, when the trace holds it and it differs from `sent` (a compressed, summarized or dropped
    message). Messages are in the chat shape (`role`, `content`, `tool_calls`, `tool_call_id`)."""

    index: int
    role: str
    status: str
    sent: dict[str, Any] | None
    original: dict[str, Any] | None = None
    pin_id: str | None = None
    fidelity: str | None = None
    #: Its index in the history as the step's context decision numbers it (0: the system prompt);
    #: None for what is not a message of the history (a pinned block, a summary).
    history_index: int | None = None

    @property
    def restorable(self) -> bool:
        return self.status in RESTORABLE and self.original is not None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the message carries (as sent, else its original)."""
        m = self.sent if self.sent is not None else self.original
        calls = m.get("tool_calls") if m is not None else None
        return list(calls) if isinstance(calls, list) else []

    @property
    def text(self) -> str:
        """The text shown for it: as sent, else its original."""
        m = self.sent if self.sent is not None else self.original
        return text_of(m.get("content")) if m is not None else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "role": self.role,
            "status": self.status,
            "sent": self.sent,
            "original": self.original,
            "pin_id": self.pin_id,
            "fidelity": self.fidelity,
            "history_index": self.history_index,
            "restorable": self.restorable,
        }


@dataclass(frozen=True)
class StepContext:
    """What step (`turn`, `step`) of `agent` received (`items`, in the order it received them, with
    what it did not receive where it would have been), its model and tools, and where the
    statuses come from: `"recorded"` (our runtime's context decisions), `"reconstructed"` (from the
    messages each model call received) or `"snapshot"` (the messages alone)."""

    run_id: str
    agent: str | None
    turn: int
    step: int
    model: str | None
    items: tuple[ContextItem, ...]
    tools: list[dict[str, Any]] = field(default_factory=list)
    origin: str = "recorded"
    answer: str | None = None

    def messages(self) -> list[dict[str, Any]]:
        """The messages exactly as the step received them."""
        return [dict(i.sent) for i in self.items if i.sent is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "turn": self.turn,
            "step": self.step,
            "model": self.model,
            "origin": self.origin,
            "answer": self.answer,
            "items": [i.to_dict() for i in self.items],
        }


def step_context(
    events: Iterable[TraceEvent | Mapping[str, Any]], *, turn: int, step: int, agent: str | None = None
) -> StepContext:
    """What step `step` of turn `turn` (of `agent`, for a pool) received, from its run's events (any
    producer): the step's prompt snapshot is what it was sent; our runtime's recorded context
    decision says which messages of the history were kept, compressed or dropped, and the history
    (rebuilt from the trace: each step's new messages and tool results) holds their originals; for a
    run whose decisions were reconstructed (OTLP spans with messages) the originals are the forms the
    earlier calls received.

    Raises `TraceFormatError` (with `field`) when there is no such step or it recorded no snapshot."""
    evs = [e if isinstance(e, TraceEvent) else TraceEvent.from_dict(dict(e)) for e in events]
    if not evs:
        raise TraceFormatError("the run has no events", field="run")
    views = [s for t in build_steps(normalize_events(evs), agent) for s in t.steps]
    if agent is None and len({s.agent for s in views}) > 1:
        raise TraceFormatError("the run has several agents: name one", field="agent")
    target = next((s for s in views if s.turn == turn and s.step == step), None)
    if target is None:
        raise TraceFormatError(f"the run has no step {step} in turn {turn}", field="step")
    snap = target.prompt_snapshot.metadata.get("prompt_snapshot") if target.prompt_snapshot else None
    if not isinstance(snap, Mapping) or not isinstance(snap.get("messages"), list):
        raise TraceFormatError(
            "this step recorded no prompt snapshot (the messages it received are not in the trace)",
            field="step",
        )
    sent = [_chat(m) for m in snap["messages"] if isinstance(m, Mapping)]
    earlier = views[: views.index(target)]
    decision = _decision(target)
    if decision is not None and decision.get("origin") != "reconstructed" and target.context_decision:
        items, origin = _recorded(sent, decision, earlier, target), "recorded"
    else:
        items, origin = _reconstructed(sent, earlier, target), "reconstructed"
    tools = snap.get("tools")
    return StepContext(
        run_id=evs[0].run_id,
        agent=target.agent,
        turn=turn,
        step=step,
        model=snap.get("model") or (target.turn_event.model if target.turn_event else None),
        items=tuple(items),
        tools=list(tools) if isinstance(tools, list) else [],
        origin=origin,
        answer=_answer(target),
    )


# ---------------------------------------------------------------------------------------------------
# Our runtime: the recorded decision over the history rebuilt from the trace


def _decision(view: StepView) -> dict[str, Any] | None:
    if view.context_decision is None:
        return None
    cd = view.context_decision.metadata.get("context_decision")
    return dict(cd) if isinstance(cd, Mapping) else None


def history(earlier: Sequence[StepView], target: StepView) -> list[dict[str, Any]]:
    """The conversation before `target`'s model call, rebuilt from the trace (docs/trace-format.md):
    each step's new messages (`turn` `metadata.messages`), then its tool results in the order the
    model asked for them; then the user message the target step added. The system prompt is not in it."""
    out: list[dict[str, Any]] = []
    for view in earlier:
        out.extend(_new_messages(view))
        out.extend(_tool_messages(view))
    out.extend(m for m in _new_messages(target) if m.get("role") == "user")
    return out


def _new_messages(view: StepView) -> list[dict[str, Any]]:
    msgs = view.turn_event.metadata.get("messages") if view.turn_event else None
    return [_chat(m) for m in msgs if isinstance(m, Mapping)] if isinstance(msgs, list) else []


def _tool_messages(view: StepView) -> list[dict[str, Any]]:
    results: dict[str, str] = {}
    for ev in [*view.primitive_calls, *view.tool_calls, *view.errors]:
        call_id = ev.metadata.get("tool_call_id")
        if isinstance(call_id, str) and "result" in ev.metadata and call_id not in results:
            result = ev.metadata["result"]
            results[call_id] = result if isinstance(result, str) else _json(result)
    asked = view.turn_event.metadata.get("facts", {}) if view.turn_event else {}
    calls = asked.get("tool_calls") if isinstance(asked, Mapping) else None
    order = [c.get("id") for c in calls or [] if isinstance(c, Mapping)] or list(results)
    return [{"role": "tool", "tool_call_id": cid, "content": results[cid]} for cid in order if cid in results]


def _recorded(
    sent: list[dict[str, Any]], decision: Mapping[str, Any], earlier: Sequence[StepView], target: StepView
) -> list[ContextItem]:
    """Items from our runtime's decision: row `index` 0 is the system prompt, row k the history's
    message k-1; pinned rows name their block's position in what was sent. Rows are matched to the
    sent messages in order (a dropped row has none; a run of summarized rows shares one summary)."""
    rows = [r for r in decision.get("decisions") or [] if isinstance(r, Mapping)]
    pinned = {int(r["index"]): r for r in rows if r.get("pinned") and isinstance(r.get("index"), int)}
    plain = sorted((r for r in rows if not r.get("pinned")), key=lambda r: int(r.get("index") or 0))
    hist = history(earlier, target)
    queue = [k for k in range(len(sent)) if k not in pinned]
    placed: list[tuple[float | None, ContextItem]] = []
    for pos, r in pinned.items():
        if pos < len(sent):
            item = ContextItem(0, "system", "pinned", sent[pos], pin_id=_str(r.get("pin_id")), fidelity="L0")
            placed.append((pos, item))
    in_summary = False
    for r in plain:
        k = int(r.get("index") or 0)
        original = hist[k - 1] if 0 < k <= len(hist) else None
        outcome = str(r.get("outcome") or "kept")
        role = str(r.get("role") or (original or {}).get("role") or "user")
        fidelity = _str(r.get("fidelity"))
        if outcome == "dropped" or outcome == "summarized":
            if outcome == "summarized" and not in_summary and queue:
                pos = queue.pop(0)
                placed.append((pos, ContextItem(0, "assistant", "summary", sent[pos])))
            in_summary = outcome == "summarized"
            placed.append(
                (None, ContextItem(0, role, outcome, None, original, fidelity=fidelity, history_index=k))
            )
            continue
        in_summary = False
        if not queue:
            break
        pos = queue.pop(0)
        status = "system" if k == 0 and sent[pos].get("role") == "system" else "kept"
        if status == "kept" and (outcome == "compressed" or (fidelity not in (None, "L0"))):
            status = "compressed"
        full = original if status == "compressed" and original != sent[pos] else None
        placed.append(
            (pos, ContextItem(0, role, status, sent[pos], full, fidelity=fidelity, history_index=k))
        )
    for pos in queue:  # sent messages no row accounts for
        placed.append((pos, ContextItem(0, str(sent[pos].get("role") or "user"), "kept", sent[pos])))
    return _numbered(placed)


# ---------------------------------------------------------------------------------------------------
# Any producer: the statuses reconstructed from the messages each call received


def _reconstructed(
    sent: list[dict[str, Any]], earlier: Sequence[StepView], target: StepView
) -> list[ContextItem]:
    calls = []
    for view in [*earlier, target]:
        snap = view.prompt_snapshot.metadata.get("prompt_snapshot") if view.prompt_snapshot else None
        msgs = snap.get("messages") if isinstance(snap, Mapping) else None
        if not isinstance(msgs, list):
            continue
        answer = _answer(view) if view is not target else None
        calls.append(
            {
                "id": f"{view.agent or ''}/{view.turn}/{view.step}",
                "agent": view.agent,
                "input_messages": [message_parts(m) for m in msgs if isinstance(m, Mapping)],
                "output_messages": (
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}] if answer else []
                ),
            }
        )
    try:
        rec = reconstruct(calls, count_text=lambda text: len(text.split()))
        call = rec.call(f"{target.agent or ''}/{target.turn}/{target.step}")
    except (TraceFormatError, KeyError):
        return _numbered([(float(k), _plain(m)) for k, m in enumerate(sent)])
    placed: list[tuple[float | None, ContextItem]] = []
    covered: set[int] = set()
    for st in call.states:
        info = rec.message(st.message_id)
        original = {"role": info.role, "content": info.text}
        if st.position is None or st.position >= len(sent):
            status = "summarized" if st.status == "summarized" else "dropped"
            placed.append(
                (None, ContextItem(0, info.role, status, None, original, history_index=st.history_index))
            )
            continue
        pos = st.position
        covered.add(pos)
        m = sent[pos]
        if st.status == "shortened":
            item = ContextItem(0, info.role, "compressed", m, original, fidelity=st.level)
            placed.append((pos, replace(item, history_index=st.history_index)))
        elif st.status == "summary":
            placed.append((pos, ContextItem(0, info.role, "summary", m, history_index=st.history_index)))
        else:
            placed.append((pos, replace(_plain(m), history_index=st.history_index)))
    placed.extend((k, _plain(m)) for k, m in enumerate(sent) if k not in covered)
    return _numbered(placed)


# ---------------------------------------------------------------------------------------------------


def _plain(m: dict[str, Any]) -> ContextItem:
    role = str(m.get("role") or "user")
    status = "pinned" if role == "system" and text_of(m.get("content")).startswith("[pinned ") else "kept"
    return ContextItem(0, role, status, m)


def _numbered(placed: list[tuple[float | None, ContextItem]]) -> list[ContextItem]:
    """The items in the order the step received them, numbered; an item it did not receive (key None)
    goes just before the next received one of the history (after the system prompt and pins)."""
    keys: list[float] = []
    following = float("inf")
    for key, _ in reversed(placed):
        if key is not None:
            following = key
        keys.append(following - 0.5 if key is None else key)
    keys.reverse()
    ordered = [placed[k][1] for k in sorted(range(len(placed)), key=lambda k: (keys[k], k))]
    out = []
    for n, item in enumerate(ordered):
        status = item.status
        if n == 0 and item.role == "system" and status == "kept":
            status = "system"
        out.append(replace(item, index=n, status=status))
    return out


def _chat(m: Mapping[str, Any]) -> dict[str, Any]:
    """A message of the trace (OpenAI shape, or the snapshot's flattened `tool_calls`) in the chat
    shape a provider takes: only the keys that are set, tool calls as `function` calls."""
    out: dict[str, Any] = {"role": str(m.get("role") or "user"), "content": m.get("content")}
    calls = m.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [_call(c) for c in calls if isinstance(c, Mapping)]
    for key in ("tool_call_id", "name"):
        if m.get(key) is not None:
            out[key] = m[key]
    return out


def _call(c: Mapping[str, Any]) -> dict[str, Any]:
    fn = c.get("function") if isinstance(c.get("function"), Mapping) else c
    assert isinstance(fn, Mapping)
    args = fn.get("arguments")
    return {
        "id": c.get("id"),
        "type": "function",
        "function": {"name": fn.get("name"), "arguments": args if isinstance(args, str) else _json(args)},
    }


def _answer(view: StepView) -> str | None:
    facts = view.turn_event.metadata.get("facts") if view.turn_event else None
    text = facts.get("assistant_text") if isinstance(facts, Mapping) else None
    return text if isinstance(text, str) else None


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(p.get("text") if isinstance(p, Mapping) else p) for p in content)
    return _json(content)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)
