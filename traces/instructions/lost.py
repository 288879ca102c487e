"""A run's lost instructions as the checks see them: each with a key (the same for the same
instruction of the same agent, whatever re-ingestion did to the rows) and the answer a check reads,
plus the latest check of each for the run page and the API."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from traces.models import InstructionCheck, Run, Step
from traces.runs import queries


def instruction_key(agent: str, source: str, text: str) -> str:
    return hashlib.blake2b(f"{agent}\0{source}\0{text}".encode(), digest_size=16).hexdigest()


@dataclass
class Lost:
    """One lost instruction of a run's agent, and its latest check (None: never checked)."""

    key: str
    text: str
    source: str
    turn: int
    step: int
    check: InstructionCheck | None = field(default=None)


def lost_instructions(run: Run, agent: str, changes: queries.ContextChanges | None = None) -> list[Lost]:
    """The agent's lost instructions, in the order they were lost, one per key (two bounded queries:
    the decisions' reports, unless `changes` holds them already, and — when any was lost — the
    checks)."""
    out: dict[str, Lost] = {}
    for item in (changes or queries.context_changes(run, agent)).lost:
        text, source = str(item["text"]), str(item["source"])
        key = instruction_key(agent, source, text)
        out.setdefault(key, Lost(key, text, source, int(item["turn"]), int(item["step"])))
    if out:
        checks = InstructionCheck.objects.filter(
            project_id=run.project_id, run_id=run.run_id, agent=agent, instruction_key__in=list(out)
        ).order_by("created_at", "id")
        for c in checks:
            out[c.instruction_key].check = c  # the newest wins
    return list(out.values())


def answer_after(run: Run, agent: str, turn: int, step: int) -> Step | None:
    """The agent's last answer (a step with text) at or after turn `turn` step `step`: what the
    model said once the instruction was gone, as late as the run shows it."""
    steps = Step.objects.filter(run=run, agent=agent).exclude(assistant_text=None).exclude(assistant_text="")
    later = steps.filter(turn_number__gt=turn) | steps.filter(turn_number=turn, number__gte=step)
    return later.order_by("-turn_number", "-number").first()
