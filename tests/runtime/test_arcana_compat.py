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
