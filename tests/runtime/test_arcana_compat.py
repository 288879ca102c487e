"""Our trace files load in arcana-agent 1.2.0's own `arcana trace show / replay` without errors.

The reference CLI is installed from PyPI into its own virtualenv under var/ (its `arcana` command
would clash with ours), once; later runs reuse it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import venv
from pathlib import Path
from re import findall as re_findall

import pytest

from runtime.demo import run_demo
from tests.conftest import ROOT

REFERENCE = "arcana-agent==1.2.0"
VENV = ROOT / "var" / "arcana-agent-1.2.0"


def _reference_cli() -> Path:
    exe = VENV / "bin" / "arcana"
    if exe.exists():
        return exe
    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    result = subprocess.run(
        [
            str(VENV / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            REFERENCE,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0 or not exe.exists():
        message = f"could not install {REFERENCE} from PyPI: {result.stderr[-500:]}"
        if os.environ.get("ARCANA_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return exe


@pytest.fixture(scope="module")
def reference_cli() -> Path:
    return _reference_cli()


@pytest.fixture(scope="module")
def demo_traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    trace_dir = tmp_path_factory.mktemp("demo-traces")
    summary = asyncio.run(run_demo(trace_dir))
    return trace_dir, {"chat": summary["chat"]["run_id"], "pool": summary["pool"]["run_id"]}


def _arcana(cli: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    env["COLUMNS"] = "200"
    result = subprocess.run([str(cli), "trace", *args], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, f"arcana trace {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def test_it_lists_and_shows_our_runs_in_the_reference_cli(
    reference_cli: Path, demo_traces: tuple[Path, dict[str, str]]
) -> None:
    trace_dir, runs = demo_traces
    listing = _arcana(reference_cli, "list", "--dir", str(trace_dir))
    assert runs["chat"][:8] in listing and runs["pool"][:8] in listing

    shown = _arcana(reference_cli, "show", runs["chat"], "--dir", str(trace_dir))
    events = len((trace_dir / f"{runs['chat']}.jsonl").read_text().splitlines())
    assert f"Events: {events}" in shown  # the reference reader skipped none of our lines

    cognitive = _arcana(reference_cli, "show", runs["chat"], "--dir", str(trace_dir), "--cognitive")
    assert "pin pin_id=p_a7145c0d label='constraints'" in cognitive
    assert "recall turn=1 → 2 messages" in cognitive
    assert "unpin pin_id=p_a7145c0d ok" in cognitive

    context = _arcana(reference_cli, "show", runs["chat"], "--dir", str(trace_dir), "--context")
    assert "[PIN]" in context


def test_it_replays_our_turns_in_the_reference_cli(
    reference_cli: Path, demo_traces: tuple[Path, dict[str, str]]
) -> None:
    trace_dir, runs = demo_traces
    replay = _arcana(reference_cli, "replay", runs["chat"], "--dir", str(trace_dir), "--turn", "2")
    assert "Context decision" in replay
    assert "pinned" in replay
    assert "Prompt snapshot (model=scripted-atlas)" in replay

    pool = _arcana(reference_cli, "pool-replay", runs["pool"], "--dir", str(trace_dir))
    assert "researcher" in pool and "writer" in pool


def test_it_uses_the_released_reference_cli(reference_cli: Path) -> None:
    # A separate program in its own venv: make sure the checks above ran theirs, not ours.
    python = reference_cli.parent / "python"
    code = "import importlib.metadata as m; print(m.version('arcana-agent'))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "1.2.0", out.stderr


def _arcana_any(cli: Path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    env["COLUMNS"] = "200"
    result = subprocess.run([str(cli), "trace", *args], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in result.stderr
    return result.returncode, result.stdout + result.stderr


def test_the_reference_cli_gives_right_answers_on_our_files(
    reference_cli: Path, demo_traces: tuple[Path, dict[str, str]]
) -> None:
    """arcana-agent 1.2.0 knows a step by its 0-based LLM iteration (`context_decision.metadata.turn`,
    `turn.metadata.step`); our files write it there, so each number names one step, the same one in
    replay, explain and flow, in file order."""
    from runtime import facts
    from runtime._trace_reader import TraceReader

    trace_dir, runs = demo_traces
    rid = runs["chat"]
    reader = TraceReader(trace_dir)
    steps = [sv for tv in reader.turns(rid) for sv in tv.steps]
    assert len(reader.turns(rid)) == 5 and len(steps) == 9

    code, out = _arcana_any(reference_cli, "replay", rid, "--dir", str(trace_dir))
    assert code == 2 and "Available turns: 0, 1, 2, 3, 4, 5, 6, 7, 8" in out
    for k, sv in enumerate(steps):
        decision = sv.context_decision.metadata["context_decision"]  # type: ignore[union-attr]
        replay = _arcana(reference_cli, "replay", rid, "--turn", str(k), "--dir", str(trace_dir))
        assert replay.splitlines()[0].startswith(f"run {rid} | turn {k} | strategy={decision['strategy']}")
        assert f"messages: {decision['messages_in']} → {decision['messages_out']}," in replay
        explain = _arcana(reference_cli, "explain", rid, "--turn", str(k), "--dir", str(trace_dir))
        assert f"step_id={sv.step_id}" in explain and explain.startswith(f"Turn {k} — run {rid}")

    flow = _arcana(reference_cli, "flow", rid, "--dir", str(trace_dir))
    assert f"· {len(steps)} turns" in flow
    labels = [line.split()[1] for line in flow.splitlines() if line.startswith("  Turn ")]
    assert labels == [str(k) for k in range(len(steps))]  # in order
    forecast = next(k for k, sv in enumerate(steps) if sv.tool_calls)
    after = flow.split(f"  Turn {forecast}")[1].split("  Turn ")[0]
    assert "get_forecast" in after

    # show --context: "(K compressed)" counts messages sent at a lower fidelity, not dropped ones.
    context = _arcana(reference_cli, "show", rid, "--context", "--dir", str(trace_dir))
    shown = [int(n) for n in re_findall(r"\((\d+) compressed\)", context)]
    expected = [
        c.compressed
        for sv in steps
        if (c := facts.decision_counts(sv.context_decision.metadata["context_decision"])).compressed  # type: ignore[union-attr]
    ]
    assert shown == expected

    # Its summary sums `budgets.tokens_used` over the events: the run's true token total.
    python = reference_cli.parent / "python"
    code_ = f"from arcana.trace.reader import TraceReader; print(TraceReader({str(trace_dir)!r}).get_summary({rid!r})['total_tokens'])"
    total = subprocess.run([str(python), "-c", code_], capture_output=True, text=True, timeout=60)
    usage = sum(e.metadata["usage"]["total_tokens"] for e in reader.events(rid) if e.event_type == "llm_call")
    assert int(total.stdout) == usage


def test_the_reference_cli_replays_each_pool_agent_by_its_own_steps(
    reference_cli: Path, demo_traces: tuple[Path, dict[str, str]]
) -> None:
    from runtime._trace_reader import TraceReader

    trace_dir, runs = demo_traces
    reader = TraceReader(trace_dir)
    order = [(ne.agent, ne.turn, ne.step) for ne in reader.normalized(runs["pool"])]
    first_seen = list(dict.fromkeys(k for k in order if k[1] is not None))
    for agent in reader.agents(runs["pool"]):
        mine = [k for k, key in enumerate(first_seen) if key[0] == agent]
        code, out = _arcana_any(
            reference_cli, "replay", runs["pool"], "--agent", agent, "--dir", str(trace_dir)
        )
        assert code == 2 and f"Available turns: {', '.join(map(str, mine))}" in out


@pytest.fixture(scope="module")
def failed_send_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Our runtime's trace of a chat whose first send fails (the provider answers 400) and whose
    second succeeds."""
    from runtime import OpenAICompatibleProvider, ProviderHTTPError, Runtime, RuntimeConfig
    from tests.runtime.openai_server import OpenAIServer

    trace_dir = tmp_path_factory.mktemp("failed-send")

    async def go() -> str:
        with OpenAIServer() as server:
            provider = OpenAICompatibleProvider("loop", base_url=server.base_url, model="m", max_retries=0)
            rt = Runtime({"loop": provider}, config=RuntimeConfig(trace_dir=str(trace_dir)))
            server.enqueue_error(400, message="bad request")
            server.enqueue_text("fine now")
            async with rt.chat() as chat:
                with pytest.raises(ProviderHTTPError):
                    await chat.send("first")
                await chat.send("second")
                run_id = chat.run_id
            await rt.aclose()
        return run_id

    return trace_dir, asyncio.run(go())


def test_the_reference_cli_explains_and_flows_a_failed_send(
    reference_cli: Path, failed_send_trace: tuple[Path, str]
) -> None:
    """A failed send is a step with a `turn` event (failed, no answer) beside its `error`: arcana-agent
    1.2.0's `explain` finds it with its decision and error, and `flow` lists it, failed, in order."""
    trace_dir, rid = failed_send_trace
    explain = _arcana(reference_cli, "explain", rid, "--turn", "0", "--dir", str(trace_dir))
    assert explain.startswith(f"Turn 0 — run {rid}")
    assert "bad request" in explain or "ProviderHTTPError" in explain
    assert "messages: " in explain  # its context decision, joined by the step id
    second = _arcana(reference_cli, "explain", rid, "--turn", "1", "--dir", str(trace_dir))
    assert second.startswith(f"Turn 1 — run {rid}") and "fine now" in second

    flow = _arcana(reference_cli, "flow", rid, "--dir", str(trace_dir))
    assert "· 2 turns" in flow
    turns = [line.split()[:3] for line in flow.splitlines() if line.startswith("  Turn ")]
    assert turns == [["Turn", "0", "(failed)"], ["Turn", "1", "(completed)"]], flow
