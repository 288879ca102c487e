"""`ChatSession.score` (issue 36): a score of the run, a turn or a step written as a `score` event in the
trace, refused when malformed; the run's facts (turns, steps, outcome) leave score events out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import Runtime, RuntimeConfig, ScriptedProvider, TraceEvent, TraceReader
from runtime.facts import build_steps, normalize_events, run_outcome, score_fact
from tests.runtime.session_helpers import of_type, read_events, run


def scripted(tmp_path: Path, answers: list[Any]) -> Runtime:
    return Runtime({"scripted": ScriptedProvider(answers)}, config=RuntimeConfig(trace_dir=str(tmp_path)))


def test_scores_of_the_run_a_turn_and_a_step_are_score_events(tmp_path: Path) -> None:
    rt = scripted(tmp_path, ["one", "two"])

    async def go() -> list[Any]:
        async with rt.chat() as chat:
            await chat.send("a")
            await chat.send("b")
            return [
                chat.score("helpfulness", 4, comment="kept it short"),
                chat.score("kept_constraint", True, target="turn"),  # the last turn
                chat.score("tone", "friendly", target="step", turn=1, step=1),
            ]

    ids = run(go())
    events = read_events(tmp_path)
    scores = of_type(events, "score")
    assert [e["step_id"] for e in scores] == ids and len(set(ids)) == 3
    assert events[-3:] == scores  # written after the turns, in order
    md = [e["metadata"] for e in scores]
    assert md[0]["score"] == {"name": "helpfulness", "value": 4, "comment": "kept it short", "target": "run"}
    assert (md[0]["turn"], md[0]["step"], md[0]["producer"]) == (None, None, "arcana-console")
    assert (md[1]["score"]["value"], md[1]["turn"], md[1]["step"]) == (True, 2, None)
    assert (md[2]["score"]["target"], md[2]["console_turn"], md[2]["console_step"]) == ("step", 1, 1)
    facts = [score_fact(TraceEvent.from_dict(e)) for e in scores]
    assert [(f.name, f.target, f.turn, f.step) for f in facts if f] == [
        ("helpfulness", "run", None, None),
        ("kept_constraint", "turn", 2, None),
        ("tone", "step", 1, 1),
    ]


def test_a_scored_run_reads_as_it_did(tmp_path: Path) -> None:
    """Score events are no part of a turn or a step, and a run's last event being a score changes
    nothing of its outcome."""
    rt = scripted(tmp_path, ["one"])

    async def go() -> str:
        async with rt.chat() as chat:
            reply = await chat.send("a")
            chat.score("helpfulness", 5)
            return reply.run_id

    run_id = run(go())
    events = [TraceEvent.from_dict(e) for e in read_events(tmp_path)]
    plain = [e for e in events if e.event_type != "score"]
    turns = build_steps(normalize_events(events))
    assert [len(sv.events) for tv in turns for sv in tv.steps] == [
        len(sv.events) for tv in build_steps(normalize_events(plain)) for sv in tv.steps
    ]
    assert run_outcome(turns, events) == run_outcome(turns, plain)
    assert TraceReader(tmp_path / f"{run_id}.jsonl").events  # the CLI's reader takes the file


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"name": "Helpful!", "value": 1}, "score.name"),
        ({"name": "h", "value": float("nan")}, "score.value"),
        ({"name": "h", "value": None}, "score.value"),
        ({"name": "h", "value": "x" * 201}, "score.value"),
        ({"name": "h", "value": 1, "comment": "x" * 5001}, "score.comment"),
        ({"name": "h", "value": 1, "target": "compaction"}, "score.target"),
        ({"name": "h", "value": 1, "turn": 1}, "names no turn"),
        ({"name": "h", "value": 1, "target": "step", "turn": 1}, "score step"),
        ({"name": "h", "value": 1, "target": "turn", "turn": 3}, "has not run"),
    ],
)
def test_a_malformed_score_is_refused_and_writes_nothing(
    tmp_path: Path, kwargs: dict[str, Any], says: str
) -> None:
    rt = scripted(tmp_path, ["one"])

    async def go() -> None:
        async with rt.chat() as chat:
            await chat.send("a")
            name, value = kwargs.pop("name"), kwargs.pop("value")
            with pytest.raises(ValueError, match=says):
                chat.score(name, value, **kwargs)

    run(go())
    assert of_type(read_events(tmp_path), "score") == []


def test_a_turn_score_before_any_turn_is_refused(tmp_path: Path) -> None:
    rt = scripted(tmp_path, [])

    async def go() -> None:
        async with rt.chat() as chat:
            with pytest.raises(ValueError, match="turn"):
                chat.score("helpfulness", 3, target="turn")
            assert chat.score("helpfulness", 3) is not None  # the run itself may be scored

    run(go())


def test_a_pool_agents_score_carries_its_agent(tmp_path: Path) -> None:
    rt = scripted(tmp_path, ["from a"])

    async def go() -> None:
        async with rt.collaborate() as pool:
            agent = pool.add("writer")
            await agent.send("hi")
            agent.score("helpfulness", 2, target="turn")

    run(go())
    (score,) = of_type(read_events(tmp_path), "score")
    assert score["metadata"]["source_agent"] == "writer" and score["metadata"]["turn"] == 1
