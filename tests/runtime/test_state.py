"""`chat.export_state()` → `rt.chat(state=...)`: the conversation continues exactly, in this process or
another one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runtime import ConfigError, Runtime, RuntimeConfig, ScriptedProvider
from tests.runtime.session_helpers import call, calls, of_type, read_events, run

ROOT = Path(__file__).resolve().parents[2]

SCRIPT: list[Any] = [
    calls(call("lookup", city="Oslo"), call("pin", content="Oslo is the target city.", label="city")),
    "Oslo is 21C.",
    "Noted the second thing.",
    calls(call("recall", turn=1, include="tool_calls"), call("unpin", pin_id="p_0000000a")),
    calls(call("pin", content="Third turn fact.", label="fact3")),
    "All done.",
]
MESSAGES = ["weather in Oslo?", "second thing", "what did you look up?"]


def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 21C"


def make_runtime(trace_dir: Path) -> Runtime:
    return Runtime(
        {"scripted": ScriptedProvider(SCRIPT)},
        config=RuntimeConfig(
            trace_dir=str(trace_dir), cognitive_primitives=["recall", "pin"], context_window=16000
        ),
        tools=[lookup],
    )


def ids(*values: str) -> Any:
    it = iter(values)
    return lambda: next(it)


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    state = dict(state)
    state.pop("run_id")
    state.pop("spine")
    state["budgets"] = {k: v for k, v in state["budgets"].items() if k != "time_ms"}
    return state


def uninterrupted(trace_dir: Path) -> dict[str, Any]:
    rt = make_runtime(trace_dir)

    async def go() -> dict[str, Any]:
        async with rt.chat(system="sys") as chat:
            chat.cognitive.id_factory = ids("p_0000000a", "p_0000000b")
            replies = [await chat.send(m) for m in MESSAGES]
            return {
                "reply": [replies[-1].content, replies[-1].turn, replies[-1].steps, replies[-1].tool_calls],
                "requests": rt.providers["scripted"].requests[-3:],
                "state": chat.export_state(),
            }

    return run(go())


def first_two_turns(trace_dir: Path, **export: Any) -> dict[str, Any]:
    rt = make_runtime(trace_dir)

    async def go() -> dict[str, Any]:
        async with rt.chat(system="sys") as chat:
            chat.cognitive.id_factory = ids("p_0000000a")
            for m in MESSAGES[:2]:
                await chat.send(m)
            return chat.export_state(**export)

    return json.loads(json.dumps(run(go())))


def test_export_is_json_safe_and_complete(tmp_path: Path) -> None:
    state = first_two_turns(tmp_path)
    assert json.loads(json.dumps(state)) == state
    assert state["format"] == "arcana-console/session-state" and state["version"] == 1
    assert state["turn"] == 2 and state["system"] == "sys"
    assert [m["role"] for m in state["history"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert state["message_turns"] == [0, 1, 1, 1, 1, 1, 2, 2]
    assert [p["pin_id"] for p in state["pins"]] == ["p_0000000a"] and state["pins"][0]["created_turn"] == 1
    assert state["provider_cursor"]["used"] == [0, 1, 2]
    assert state["cognitive_primitives"] == ["recall", "pin"]
    assert state["budgets"]["iterations_used"] == 3


def test_restore_continues_exactly_in_process(tmp_path: Path) -> None:
    expected = uninterrupted(tmp_path / "a")
    state = first_two_turns(tmp_path / "b")
    rt = make_runtime(tmp_path / "b")  # a fresh runtime and a fresh scripted provider

    async def go() -> dict[str, Any]:
        async with rt.chat(state=state) as chat:
            chat.cognitive.id_factory = ids("p_0000000b")
            reply = await chat.send(MESSAGES[2])
            return {
                "reply": [reply.content, reply.turn, reply.steps, reply.tool_calls],
                "requests": rt.providers["scripted"].requests,
                "state": chat.export_state(),
            }

    got = run(go())
    assert got["reply"] == expected["reply"]
    assert got["requests"] == expected["requests"]
    assert comparable(got["state"]) == comparable(expected["state"])
    assert got["state"]["run_id"] == state["run_id"]


def test_restored_session_keeps_writing_the_same_run(tmp_path: Path) -> None:
    state = first_two_turns(tmp_path)
    rt = make_runtime(tmp_path)

    async def go() -> None:
        async with rt.chat(state=state) as chat:
            chat.cognitive.id_factory = ids("p_0000000b")
            await chat.send(MESSAGES[2])

    run(go())
    events = read_events(tmp_path)
    assert {e["run_id"] for e in events} == {state["run_id"]}
    turns = of_type(events, "turn")
    assert [t["metadata"]["turn"] for t in turns] == [1, 1, 2, 3, 3, 3]
    assert [t["parent_step_id"] for t in turns[1:]] == [t["step_id"] for t in turns[:-1]]  # spine unbroken
    assert [e["budgets"]["iterations_used"] for e in of_type(events, "llm_call")] == [1, 2, 3, 4, 5, 6]


def test_restore_continues_exactly_in_another_process(tmp_path: Path) -> None:
    expected = uninterrupted(tmp_path / "a")
    state = first_two_turns(tmp_path / "b")
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    program = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from tests.runtime.test_state import MESSAGES, make_runtime, ids
        from pathlib import Path

        async def main():
            rt = make_runtime(Path({str(tmp_path / "b")!r}))
            state = json.loads(Path({str(state_file)!r}).read_text())
            async with rt.chat(state=state) as chat:
                chat.cognitive.id_factory = ids("p_0000000b")
                reply = await chat.send(MESSAGES[2])
                out = {{
                    "reply": [reply.content, reply.turn, reply.steps, reply.tool_calls],
                    "requests": rt.providers["scripted"].requests,
                    "state": chat.export_state(),
                }}
            sys.stdout.write(json.dumps(out))

        asyncio.run(main())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["reply"] == json.loads(json.dumps(expected["reply"]))
    assert got["requests"] == json.loads(json.dumps(expected["requests"]))
    assert comparable(got["state"]) == comparable(json.loads(json.dumps(expected["state"])))
    assert got["state"]["run_id"] == state["run_id"]


def test_export_without_history_keeps_counters_pins_and_recall(tmp_path: Path) -> None:
    state = first_two_turns(tmp_path, include_history=False)
    assert state["history"] == [{"role": "system", "content": "sys"}] and state["message_turns"] == [0]
    assert state["turn"] == 2 and state["first_turn_in_memory"] == 3 and len(state["pins"]) == 1
    rt = make_runtime(tmp_path)

    async def go() -> Any:
        async with rt.chat(state=state) as chat:
            chat.cognitive.id_factory = ids("p_0000000b")
            reply = await chat.send(MESSAGES[2])
            return reply, chat

    reply, chat = run(go())
    assert reply.turn == 3
    # The recall of turn 1 came from the trace and found the assistant tool-call message and its two results.
    [entry] = chat.recall_log
    assert (entry["source"], entry["found"], entry["message_count"]) == ("trace", True, 3)
    request = rt.providers["scripted"].requests[0]
    assert [m["role"] for m in request["messages"]] == [
        "system",
        "system",
        "user",
    ]  # system, pin, new message


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.update(format="other"), "is not a"),
        (lambda s: s.update(version=99), "unsupported state version"),
        (lambda s: s.update(message_turns=[0]), "damaged"),
        (lambda s: s.pop("run_id"), "no run_id"),
        (lambda s: s.update(cognitive_primitives=["dream"]), "unknown cognitive primitive"),
    ],
)
def test_a_bad_state_is_refused(tmp_path: Path, mutate: Any, message: str) -> None:
    state = first_two_turns(tmp_path)
    mutate(state)
    with pytest.raises(ConfigError, match=message):
        make_runtime(tmp_path).chat(state=state)


def test_a_different_system_prompt_is_refused(tmp_path: Path) -> None:
    state = first_two_turns(tmp_path)
    with pytest.raises(ConfigError, match="different system prompt"):
        make_runtime(tmp_path).chat(system="other", state=state)
    assert make_runtime(tmp_path).chat(system="sys", state=state).turn == 2


def test_a_cursor_from_another_script_is_refused(tmp_path: Path) -> None:
    state = first_two_turns(tmp_path)
    rt = Runtime(
        {"scripted": ScriptedProvider(["other"])},
        config=RuntimeConfig(trace_dir=None, cognitive_primitives=["recall", "pin"]),
        tools=[lookup],
    )
    with pytest.raises(ConfigError, match="different script"):
        rt.chat(state=state)


def test_the_state_module_is_a_pure_codec(tmp_path: Path) -> None:
    """`_session/state.py` knows the format only: it imports no session, pool or runtime module, and
    a decoded state encodes back to the dict it came from; `Runtime.chat(state=...)` resolves it."""
    tree = ast.parse((ROOT / "runtime" / "_session" / "state.py").read_text(encoding="utf-8"))
    relative = {
        "." * n.level + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level
    }
    assert relative == {"..errors"}
    from runtime._session.state import decode_session, encode_session

    state = first_two_turns(tmp_path)
    assert encode_session(decode_session(state)) == state
    with pytest.raises(ConfigError, match="must be a dict"):
        decode_session([state])
