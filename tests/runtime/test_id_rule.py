"""The run_id / step_id rule (docs/trace-format.md): one function, used by the trace parser and by the
runtime for the run ids it is given, so the runtime never writes an event its reader or the server refuses."""

from __future__ import annotations

import pytest

from runtime import Runtime, RuntimeConfig
from runtime._providers import ScriptedProvider
from runtime._trace import TraceEvent, id_problem
from runtime.errors import ConfigError, TraceFormatError


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("8b2685b6-1c6e-4c5e-9a55-7d0c8f1c2b3a", None),
        ("run #1 (été) ?%", None),
        ("team/run", "contains '/' at position 5; ids may not contain '/' or control characters"),
        (
            "a\nb",
            "contains a control character (U+000A) at position 2; ids may not contain '/' or control characters",
        ),
        (
            "a\x00",
            "contains a control character (U+0000) at position 2; ids may not contain '/' or control characters",
        ),
        (
            "a\x7f",
            "contains a control character (U+007F) at position 2; ids may not contain '/' or control characters",
        ),
        (
            "\x85",
            "contains a control character (U+0085) at position 1; ids may not contain '/' or control characters",
        ),
    ],
)
def test_one_rule(value: str, problem: str | None) -> None:
    assert id_problem(value) == problem
    event = {"run_id": value, "step_id": "s", "event_type": "turn", "timestamp": "2026-11-30T10:00:00Z"}
    if problem is None:
        assert TraceEvent.from_dict(event).run_id == value
    else:
        with pytest.raises(TraceFormatError) as exc:
            TraceEvent.from_dict(event)
        assert (exc.value.reason, exc.value.field) == (f"'run_id' {problem}", "run_id")
        with pytest.raises(TraceFormatError, match="'step_id' contains"):
            TraceEvent.from_dict({**event, "run_id": "r", "step_id": value})


def test_the_runtime_refuses_a_run_id_the_server_would_refuse() -> None:
    rt = Runtime({"scripted": ScriptedProvider([])}, config=RuntimeConfig(trace=False))
    with pytest.raises(ConfigError, match=r"run_id 'team/run' contains '/' at position 5"):
        rt.chat(run_id="team/run")
    assert rt.chat(run_id="team-run").run_id == "team-run"
