"""`runtime.compare` and `arcana trace diff`: two runs of one script with the cognitive primitives on and
off (scripted provider, real trace files), runs of different lengths and scripts, Arcana 1.2 files,
hostile strings, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import TraceReader
from runtime._cli import main
from runtime.compare import (
    LEVELS,
    PinData,
    RunData,
    StepData,
    TurnData,
    compare,
    level_of,
    pin_key,
    run_data_from_events,
    summary_differs,
)
from tests.compare_runs import play_demo, trace_file

ROOT = Path(__file__).resolve().parents[2]
PIN_RECALL = ROOT / "tests/fixtures/arcana-1.2/pin_recall"
ARCANA_RUN = "17a81a75-0187-4ca7-b323-4a0c6e1c963b"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("diff")
    on = play_demo(d, ["recall", "pin"])
    off = play_demo(d, [])
    short = play_demo(d, ["recall", "pin"], turns=3)
    s = __import__("runtime.scenarios", fromlist=["get_scenario"]).get_scenario("pin-recall-demo").script
    # A different script: turn 2's message replaced, so turns are aligned by user message.
    edited = play_demo(d, ["recall", "pin"], script=[s[0], "Something else entirely.", *s[2:]])
    released = play_demo(d, ["recall", "pin"], scenario_pin_ids=True)  # unpinned in turn 5, its last
    return {"dir": d, "on": on, "off": off, "short": short, "edited": edited, "released": released}


def data(traces: dict[str, object], key: str) -> RunData:
    reader = TraceReader(traces["dir"])  # type: ignore[arg-type]
    rid = str(traces[key])
    return run_data_from_events(rid, reader.events(rid))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["trace", "diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_primitives_on_and_off_diverge_at_the_pin(traces: dict[str, object]) -> None:
    c = compare(data(traces, "on"), data(traces, "off"))
    a, b = c.a.summary(), c.b.summary()
    assert (a["pins_made"], b["pins_made"]) == (1, 0)
    assert (a["recalls_found"], b["recalls_found"], b["recalls_not_found"]) == (1, 0, 1)
    assert (a["turns"], b["turns"]) == (5, 5) and c.aligned_by == "number"
    assert c.divergence is not None
    assert (c.divergence.a_turn, c.divergence.b_turn, c.divergence.step) == (1, 1, 2)
    assert c.divergence.reason == "pins only in A: 'constraints'"
    # Every later pair differs too: A keeps the pinned block in every working set until its unpin.
    assert [p.same_working_sets for p in c.pairs] == [False] * 5
    diff = c.working_set_diff(c.divergence.pair)
    step1, step2 = diff.steps
    assert step1.same and not step2.same
    assert [p.label for p in step2.pins_only_a] == ["constraints"] and step2.pins_only_b == []
    # The recall and the pin show on one side only, in the turn rows.
    assert any(line.startswith("recall turn=1") for line in c.pairs[3].a.primitives)
    assert c.pairs[3].b.primitives == [
        "recall REJECTED not_enabled: the 'recall' primitive is not enabled for this session (enabled: none)"
    ]


def test_the_same_settings_never_diverge_and_shorter_runs_stand_alone(traces: dict[str, object]) -> None:
    c = compare(data(traces, "on"), data(traces, "short"))
    assert c.divergence is None
    assert [(p.only_in, p.same_working_sets) for p in c.pairs] == [
        (None, True), (None, True), (None, True), ("a", None), ("a", None)
    ]  # fmt: skip
    assert c.to_dict()["working_set_diff"] is None
    assert c.to_dict(turn=4)["working_set_diff"]["b_turn"] is None


def test_different_scripts_align_by_user_message(traces: dict[str, object]) -> None:
    c = compare(data(traces, "on"), data(traces, "edited"))
    assert c.aligned_by == "message"
    shape = [(p.a.number if p.a else None, p.b.number if p.b else None) for p in c.pairs]
    assert shape == [(1, 1), (2, None), (None, 2), (3, 3), (4, 4), (5, 5)]


def test_it_reads_arcana_files_and_compares_them_with_ours(traces: dict[str, object]) -> None:
    reader = TraceReader(PIN_RECALL)
    arcana = run_data_from_events(ARCANA_RUN, reader.events(ARCANA_RUN))
    assert arcana.producer == "arcana-1.2" and len(arcana.turns) == 10
    assert arcana.summary()["pins_made"] == 2 and arcana.pins_rejected == 1
    assert (arcana.recalls_found, arcana.recalls_not_found) == (1, 2)
    # Arcana 1.2 names no pin in its decisions: the pinned blocks are still told apart by pin content.
    assert any(s.pins for t in arcana.turns for s in t.steps)
    c = compare(arcana, data(traces, "on"))
    assert c.aligned_by == "number"  # Arcana records no user messages
    assert c.divergence is not None and c.divergence.a_turn == 1


def test_levels_and_pin_keys() -> None:
    assert [LEVELS[level_of(o, f)] for o, f in [("kept", None), ("compressed", None), ("compressed", "L3"),
            ("dropped", None), ("summarized", None), ("kept", "L2")]] == ["L0", "L1", "L3", "dropped", "summarized", "L2"]  # fmt: skip
    # Two runs' pins with the same text are the same pin whatever their ids.
    assert pin_key("p_1", "x", "same text") == pin_key("p_2", None, "same text")
    assert pin_key("p_1", "label", None) != pin_key("p_1", None, None)


def test_a_message_kept_higher_in_one_run() -> None:
    def run(level: int) -> RunData:
        step = StepData.from_messages(
            1, 1, {0: (0, "system", 10), 1: (level, "user", 40), 10**9: (0, "user", 1)}
        )
        return RunData(run_id=f"r{level}", turns=[TurnData(number=1, steps=[step])])

    c = compare(run(0), run(3))
    assert c.divergence is not None and "1 message kept at a higher level in A" in c.divergence.reason
    (step,) = c.working_set_diff(0).steps
    assert [(m.index, m.a_level, m.b_level, m.higher) for m in step.messages] == [(1, "L0", "L3", "a")]
    pin = PinData("p_x", "facts", "F", 5, created_turn=1)
    assert pin.is_active_at(1) and pin.to_dict()["label"] == "facts"


# --------------------------------------------------------------------------------------------------
# arcana trace diff


def test_the_cli_prints_the_summary_turns_and_divergence(
    traces: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, str(traces["on"])[:8], str(traces["off"])[:8], "--dir", str(traces["dir"]))
    assert code == 0, err
    assert "Pins made" in out and "Recalls found" in out
    lines = {
        line.split("  ")[1].strip(): line
        for line in out.splitlines()
        if line.startswith(("  Pins made", "  Recalls found"))
    }
    assert lines["Pins made"].split()[-2:] == ["1", "0"]
    assert lines["Recalls found"].split()[-2:] == ["1", "0"]
    assert "First divergence: turn 1 (A) / turn 1 (B), step 2: pins only in A: 'constraints'" in out
    assert "[PIN] only in A:" in out and "label='constraints'" in out


def test_a_pin_released_in_the_last_turn_is_not_active_at_the_end(
    traces: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo unpins its one pin in turn 5, its last: active during that turn, not after it."""
    released, short = data(traces, "released"), data(traces, "short")
    (pin,) = released.pins
    assert (pin.unpinned_turn, len(released.turns)) == (5, 5)
    assert pin.is_active_at(5) and not pin.is_active_after(5)
    assert released.summary()["pins_active_at_end"] == 0
    assert short.summary()["pins_active_at_end"] == 1  # 3 turns: never unpinned
    code, out, err = cli(
        capsys, str(traces["released"])[:8], str(traces["short"])[:8], "--dir", str(traces["dir"])
    )
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith("  Pins active at the end")]
    assert line.split()[-2:] == ["0", "1"]


