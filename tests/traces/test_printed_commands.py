"""Every manage.py command the product prints works as printed, on the embedded installation."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _embedded_env(data_dir: Path) -> dict[str, str]:
    # As a user's shell after scripts/run: no SECRET_KEY or DATABASE_URL exported, the key in the data
    # folder, SQLite and the file-system broker under it.
    drop = (
        "SECRET_KEY",
        "DEBUG",
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
        "DJANGO_SETTINGS_MODULE",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["ARCANA_DATA_DIR"] = str(data_dir)
    return env


def _run_in_a_terminal(command: str, env: dict[str, str], answers: list[str], timeout: float = 120) -> str:
    """Run `command` with a pseudo-terminal (changepassword reads the password from the tty).

    An answer is typed once a prompt (output ending in ':') has been quiet for 0.3 s: getpass turns
    echo off with TCSAFLUSH, which throws away anything typed before it, so typing at once can lose
    the answer on a busy machine. A prompt still showing 2 s after its answer gets the answer again."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty
        os.chdir(ROOT)
        os.execve("/bin/bash", ["/bin/bash", "-c", command], env)
    output = b""
    deadline = time.monotonic() + timeout
    pending = list(answers)
    last_output = time.monotonic()
    answered_at: float | None = None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            last_output = time.monotonic()
            answered_at = None
            continue
        waiting = output.rstrip().endswith(b":")
        quiet = time.monotonic() - last_output
        if waiting and pending and answered_at is None and quiet > 0.3:
            os.write(fd, pending.pop(0).encode() + b"\n")
            answered_at = time.monotonic()
        elif waiting and answered_at is not None and time.monotonic() - answered_at > 2:
            os.write(fd, answers[len(answers) - len(pending) - 1].encode() + b"\n")  # the same answer again
            answered_at = time.monotonic()
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    text = output.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    return text


def test_it_prints_a_changepassword_command_that_works(tmp_path: Path) -> None:
    data = tmp_path / "custom data"  # a space in the path: the printed command must quote it
    data.mkdir()
    (data / "secret_key").write_text("embedded-installation-key\n")
    env = _embedded_env(data)
    python = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
    for args in (["migrate", "--noinput", "-v0"], ["setup_demo"]):
        done = subprocess.run(
            [python, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    printed = re.search(r"Change it with: (.+)", done.stdout)
    assert printed, done.stdout
    command = printed.group(1).strip()
    out = _run_in_a_terminal(command, env, ["N3w-passw0rd!", "N3w-passw0rd!"])
    assert "Password changed successfully for user 'demo'" in out

    check = subprocess.run(
        [python, "-c", "import django; django.setup(); from django.contrib.auth import authenticate; "
         "print(authenticate(username='demo', password='N3w-passw0rd!') is not None)"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "arcana_site.settings"}, capture_output=True, text=True,
    )  # fmt: skip
    assert check.stdout.strip() == "True", check.stderr


# --------------------------------------------------------------------------------------------------
# The README's commands, as printed, against `scripts/run` on another port and data folder


def _readme_commands(section: str) -> list[str]:
    """The `$ ` command lines of the README's console blocks under `section` (a heading), with their
    continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    commands: list[str] = []
    for block in re.findall(r"```console\n(.*?)```", body, re.S):
        current = ""
        for line in block.splitlines():
            if line.startswith("$ ") and not current:
                current = line[2:]
            elif current:
                current += "\n" + line
            else:
                continue
            if not current.rstrip().endswith("\\"):
                commands.append(current)
                current = ""
    return commands


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_readmes_commands_work_with_a_custom_port_and_data_folder(tmp_path: Path) -> None:
    """`export ARCANA_PORT=… ARCANA_DATA_DIR=…`, `scripts/run`, then every command the README prints
    for the runtime and for sending traces — `manage.py create_api_key … | tail -1` included — run as
    printed in a shell with those two exported (the wheel's are `tests/site/test_wheel.py`'s)."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        if os.environ.get("ARCANA_REQUIRE_SERVICES") == "1":
            pytest.fail("needs the checkout's .venv (scripts/run creates it)")
        pytest.skip("needs the checkout's .venv (scripts/run creates it)")
    data = tmp_path / "my data"  # a space: every printed command must quote it
    port = _free_port()
    env = _embedded_env(data)
    env.update({"ARCANA_PORT": str(port), "ARCANA_SCRIPTED_STEP_MS": "0"})
    log = tmp_path / "scripts-run.log"  # a file, not a pipe: gunicorn's access log must never block
    with log.open("w") as out:
        server = subprocess.Popen(
            ["scripts/run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    traces = ROOT / "arcana-traces"
    before = set(traces.glob("*.jsonl")) if traces.exists() else set()
    try:
        deadline = time.monotonic() + 240
        while f"is running on http://127.0.0.1:{port}" not in log.read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail("scripts/run did not start:\n" + log.read_text())
            time.sleep(0.2)
        commands = [
            c for c in _readme_commands("## The runtime in ten lines") + _readme_commands("## Send traces")
            if "pip " not in c  # building and installing the wheel: tests/site/test_wheel.py
        ]  # fmt: skip
        assert any("create_api_key" in c for c in commands) and any("curl" in c for c in commands)
        script = ["set -euo pipefail"]
        for c in commands:
            # The README's `arcana trace show 8b2685b6` names the run its quickstart printed: ours.
            c = re.sub(r"trace show [0-9a-f]{8}\b", 'trace show "${RUN:0:8}"', c)
            if "examples/quickstart.py" in c:
                c = f"RUN=$({c} | tail -1 | awk '{{print $NF}}')"
            script.append(c)
        script.append('test -n "$KEY" && echo "KEY=${KEY:0:4}"')
        script.append(
            'curl -s "http://127.0.0.1:$ARCANA_PORT/api/v1/runs?limit=50" -H "Authorization: Bearer $KEY"'
        )
        done = subprocess.run(
            ["/bin/bash", "-c", "\n".join(script)], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "KEY=arc_" in done.stdout and "Trace: " in done.stdout, done.stdout
        assert '{"accepted":0,"duplicates":0,"rejected":0,"results":[]}' in done.stdout  # the curl batch
        runs = re.findall(r'"run_id":"([^"]+)"', done.stdout.splitlines()[-1])
        assert len(runs) >= 2, done.stdout  # the streamed run and the uploaded quickstart run
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        for f in set(traces.glob("*.jsonl")) - before if traces.exists() else ():
            f.unlink()
