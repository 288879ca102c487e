"""A hide-content page's context by allow-list (`traces.collab.redaction`), and the markup the builders
drew before it was redacted, drawn again from what is left: a turn's decision tables and "what changed"
(`traces.runs.turn_page`'s own drawing functions, on message decisions and pins redacted here), the
fidelity map's rectangles (`traces.runs.run_page.fidelity_groups_html`, on rows and cells whose labels
and tooltips are hidden)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.utils.html import format_html

from traces.collab.redaction import allow_only
from traces.models import ContextDecision, Pin, Run, unpack_message_decisions

Hide = Callable[[Any], Any]


def allow_only_ctx(ctx: dict[str, Any], hide: Hide) -> dict[str, Any]:
    """`ctx` (already redacted by `sharing.redact`) with every string outside the allow-list hidden."""
    out: dict[str, Any] = {}
    for key, value in ctx.items():
        if key in ("primitives", "loose_primitives") and isinstance(value, list):
            # (call, its one-line summary): the summary was written from the call's codes only.
            out[key] = [(allow_only(ev, hide), line) for ev, line in value]
        elif key == "fmap" and value is not None:
            out[key] = _fidelity_map(value, hide)
        elif key == "steps" and isinstance(value, list):
            out[key] = value  # below, with the run and turn
        else:
            out[key] = allow_only(value, hide, key)
    if isinstance(out.get("steps"), list) and out.get("turn") is not None and out.get("run") is not None:
        out["steps"] = _steps(out["run"], out.get("agent") or "", out["turn"].number, out["steps"], hide)
    return out


def _steps(
    run: Run, agent: str, number: int, views: list[dict[str, Any]], hide: Hide
) -> list[dict[str, Any]]:
    """The turn's step views, each with its decision table and "what changed" drawn again from message
    decisions and pins redacted by the allow-list (the same drawing as `turn_page`)."""
    from traces.runs import queries, turn_page

    pins = [
        allow_only(p, hide)
        for p in Pin.objects.filter(run=run, agent=agent).order_by("created_turn", "created_step", "id")
    ]
    ids = [sv["decision"].pk for sv in views if sv.get("decision") is not None]
    tables = dict(ContextDecision.objects.filter(pk__in=ids).values_list("pk", "message_table"))
    previous = (
        ContextDecision.objects.filter(run=run, agent=agent, turn_number__lt=number)
        .order_by("-turn_number", "-step_number")
        .values_list("turn_number", "step_number", "message_table")
        .first()
    )
    prev_label = f"turn {previous[0]} step {previous[1]}" if previous else ""
    prev_mds = _decisions(previous[2], hide) if previous else None
    prev_turn = previous[0] if previous else 0
    out = []
    for sv in views:
        special = {"step", "decision", "table", "changes", "changes_html", "primitives"}
        view = {k: (v if k in special else allow_only(v, hide, k)) for k, v in sv.items()}
        view["step"] = allow_only(sv["step"], hide)
        view["primitives"] = [(allow_only(ev, hide), line) for ev, line in sv.get("primitives") or []]
        decision = sv.get("decision")
        view["decision"] = allow_only(decision, hide)
        view["table"] = view["changes_html"] = format_html("{}", "")
        view["changes"] = None
        if decision is not None:
            mds = _decisions(tables.get(decision.pk), hide)
            view["table"] = turn_page.decision_table_html(queries.decision_rows(mds, prev_mds, pins, number))
            changes = queries.step_changes(mds, prev_mds, prev_label, pins, number, prev_turn)
            if changes is not None:
                view["changes"] = changes
                view["changes_html"] = turn_page.changes_html(_listed(changes))
            prev_mds, prev_label, prev_turn = mds, f"turn {number} step {sv['step'].number}", number
        out.append(view)
    return out


def _listed(changes: Any) -> Any:
    from traces.runs.turn_page import CHANGES_LISTED

    return dataclasses.replace(changes, changed=changes.changed[:CHANGES_LISTED])


def _decisions(text: str | None, hide: Hide) -> list[dict[str, Any]]:
    return [allow_only(dict(md), hide) for md in unpack_message_decisions(text)]


def _fidelity_map(fmap: Any, hide: Hide) -> Any:
    """The map with its row labels, cell and column tooltips hidden (they name pins by their labels and
    quote decisions' reasons), its rectangles drawn again from them."""
    from traces.runs.run_page import fidelity_groups_html

    out = dataclasses.replace(
        fmap,
        rows=[
            dataclasses.replace(
                r, label=hide(r.label) if r.is_pin and r.label else r.label, title=hide(r.title)
            )
            for r in fmap.rows
        ],
        cells=[dataclasses.replace(c, title=hide(c.title)) for c in fmap.cells],
        columns=[{**c, "label": hide(c.get("label"))} for c in fmap.columns],
    )
    out.drawn = fidelity_groups_html(out)
    return out
