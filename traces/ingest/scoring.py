"""Score events into scores: after a batch's runs are projected, each new `score` event
(`ChatSession.score`, docs/trace-format.md "Score events") becomes a `Score` through the scores' one
writer (`traces.scores.actions`: the project's config by its name, the value checked against it, the
target checked against the run's turns and steps, one audit row).

The score's `client_id` is made of its run and event ids (`client_id_of`), so the same event stored
again — a file uploaded twice, a rebuild of the projections — is the one score. A score event whose
score cannot be written (no config of that name, a value out of its range, a turn not stored yet) keeps
its raw event, is logged, and is written by the next rebuild that finds its config and target."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from typing import Any

from runtime import TraceEvent
from runtime.facts import SCORE_EVENT, ScoreFact, score_fact
from traces.models import Project, Score
from traces.scores.actions import BatchResult, ScoreInput, check_item, configs_by_name, do_write_scores
from traces.scores.targets import ScoreError

log = logging.getLogger(__name__)

#: Who wrote a score from a trace, as the audit log and the score's author say.
AUTHOR = "runtime (score event)"


def client_id_of(fact: ScoreFact) -> str:
    """The score's client id: `trace:` and a digest of (run id, event id), within 200 characters."""
    digest = hashlib.sha256(f"{fact.run_id}\x00{fact.event_id}".encode()).hexdigest()[:40]
    return f"trace:{digest}"


def _item(fact: ScoreFact) -> dict[str, Any]:
    return {
        "name": fact.name,
        "value": fact.value,
        "run_id": fact.run_id,
        "target": fact.target,
        "turn": fact.turn,
        "step": fact.step,
        "agent": fact.agent or "",
        "comment": fact.comment,
        "client_id": client_id_of(fact),
    }


def do_project_scores(project: Project, events: Iterable[TraceEvent]) -> BatchResult | None:
    """Write the scores of the score events among `events` (None when there is none)."""
    facts = [f for ev in events if ev.event_type == SCORE_EVENT and (f := score_fact(ev)) is not None]
    if not facts:
        return None
    configs = configs_by_name(project)
    items: list[ScoreInput | ScoreError] = []
    for fact in facts:
        try:
            items.append(check_item(configs, _item(fact)))
        except ScoreError as e:
            items.append(e)
    result = do_write_scores(project, AUTHOR, items, Score.Source.API)
    for r in result.results:
        if r.error is not None:
            f = facts[r.index]
            log.info(
                "score event %s of run %r in project %s not written as a score: %s %s",
                f.event_id, f.run_id, project.pk, r.error.field, r.error.message,
            )  # fmt: skip
    return result