def test_the_cli_json_is_the_comparison(
    traces: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(
        capsys, str(traces["on"]), str(traces["short"]), "--dir", str(traces["dir"]), "--json", "--turn", "4"
    )
    assert code == 0
    body = json.loads(out)
    assert body == json.loads(json.dumps(compare(data(traces, "on"), data(traces, "short")).to_dict(turn=4)))
    assert body["divergence"] is None and body["working_set_diff"]["a_turn"] == 4


def test_the_cli_takes_files_and_arcana_traces(
    traces: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    arcana_file = PIN_RECALL / f"{ARCANA_RUN}.jsonl"
    code, out, err = cli(capsys, str(arcana_file), str(trace_file(traces["dir"], str(traces["on"]))))  # type: ignore[arg-type]
    assert code == 0, err
    assert f"A: {ARCANA_RUN}  (arcana-1.2)" in out
    assert "Turns (aligned by turn number" in out


def test_the_cli_exit_codes(
    traces: dict[str, object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    d = str(traces["dir"])
    assert cli(capsys, "nope", str(traces["on"]), "--dir", d)[0] == 1  # no such run: the data's fault
    code, _, err = cli(capsys, str(traces["on"]), str(traces["off"]), "--dir", d, "--turn", "99")
    assert code == 2 and "neither run has turn 99" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(trace_file(traces["dir"], str(traces["on"])).read_text() + "{not json\n")  # type: ignore[arg-type]
    code, out, err = cli(capsys, str(bad), str(traces["off"]), "--dir", d)
    assert code == 1 and "First divergence" in out and "skipped" in err


def test_the_cli_keeps_hostile_text_inert(
    traces: dict[str, object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hostile = "\x1b]0;owned\x07\x1b[2J\u202eevil"
    lines = []
    for line in trace_file(traces["dir"], str(traces["on"])).read_text().splitlines():  # type: ignore[arg-type]
        ev = json.loads(line)
        if ev["event_type"] == "turn" and ev["metadata"].get("facts", {}).get("assistant_text"):
            ev["metadata"]["facts"]["assistant_text"] = hostile
        if ev["event_type"] == "cognitive_primitive" and ev["metadata"].get("primitive") == "pin":
            ev["metadata"]["result"]["label"] = hostile
        lines.append(json.dumps(ev))
    f = tmp_path / "hostile.jsonl"
    f.write_text("\n".join(lines) + "\n")
    for extra in ([], ["--json"]):
        code, out, _ = cli(capsys, str(f), str(trace_file(traces["dir"], str(traces["off"]))), *extra)  # type: ignore[arg-type]
        assert code == 0
        for raw in ("\x1b", "\x07", "\u202e"):
            assert raw not in out


def test_a_small_duration_gap_is_no_difference() -> None:
    """Wall-clock noise (0.1 s) is not flagged; a second and a tenth of the longer run is."""
    a, b = RunData("a", duration_seconds=0.12), RunData("b", duration_seconds=0.06)
    rows = {key: (va, vb) for key, _label, va, vb in compare(a, b).summary_rows()}
    assert not summary_differs("duration_seconds", *rows["duration_seconds"])
    assert not summary_differs("duration_seconds", 10.0, 10.9)
    assert summary_differs("duration_seconds", 10.0, 12.0)
    assert summary_differs("duration_seconds", 1.0, None) and summary_differs("turns", 5, 4)


def test_no_aligned_turn_is_not_called_agreement(capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs whose scripts share no message align no turn: nothing was compared, and it says so."""
    step = StepData.from_messages(1, 1, {0: (0, "user", 10)})
    a = RunData("a", turns=[TurnData(1, user="hello", steps=[step])])
    b = RunData("b", turns=[TurnData(1, user="something else", steps=[step])])
    c = compare(a, b)
    assert c.divergence is None and c.compared_pairs == 0 and c.aligned_by == "message"
    assert "never diverge" not in c.no_divergence_text()
    assert c.no_divergence_text().startswith("No turn of A lines up with a turn of B by user message")
    same = compare(a, RunData("c", turns=[TurnData(1, user="hello", steps=[step])]))
    assert same.compared_pairs == 1
    assert same.no_divergence_text() == "The working sets never diverge in the turns both runs have."


# --------------------------------------------------------------------------------------------------
# Properties


steps_st = st.lists(
    st.tuples(
        st.dictionaries(st.integers(-3, 40), st.tuples(st.integers(0, 5), st.none() | st.text(max_size=5), st.none() | st.integers(0, 99)), max_size=12),
        st.sets(st.sampled_from(["c:aa", "c:bb", "l:x"]), max_size=2),
    ),
    min_size=1,
    max_size=4,
)  # fmt: skip
runs_st = st.lists(steps_st, min_size=0, max_size=5)


def _run(
    name: str, turns: list[list[tuple[dict[int, tuple[int, str | None, int | None]], set[str]]]]
) -> RunData:
    out = RunData(run_id=name)
    for n, steps in enumerate(turns, start=1):
        t = TurnData(number=n)
        for k, (messages, pins) in enumerate(steps, start=1):
            t.steps.append(StepData.from_messages(n, k, messages, pins={p: f"p_{p}" for p in pins}))
        out.turns.append(t)
    return out


@settings(max_examples=150, deadline=None)
@given(runs_st, runs_st)
def test_any_two_runs_compare_without_error_and_a_run_equals_itself(a: list, b: list) -> None:  # type: ignore[type-arg]
    ra, rb = _run("a", a), _run("b", b)
    same = compare(ra, _run("a2", a))
    assert same.divergence is None and all(p.same_working_sets for p in same.pairs)
    c = compare(ra, rb)
    json.dumps(c.to_dict())  # JSON all the way down
    differing = [p for p in c.pairs if p.same_working_sets is False]
    assert (c.divergence is None) == (not differing)
    if c.divergence is not None:
        assert c.divergence.pair == differing[0].index
        diff = c.working_set_diff(c.divergence.pair)
        # The divergent step shows a difference: a message at another level, or a pin only one had.
        step = next(s for s in diff.steps if s.step == c.divergence.step)
        assert not step.same
    for p in c.pairs:
        for s in c.working_set_diff(p).steps:
            for m in s.messages:
                assert m.a_level != m.b_level and m.higher in ("a", "b")
