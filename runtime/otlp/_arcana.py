"""Our runtime's attributes: `arcana.*` and the `arcana.event` span events, which our runtime's OTLP
export adds (context decisions, pins, primitive calls, numbering; docs/trace-format.md, "OTLP
export")."""

from __future__ import annotations

from typing import Any

from ._types import Event
from ._values import json_or_text

#: `arcana.*` attributes that hold JSON text (the others are plain values).
ARCANA_JSON = frozenset(
    {
        "context_decision",
        "pins",
        "messages",
        "budget_snapshot",
        "llm_call",
        "error",
        "tool_call",
        "primitive.args",
        "primitive.result",
    }
)


def arcana_attributes(
    rest: dict[str, Any], other_events: list[Event], unparsed: list[str]
) -> dict[str, Any] | None:
    """The span's `arcana.*` attributes (prefix dropped, JSON ones parsed) and its `arcana.event`
    span events (`events`: each one's parsed `arcana.event` attribute), taken out of `rest` /
    `other_events`; None when the span has neither (it was not exported by our runtime)."""
    out: dict[str, Any] = {}
    for key in [k for k in rest if k.startswith("arcana.")]:
        name = key[7:]
        value = rest.pop(key)
        out[name] = json_or_text(value, key, unparsed) if name in ARCANA_JSON else value
    events = [e for e in other_events if e["name"] == "arcana.event"]
    if events:
        other_events[:] = [e for e in other_events if e["name"] != "arcana.event"]
        out["events"] = [
            json_or_text(e["attributes"].get("arcana.event"), "event:arcana.event", unparsed) for e in events
        ]
    return out or None
