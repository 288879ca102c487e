"""`arcana experiment run` and `arcana experiment compare` against a live loopback server and a real
worker: started with an API key, followed until done, results printed; two compared."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from runtime._cli import main as arcana
from traces.models import Dataset, Experiment, Judge

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def agents_queue(settings: Any) -> None:
    """The session's worker (tests/conftest.py) reads the `agents` queue."""
    settings.ARCANA_AGENTS_QUEUE = "agents"


def test_run_waits_prints_results_and_compare_puts_what_matters_first(
    live_server: Any,
    celery_worker_process: subprocess.Popen[bytes],
    api_key: str,
    dataset: Dataset,
    judge: Judge,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = ["--server", live_server.url, "--api-key", api_key]
    run = ["experiment", "run", "--dataset", str(dataset.pk), "--model", "scripted/small-talk", *server]
    code = arcana([*run, "--judge", str(judge.pk), "--primitives", "recall,pin", "--name", "on"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    a = Experiment.objects.get(name="on")
    assert a.status == "completed" and a.config["cognitive_primitives"] == ["recall", "pin"]
    assert f"experiment {a.pk} started: {live_server.url}/projects/" in err
    assert out.startswith(f"experiment {a.pk} completed: 3/3 items, 0 failed") and "helpfulness" in out
    assert out.count("\n  #") == 3 and "#1 done" in out

    code = arcana([*run, "--judge", str(judge.pk), "--primitives", "", "--name", "off", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 0 and body["status"] == "completed" and body["cognitive_primitives"] == []
    assert [i["state"] for i in body["items"]] == ["done"] * 3

    assert arcana(["experiment", "compare", str(a.pk), str(body["id"]), *server]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"A: experiment {a.pk} scripted/small-talk, primitives recall, pin")
    assert "of 3 items differ" in out and out.count(f"{live_server.url}/compare?a=") == 3


def test_bad_requests_exit_non_zero_saying_why(
    live_server: Any, api_key: str, dataset: Dataset, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ["--server", live_server.url, "--api-key", api_key]
    assert arcana(["experiment", "run", "--dataset", "999", *server]) == 1
    assert "server answered 400: invalid input (dataset:" in capsys.readouterr().err
    assert arcana(["experiment", "run", "--dataset", str(dataset.pk), "--model", "nope", *server]) == 2
    assert "--model is provider/model" in capsys.readouterr().err
    assert arcana(["experiment", "compare", "1", "2", "--server", live_server.url]) == 2
    assert arcana(["experiment", "compare", "1", "2", *server]) == 1
    assert "server answered 404" in capsys.readouterr().err
