"""What a hide-content share link shows: an allow-list (issue 39).

A hide-content page, fragment or chart shows only the fields known to carry no content: ids, numbers,
levels, roles, statuses and times. Every other string, wherever it sits (a column, a key of a JSON
column, a chart's label or tooltip), is replaced by its size (`sharing.hide`). A field that is not
listed here is hidden: a new free-text field of a producer cannot pass through by being forgotten.

`allow_only(ctx)` is applied by `sharing.redact` to the whole context of a shared page after its own
structural redaction; the HTML the builders drew before (a turn's decision tables and "what changed",
the fidelity map's rectangles) is drawn again from the redacted values.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import Any

from django.core.paginator import Page
from django.db import models
from django.utils.safestring import SafeString

#: Per model, the string columns a hide-content page may show (ids, levels, roles, statuses, codes).
#: Numbers, booleans and times are shown anyway; every other string column is hidden.
SHOWN_FIELDS: dict[str, frozenset[str]] = {
    "Run": frozenset(
        {"run_id", "source", "agents", "model", "status", "bundle_id", "delegated_by_run_id", "tally"}
    ),
    "Turn": frozenset({"agent", "strategy"}),
    "Step": frozenset({"agent", "step_id", "model", "finish_reason"}),
    "ContextDecision": frozenset({"agent", "strategy"}),
    "Pin": frozenset({"agent", "pin_id"}),
    "PrimitiveEvent": frozenset({"agent", "event_step_id", "primitive", "tool_call_id"}),
    "Note": frozenset({"agent", "label"}),
    "Project": frozenset({"slug"}),
    "Event": frozenset({"run_id", "step_id", "parent_step_id", "event_type", "agent"}),
    "Conversation": frozenset({"run_id", "mode", "provider", "status"}),
    "ShareLink": frozenset({"prefix"}),
}

#: Keys (of JSON values, context entries and chart parts) whose string values are shown: ids, names of
#: tools and agents, roles, levels and statuses, and the geometry and classes of the charts.
SHOWN_KEYS = frozenset(
    {
        # ids and names that identify, never say
        "id", "run_id", "step_id", "pin_id", "tool_call_id", "agent", "agents", "name", "model",
        "primitive", "event_type", "bundle_id", "delegated_by_run_id", "source_agent",
        # levels, roles, statuses
        "role", "status", "source", "fidelity", "level", "strategy", "finish_reason", "error_category",
        "kind", "ended_by", "cap_source", "mode",
        # the charts' geometry, classes and links (drawn by us, from numbers)
        "x", "y", "w", "cls", "url", "separators", "legend",
        # the page's own values (an agent tab, the live poll's query, a cache key)
        "agent_tabs", "live_query", "part_key", "live_etag",
    }
)  # fmt: skip

#: Keys whose value is a code of the trace format's vocabulary ("pinned", "dropped", "L1",
#: "pin_budget_exceeded"): shown when it is one (a snake_case word), hidden when it is text.
CODE_KEYS = frozenset({"reason", "outcome", "stop_reason", "completion_reason"})
_CODE = re.compile(r"[a-z0-9_]{1,64}")

_SCALARS = (bool, int, float, Decimal, datetime, date, timedelta)


def shown(key: Any, value: str) -> bool:
    """Whether the string `value` found under `key` is shown by a hide-content page."""
    if key in SHOWN_KEYS:
        return True
    return key in CODE_KEYS and _CODE.fullmatch(value) is not None


def allow_only(
    value: Any, hide: Callable[[Any], Any], key: Any = None, memo: dict[int, Any] | None = None
) -> Any:
    """`value` with every string outside the allow-list replaced by `hide(string)`: model rows (by
    `SHOWN_FIELDS`; their cached related rows too), dataclasses, dicts, lists and tuples (by the key
    they sit under, `shown`). Works on copies. `SafeString`s (markup a builder drew) are the caller's
    to draw again; other objects (paginators) are kept as they are. `memo`: the rows copied so far
    (a row reached twice, or through its own related rows, is copied once)."""
    memo = {} if memo is None else memo
    if value is None or isinstance(value, _SCALARS) or isinstance(value, SafeString):
        return value
    if isinstance(value, str):
        if value == "" or type(value).__name__ == "Hidden" or shown(key, value):
            return value
        return hide(value)
    if isinstance(value, models.Model):
        return _model(value, hide, memo)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: allow_only(getattr(value, f.name), hide, f.name, memo)
            for f in dataclasses.fields(value)
            if f.init and not isinstance(getattr(value, f.name), SafeString)
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, Page):
        return Page(allow_only(list(value.object_list), hide, key, memo), value.number, value.paginator)
    if isinstance(value, Mapping):
        return {k: allow_only(v, hide, k, memo) for k, v in value.items()}
    if isinstance(value, list):
        return [allow_only(v, hide, key, memo) for v in value]
    if isinstance(value, tuple):
        return tuple(allow_only(v, hide, key, memo) for v in value)
    return value


def _model(row: models.Model, hide: Callable[[Any], Any], memo: dict[int, Any]) -> models.Model:
    """A copy of `row` with its string and JSON columns outside `SHOWN_FIELDS` hidden, the related rows
    it holds (`select_related`) redacted too, and values cached from the original dropped."""
    if id(row) in memo:
        return memo[id(row)]
    allowed = SHOWN_FIELDS.get(type(row).__name__, frozenset())
    out = copy.copy(row)
    memo[id(row)] = out
    for f in row._meta.concrete_fields:
        if f.is_relation or f.name in allowed:
            continue
        current = out.__dict__.get(f.attname)
        if isinstance(current, str | dict | list):
            out.__dict__[f.attname] = allow_only(current, hide, None, memo)
    cls = type(row)
    for name in list(out.__dict__):
        if isinstance(getattr(cls, name, None), cached_property):
            del out.__dict__[name]  # worked out from the original's values: recomputed from the copy's
    state = copy.copy(row._state)
    state.fields_cache = {
        k: (_model(v, hide, memo) if isinstance(v, models.Model) else v)
        for k, v in row._state.fields_cache.items()
    }
    out._state = state
    return out
