"""A score's target, by its address: project + run id (+ agent, turn and step numbers) + kind.

`parse_address` reads one from untrusted input (the API's JSON, a page's form); `check_addresses`
checks a batch of them against the project's runs in a few queries (one per kind of row, not one per
score), so 10,000 scores through the API stay a few hundred queries. A score on turn 99 of a 3-turn
run is refused, like a note on it: the target must exist when the score is written. After that the
score keeps its address, whatever happens to the projection rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from traces.collab.notes import storable_text
from traces.models import ContextDecision, Project, Run, Score, Step, Turn

Target = Score.Target


class ScoreError(ValueError):
    """Bad score input; `field` names the input at fault (the API's error shape, the form)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Address:
    run_id: str
    target: str = Target.RUN
    agent: str = ""
    turn: int | None = None
    step: int | None = None

    @property
    def key(self) -> tuple[str, str, str, int | None, int | None]:
        return (self.run_id, self.target, self.agent, self.turn, self.step)


def text_field(data: Mapping[str, Any], field: str, limit: int, default: str = "") -> str:
    value = data.get(field, default)
    if value is None:
        return default
    if not isinstance(value, str) or not storable_text(value):
        raise ScoreError(field, "must be a string (no NUL characters)")
    if len(value) > limit:
        raise ScoreError(field, f"at most {limit} characters")
    return value


def _number(data: Mapping[str, Any], field: str) -> int | None:
    value = data.get(field)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        raise ScoreError(field, "must be a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ScoreError(field, "must be a whole number") from None
    if number < 1 or number > 2_000_000_000:
        raise ScoreError(field, "must be 1 or greater (turns and steps are 1-based)")
    return number


def parse_address(data: Mapping[str, Any]) -> Address:
    """The address in `data` (`run_id`, `target`, `agent`, `turn`, `step`), its shape checked: a turn
    target needs a turn, a step / decision / compaction target a turn and a step. Without `target`,
    the most precise one the numbers name (run, turn or step)."""
    run_id = text_field(data, "run_id", 200)
    if not run_id:
        raise ScoreError("run_id", "name the run (its run id)")
    agent = text_field(data, "agent", 200)
    turn = _number(data, "turn")
    step = _number(data, "step")
    target = data.get("target") or (Target.STEP if step else Target.TURN if turn else Target.RUN)
    if target not in Target.values:
        raise ScoreError("target", f"one of {', '.join(Target.values)}")
    if step is not None and turn is None:
        raise ScoreError("step", "a step needs its turn")
    if target == Target.RUN and (turn is not None or step is not None):
        raise ScoreError("target", "a run's score names no turn or step")
    if target == Target.TURN and (turn is None or step is not None):
        raise ScoreError("turn", "a turn's score names its turn, and no step")
    if target in (Target.STEP, Target.DECISION, Target.COMPACTION) and step is None:
        raise ScoreError("step", f"a {target}'s score names its turn and step")
    return Address(run_id=run_id, target=str(target), agent=agent, turn=turn, step=step)


def check_addresses(
    project: Project, addresses: Sequence[Address]
) -> tuple[list[Address], dict[int, ScoreError]]:
    """Each address with its agent settled (a pool's first agent when none is named below the run),
    and the refusals by index: an unknown run, agent, turn, step, decision, or a decision that
    compacted nothing for a compaction."""
    errors: dict[int, ScoreError] = {}
    run_ids = {a.run_id for a in addresses}
    runs = {
        r["run_id"]: r
        for r in Run.objects.filter(project=project, run_id__in=run_ids).values("pk", "run_id", "agents")
    }
    settled: list[Address] = []
    for i, a in enumerate(addresses):
        run = runs.get(a.run_id)
        if run is None:
            errors[i] = ScoreError("run_id", "no such run in this project")
        else:
            agents = list(run["agents"] or [])
            if a.agent and a.agent not in agents:
                errors[i] = ScoreError("agent", "no such agent in this run")
            elif agents and not a.agent and a.target != Target.RUN:
                a = replace(a, agent=agents[0])
        settled.append(a)
    pks = {r["run_id"]: r["pk"] for r in runs.values()}
    below = [(i, a) for i, a in enumerate(settled) if i not in errors and a.target != Target.RUN]
    if not below:
        return settled, errors
    run_pks = {pks[a.run_id] for _, a in below}
    turn_numbers = {a.turn for _, a in below}
    turns: set[tuple[Any, ...]] = set(
        Turn.objects.filter(run__in=run_pks, number__in=turn_numbers).values_list("run", "agent", "number")
    )
    stepped = [(i, a) for i, a in below if a.step is not None]
    steps: set[tuple[Any, ...]] = set()
    decisions: dict[tuple[Any, ...], bool] = {}
    if stepped:
        step_numbers = {a.step for _, a in stepped}
        steps = set(
            Step.objects.filter(
                run__in=run_pks, turn_number__in=turn_numbers, number__in=step_numbers
            ).values_list("run", "agent", "turn_number", "number")
        )
        if any(a.target in (Target.DECISION, Target.COMPACTION) for _, a in stepped):
            for run_pk, agent, turn, step, dropped, compressed in ContextDecision.objects.filter(
                run__in=run_pks, turn_number__in=turn_numbers, step_number__in=step_numbers
            ).values_list("run", "agent", "turn_number", "step_number", "dropped_count", "compressed_count"):
                decisions[(run_pk, agent, turn, step)] = bool(dropped or compressed)
    for i, a in below:
        pk = pks[a.run_id]
        if (pk, a.agent, a.turn) not in turns:
            errors[i] = ScoreError("turn", "no such turn in this run")
        elif a.step is None:
            continue
        elif (pk, a.agent, a.turn, a.step) not in steps:
            errors[i] = ScoreError("step", "no such step in this turn")
        elif a.target in (Target.DECISION, Target.COMPACTION):
            at = (pk, a.agent, a.turn, a.step)
            if at not in decisions:
                errors[i] = ScoreError("step", "this step has no context decision")
            elif a.target == Target.COMPACTION and not decisions[at]:
                errors[i] = ScoreError("target", "this step's context decision dropped or condensed nothing")
    return settled, errors
