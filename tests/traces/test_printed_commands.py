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
