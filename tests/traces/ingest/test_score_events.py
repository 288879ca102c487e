"""Score events (`chat.score`, docs/trace-format.md "Score events") through ingest: a well-formed one
becomes a `Score` of its run, turn or step through the one ingest path; the same trace ingested twice
is one score; a malformed one is rejected with its field while the others are kept; a score whose
config does not exist yet keeps its raw event and is written by a rebuild once it does; a run's status
and times ignore its score events."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.traces.views_helpers import decision, envelope, our_step
from traces.ingest import do_rebuild_projections, ingest_events, ingest_jsonl
from traces.models import AuditLog, Event, Project, Run, Score, ScoreConfig

RUN = "scored-run"
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def score_event(
    score: dict[str, Any], turn: int | None = None, step: int | None = None, **md: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "producer": "arcana-console",
        "turn": turn,
        "step": step,
        "score": score,
        **md,
    }
    if turn is not None and step is not None:
        metadata.update(console_turn=turn, console_step=step)
    ev = envelope(RUN, "score", metadata)
    ev["timestamp"] = (T0 + timedelta(minutes=30)).isoformat()
    return ev


def two_turns() -> list[dict[str, Any]]:
    return [
        *our_step(RUN, 1, 1, decisions=[decision(0, "system"), decision(1, "user")]),
        *our_step(RUN, 2, 1, decisions=[decision(0, "system"), decision(1, "user", "dropped")]),
    ]


@pytest.fixture
def configs(project: Project) -> None:
    ScoreConfig.objects.create(project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5)
    ScoreConfig.objects.create(project=project, name="kept_constraint", kind="boolean")
    ScoreConfig.objects.create(
        project=project, name="tone", kind="categorical", categories=["friendly", "curt"]
    )


def jsonl(events: list[dict[str, Any]]) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(e) + "\n" for e in events).encode())


def test_score_events_become_scores_once_however_often_the_trace_comes(
    project: Project, configs: None
) -> None:
    events = two_turns() + [
        score_event({"name": "helpfulness", "value": 4, "comment": "short", "target": "run"}),
        score_event({"name": "kept_constraint", "value": False, "target": "turn"}, turn=2),
        score_event({"name": "tone", "value": "curt", "target": "step"}, turn=1, step=1),
    ]
    before = Run.objects.none()
    ingest_jsonl(project, jsonl(events), source="upload")
    rows = list(
        Score.objects.order_by("name").values_list(
            "name", "target", "turn_number", "step_number", "value", "label", "comment", "source"
        )
    )
    assert rows == [
        ("helpfulness", "run", None, None, 4.0, "", "short", "api"),
        ("kept_constraint", "turn", 2, None, 0.0, "false", "", "api"),
        ("tone", "step", 1, 1, None, "curt", "", "api"),
    ]
    assert set(Score.objects.values_list("author_label", flat=True)) == {"runtime (score event)"}
    assert AuditLog.objects.filter(event_type=AuditLog.SCORE_CREATED).count() == 1
    # The same file again, then the events through the API path, then a rebuild: still three scores.
    ingest_jsonl(project, jsonl(events), source="upload")
    again = ingest_events(project, events, source="api")
    assert {r.status for r in again.results} == {"duplicate"}
    do_rebuild_projections(project=project)
    assert Score.objects.count() == 3 and not before
    run = Run.objects.get(run_id=RUN)
    assert run.events == len(events) and run.turns == 2


def test_a_run_scored_later_keeps_its_status_and_times(project: Project, configs: None) -> None:
    ingest_events(project, two_turns(), source="api")
    run = Run.objects.get(run_id=RUN)
    status, ended = run.status, run.ended_at
    cancel = envelope(RUN, "state_change", {"producer": "arcana-console", "turn": None, "step": None,
                                            "stopped": "user_cancelled", "detail": "stop"},
                      stop_reason="user_cancelled", stop_detail="stop")  # fmt: skip
    cancel["timestamp"] = (T0 + timedelta(minutes=1)).isoformat()
    ingest_events(project, [cancel], source="api")
    run.refresh_from_db()
    assert run.status == "cancelled" and status != "cancelled"
    ended = run.ended_at
    ingest_events(project, [score_event({"name": "helpfulness", "value": 2})], source="api")
    run.refresh_from_db()
    assert (run.status, run.ended_at, run.turns) == ("cancelled", ended, 2)
    # A turn's score alone in a batch (a batch the turn-by-turn path would take) changes nothing either.
    ingest_events(
        project, [score_event({"name": "helpfulness", "value": 3, "target": "turn"}, turn=1)], source="api"
    )
    run.refresh_from_db()
    assert (run.status, run.ended_at) == ("cancelled", ended)
    assert Score.objects.count() == 2


BAD = [
    ({"value": 4}, "metadata.score.name"),
    ({"name": "Helpful", "value": 4}, "metadata.score.name"),
    ({"name": "helpfulness"}, "metadata.score.value"),
    ({"name": "helpfulness", "value": [4]}, "metadata.score.value"),
    ({"name": "helpfulness", "value": ""}, "metadata.score.value"),
    ({"name": "helpfulness", "value": 4, "comment": 5}, "metadata.score.comment"),
    ({"name": "helpfulness", "value": 4, "target": "compaction"}, "metadata.score.target"),
    ({"name": "helpfulness", "value": 4, "target": "turn"}, "metadata.turn"),
    ({"name": "helpfulness", "value": 4, "target": "step", "turn": 1}, "metadata.step"),
    ("not an object", "metadata.score"),
]


@pytest.mark.parametrize(("score", "field"), BAD)
def test_a_malformed_score_event_is_rejected_with_its_field_and_the_rest_kept(
    project: Project, configs: None, score: Any, field: str
) -> None:
    turn = score.pop("turn", None) if isinstance(score, dict) else None
    bad = score_event(score, turn=turn)
    good = score_event({"name": "helpfulness", "value": 5})
    result = ingest_events(project, [*two_turns(), bad, good], source="api")
    rejected = [r for r in result.results if r.status == "rejected"]
    assert [(r.index, r.field) for r in rejected] == [(4, field)], rejected
    assert Score.objects.count() == 1 and not Event.objects.filter(step_id=bad["step_id"]).exists()


def test_a_score_without_its_config_waits_in_the_raw_events_for_a_rebuild(project: Project) -> None:
    result = ingest_events(
        project, [*two_turns(), score_event({"name": "helpfulness", "value": 9})], source="api"
    )
    assert {r.status for r in result.results} == {"accepted"}  # well formed: stored raw
    assert not Score.objects.exists()
    ScoreConfig.objects.create(project=project, name="helpfulness", kind="numeric", min_value=1, max_value=10)
    do_rebuild_projections(project=project)
    do_rebuild_projections(project=project)
    assert list(Score.objects.values_list("name", "value")) == [("helpfulness", 9.0)]
