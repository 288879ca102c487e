"""A run that lost instructions, as the OTLP reconstruction reports them (`context_report`'s
`lost_instructions` on the step that first no longer saw them), with answers after the loss."""

from __future__ import annotations

from typing import Any

from tests.traces.views_helpers import decision, our_step
from traces.ingest import ingest_events
from traces.models import Project, Run

NEVER = "Never touch the auth module."
FIX = "Fix the login bug."
# The answer after the loss: it does what the system prompt ruled out.
LATE_ANSWER = "Done: I refactored the tests and had to touch the auth module to do it."


def ingest_lost_run(project: Project, run_id: str = "lost-run", answer: str = LATE_ANSWER) -> Run:
    events = our_step(run_id, 1, 1, decisions=[decision(0, "system"), decision(1, "user")], text="Fixed.")
    events += our_step(
        run_id, 2, 1, decisions=[decision(0, "user", "dropped"), decision(1, "user")], text=answer
    )
    report: dict[str, Any] = events[2]["metadata"]["context_report"]
    report["lost_instructions"] = [
        {"text": NEVER, "source": "system_prompt", "message_id": "m1", "agent": None, "why": "constraint"},
        {"text": FIX, "source": "user", "message_id": "m2", "agent": None, "why": "imperative"},
    ]
    ingest_events(project, events, source="api")
    return Run.objects.get(project=project, run_id=run_id)
