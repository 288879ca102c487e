"""What the run, turn and runs-list pages show of cost (called by `traces.runs.views`)."""

from __future__ import annotations

from typing import Any

from traces.dashboard.prices import step_costs


def add_turn_costs(ctx: dict[str, Any]) -> None:
    """The turn's cost (`turn_cost`) and each step's (`sv["cost"]`, None when its model has no
    price), from the steps the turn page holds already (no query but the project's prices). What
    filled each step's context (`sv["comp"]`) comes with the turn's cached parts (`turn_page`)."""
    views = ctx.get("steps") or []
    summary, each = step_costs(ctx["run"].project_id, [sv["step"] for sv in views])
    for sv, cost in zip(views, each, strict=True):
        sv["cost"] = cost
        sv["cost_shown"] = True
    ctx["turn_cost"] = summary
