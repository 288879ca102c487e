"""API keys: revocation takes effect on the next request, a key never reaches another project, an
ingest-only key cannot read, and ingest is rate-limited per key (429 + Retry-After), also across
gunicorn worker processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from django.test import Client

from tests.conftest import ROOT, test_database_url
from tests.traces.views_helpers import OUR_RUN, OURS, envelope, ingest_file
from traces.ingest import ratelimit
from traces.models import ApiKey, Event, Project, Run
from traces.teams import actions as teams


def _batch(run_id: str) -> str:
    return json.dumps({"events": [envelope(run_id, "turn", {"turn": 1, "step": 1})]})


def _key_client(raw: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_it_refuses_a_revoked_key_on_the_next_request(project: Project, alice: Any) -> None:
    key, raw = teams.do_create_api_key(project, alice, "ci", ApiKey.Scope.READ_INGEST)
    c = _key_client(raw)
    assert c.post("/api/v1/ingest", _batch("r1"), content_type="application/json").status_code == 200
    assert c.get("/api/v1/runs").status_code == 200
    teams.do_revoke_api_key(key, alice)
    r = c.post("/api/v1/ingest", _batch("r2"), content_type="application/json")
    assert r.status_code == 401 and r.json()["error"] == "Invalid or revoked API key."
    assert c.get("/api/v1/runs").status_code == 401
    assert not Run.objects.filter(project=project, run_id="r2").exists()


def test_a_key_of_project_a_cannot_read_or_write_project_b(
    project: Project, alice: Any, charlie_project: Project
) -> None:
    ingest_file(charlie_project, OURS / f"{OUR_RUN}.jsonl")
    other = Run.objects.get(project=charlie_project)
    _, raw = teams.do_create_api_key(project, alice, "a", ApiKey.Scope.READ_INGEST)
    c = _key_client(raw)
    # Reading B's run, turn and events by their addresses: 404, as if they did not exist.
    assert c.get(other.api_url()).status_code == 404
    assert c.get(other.api_turn_url(1)).status_code == 404
    assert c.get(other.api_events_url()).status_code == 404
    assert c.delete(other.api_url()).status_code == 404
    assert Run.objects.filter(pk=other.pk).exists()
    assert c.get("/api/v1/runs").json()["count"] == 0
    # Writing: the key's events land in A whatever they name; an upload naming B's slug goes to A too.
    r = c.post("/api/v1/ingest", _batch(OUR_RUN), content_type="application/json")
    assert r.status_code == 200
    assert Event.objects.filter(project=project, run_id=OUR_RUN).count() == 1
    assert Event.objects.filter(project=charlie_project, run_id=OUR_RUN).count() == other.events
    r = c.post(
        f"/api/v1/uploads?project={charlie_project.slug}&team={charlie_project.team.name}",
        data=b"{}\n",
        content_type="application/x-ndjson",
    )
    assert r.status_code == 202
    assert project.uploads.count() == 1 and charlie_project.uploads.count() == 0


def test_an_ingest_only_key_cannot_read(project: Project, alice: Any) -> None:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    run = Run.objects.get(project=project)
    _, raw = teams.do_create_api_key(project, alice, "sink", ApiKey.Scope.INGEST)
    c = _key_client(raw)
    assert c.post("/api/v1/ingest", _batch("new-run"), content_type="application/json").status_code == 200
    for url in ("/api/v1/runs", run.api_url(), run.api_turn_url(1), run.api_events_url(), "/api/v1/notes",
                "/api/v1/share-links"):  # fmt: skip
        r = c.get(url)
        assert r.status_code == 403, url
        assert "ingest-only" in r.json()["error"]
        assert OUR_RUN not in r.content.decode()
    assert c.delete(run.api_url()).status_code == 403
    assert Run.objects.filter(pk=run.pk).exists()
    # An upload and its status stay open to it: `arcana trace upload` follows its uploads.
    r = c.post("/api/v1/uploads", data=b"{}\n", content_type="application/x-ndjson")
    assert r.status_code == 202
    assert c.get(f"/api/v1/uploads/{r.json()['id']}").status_code == 200


def test_it_rate_limits_ingest_per_key(project: Project, alice: Any, settings: Any) -> None:
    settings.ARCANA_INGEST_RATE_LIMIT = 3
    settings.ARCANA_INGEST_RATE_WINDOW_SECONDS = 60
    key, raw = teams.do_create_api_key(project, alice, "a", ApiKey.Scope.INGEST)
    _, other_raw = teams.do_create_api_key(project, alice, "b", ApiKey.Scope.INGEST)
    c = _key_client(raw)
    codes = [
        c.post("/api/v1/ingest", _batch(f"r{i}"), content_type="application/json").status_code
        for i in range(3)
    ]
    assert codes == [200, 200, 200]
    refused = c.post("/api/v1/ingest", _batch("r3"), content_type="application/json")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["error"].lower()
    assert not Run.objects.filter(project=project, run_id="r3").exists()
    # Uploads count against the same key; another key has its own budget.
    assert c.post("/api/v1/uploads", data=b"{}\n", content_type="application/x-ndjson").status_code == 429
    other = _key_client(other_raw)
    assert other.post("/api/v1/ingest", _batch("r4"), content_type="application/json").status_code == 200
    # Reading the upload list is not ingest, and a new window starts the count again.
    ApiKey.objects.filter(pk=key.pk).update(rate_window=0)
    assert c.post("/api/v1/ingest", _batch("r5"), content_type="application/json").status_code == 200


def test_the_window_arithmetic(project: Project, alice: Any, settings: Any) -> None:
    settings.ARCANA_INGEST_RATE_LIMIT = 2
    settings.ARCANA_INGEST_RATE_WINDOW_SECONDS = 10
    key, _ = teams.do_create_api_key(project, alice, "a", ApiKey.Scope.INGEST)
    assert ratelimit.hit(key, now=100.0).allowed
    assert ratelimit.hit(key, now=101.0).allowed
    verdict = ratelimit.hit(key, now=107.5)
    assert not verdict.allowed and verdict.retry_after == 3  # the window [100, 110) ends in 2.5 s
    assert ratelimit.hit(key, now=110.0).allowed
    settings.ARCANA_INGEST_RATE_LIMIT = 0  # off
    assert all(ratelimit.hit(key, now=110.0).allowed for _ in range(5))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.django_db(transaction=True)
def test_the_limit_holds_across_gunicorn_workers(project: Project, alice: Any) -> None:
    """Four gunicorn worker processes share one count: of 12 requests with a limit of 5, exactly 5 pass."""
    _, raw = teams.do_create_api_key(project, alice, "a", ApiKey.Scope.INGEST)
    port = _free_port()
    env = dict(os.environ)
    env.update(
        DATABASE_URL=test_database_url(),
        DJANGO_SETTINGS_MODULE="arcana_site.test_settings",
        ARCANA_INGEST_RATE_LIMIT="5",
        ARCANA_INGEST_RATE_WINDOW_SECONDS="3600",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "arcana_site.wsgi", "-w", "4", "-b", f"127.0.0.1:{port}",
         "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        codes = []
        for i in range(12):
            # A new connection each time, so the requests spread over the workers.
            with httpx.Client(headers={"Authorization": f"Bearer {raw}"}) as c:
                r = c.post(f"{base}/api/v1/ingest", content=_batch(f"g{i}"), timeout=10,
                           headers={"Content-Type": "application/json"})  # fmt: skip
                codes.append(r.status_code)
                if r.status_code == 429:
                    assert int(r.headers["Retry-After"]) >= 1
        assert codes.count(200) == 5 and codes.count(429) == 7, codes
        assert Run.objects.filter(project=project).count() == 5
    finally:
        proc.terminate()
        proc.wait(timeout=20)
