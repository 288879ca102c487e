"""Helpers for traces tests: sample events and a snapshot of every projection row (for equality)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traces.models import ContextDecision, Pin, PrimitiveEvent, Project, Run, Step, Turn

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "arcana-1.2"
PIN_RUN = "17a81a75-0187-4ca7-b323-4a0c6e1c963b"


def sample_files() -> list[Path]:
    return sorted(SAMPLES.rglob("*.jsonl"))


def sample_events(name: str | None = None) -> list[dict[str, Any]]:
    """Events of every sample file (or of the file whose name starts with `name`), in file order."""
    out: list[dict[str, Any]] = []
    for path in sample_files():
        if name is None or path.name.startswith(name):
            out.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return out


_SKIP = {"id", "run", "turn", "step", "updated_at", "created_at"}


def _row(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields if f.name not in _SKIP}


def projection_snapshot(project: Project) -> dict[str, Any]:
    """Every projection row of the project, keyed by natural keys (no database ids)."""
    out: dict[str, Any] = {}
    for run in Run.objects.filter(project=project).order_by("run_id"):
        r = _row(run)
        r.pop("project_id")
        out[run.run_id] = {
            "run": r,
            "turns": [_row(t) for t in Turn.objects.filter(run=run).order_by("agent", "number")],
            "steps": [
                {**_row(s), "turn": (s.turn.agent, s.turn.number)}
                for s in Step.objects.filter(run=run)
                .select_related("turn")
                .order_by("agent", "turn_number", "number")
            ],
            "decisions": [
                {**_row(d), "step": (d.step.agent, d.step.turn_number, d.step.number)}
                for d in ContextDecision.objects.filter(run=run)
                .select_related("step")
                .order_by("agent", "turn_number", "step_number")
            ],
            "primitives": sorted(
                (
                    {**_row(p), "step": (p.step.turn_number, p.step.number) if p.step else None}
                    for p in PrimitiveEvent.objects.filter(run=run).select_related("step")
                ),
                key=lambda d: d["event_step_id"],
            ),
            "pins": [_row(p) for p in Pin.objects.filter(run=run).order_by("agent", "pin_id")],
        }
    return out
