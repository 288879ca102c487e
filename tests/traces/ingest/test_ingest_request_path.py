"""The ingest request around the batch: the API key remembered per process (`ApiKeyAuthentication(remember_seconds=…)`)
yet a revoked or deleted key refused at once, and the rate-limit count in one statement."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.traces.views_helpers import envelope
from traces.core import authentication
from traces.ingest import ratelimit
from traces.models import ApiKey, Project, Run
from traces.teams import actions as teams


def _batch(run_id: str) -> str:
    return json.dumps({"events": [envelope(run_id, "turn", {"turn": 1, "step": 1})]})


def _post(c: Client, run_id: str) -> Any:
    return c.post("/api/v1/ingest", _batch(run_id), content_type="application/json")


@pytest.fixture
def key_client(project: Project, alice: Any) -> tuple[ApiKey, Client]:
    authentication._keys.clear()
    key, raw = teams.do_create_api_key(project, alice, "k", ApiKey.Scope.INGEST)
    return key, Client(headers={"Authorization": f"Bearer {raw}"})


def test_the_key_look_up_is_remembered(key_client: tuple[ApiKey, Client]) -> None:
    key, c = key_client
    assert _post(c, "r1").status_code == 200
    with CaptureQueriesContext(connection) as ctx:
        assert _post(c, "r2").status_code == 200
    reads = [
        q["sql"]
        for q in ctx.captured_queries
        if q["sql"].startswith("SELECT") and "traces_apikey" in q["sql"]
    ]
    assert reads == []  # the count's UPDATE is the request's only statement on the key
    counts = [q["sql"] for q in ctx.captured_queries if "traces_apikey" in q["sql"]]
    assert len(counts) == 1 and counts[0].startswith("UPDATE")


@pytest.mark.parametrize("limit", [1000, 0])
def test_a_key_revoked_elsewhere_stops_at_once(
    key_client: tuple[ApiKey, Client], alice: Any, settings: Any, limit: int
) -> None:
    """Revoked with a plain UPDATE (as another process would: no signal reaches this one's memory),
    the next request is refused although this process still remembers the key; with the rate limit
    on or off."""
    settings.ARCANA_INGEST_RATE_LIMIT = limit
    key, c = key_client
    assert _post(c, "r1").status_code == 200
    teams.do_revoke_api_key(key, alice)  # a queryset UPDATE
    assert key.key_hash in authentication._keys  # still remembered here
    r = _post(c, "r2")
    assert r.status_code == 401 and r.json()["error"] == "Invalid or revoked API key."
    assert not Run.objects.filter(run_id="r2").exists()


def test_a_key_revoked_or_deleted_in_this_process_is_forgotten(key_client: tuple[ApiKey, Client]) -> None:
    key, c = key_client
    assert _post(c, "r1").status_code == 200
    assert key.key_hash in authentication._keys
    ApiKey.objects.get(pk=key.pk).revoke()
    assert key.key_hash not in authentication._keys
    assert _post(c, "r2").status_code == 401
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=None)
    assert _post(c, "r3").status_code == 200
    ApiKey.objects.get(pk=key.pk).delete()
    assert _post(c, "r4").status_code == 401


def test_the_count_is_one_statement_and_exact(project: Project, alice: Any, settings: Any) -> None:
    settings.ARCANA_INGEST_RATE_LIMIT = 3
    settings.ARCANA_INGEST_RATE_WINDOW_SECONDS = 10
    key, _ = teams.do_create_api_key(project, alice, "a", ApiKey.Scope.INGEST)
    with CaptureQueriesContext(connection) as ctx:
        assert ratelimit.hit(key, now=100.0).allowed
    assert len([q for q in ctx.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]) == 1
    assert [ratelimit.hit(key, now=101.0).allowed for _ in range(3)] == [True, True, False]
    assert ratelimit.hit(key, now=112.0).allowed  # a new window
    key.refresh_from_db()
    assert (key.rate_window, key.rate_count) == (11, 1)
    ApiKey.objects.filter(pk=key.pk).update(revoked_at="2026-01-01T00:00:00Z")
    assert ratelimit.hit(key, now=113.0) == ratelimit.Verdict(False, revoked=True)


def test_the_body_is_decoded_with_the_collector_paused_and_left_on(
    key_client: tuple[ApiKey, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    from traces import ingest

    seen: list[bool] = []
    parse = ingest.parse_batch

    def recording(body: bytes) -> Any:
        seen.append(gc.isenabled())
        return parse(body)

    monkeypatch.setattr(ingest, "parse_batch", recording)
    _, c = key_client
    assert gc.isenabled()
    assert _post(c, "r1").status_code == 200
    r = c.post("/api/v1/ingest", b"{not json", content_type="application/json")
    assert r.status_code == 400
    assert seen == [False, False] and gc.isenabled()


def test_the_batch_is_freed_before_the_collector_resumes(
    key_client: tuple[ApiKey, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector's first pass after a batch would otherwise walk the batch's thousands of
    objects, all about to be freed by reference counting anyway."""
    import contextlib
    import weakref

    from traces import ingest

    class Events(list):  # a list that a weak reference can watch
        pass

    refs: list[weakref.ref[Events]] = []
    parse, paused = ingest.parse_batch, ingest.collector_paused

    def watched(body: bytes) -> Any:
        payload, raw_texts = parse(body)
        payload["events"] = Events(payload["events"])
        refs.append(weakref.ref(payload["events"]))
        return payload, raw_texts

    alive_when_resumed: list[bool] = []

    @contextlib.contextmanager
    def watching() -> Any:
        with paused():
            yield
            alive_when_resumed.append(refs[-1]() is not None)

    monkeypatch.setattr(ingest, "parse_batch", watched)
    monkeypatch.setattr(ingest, "collector_paused", watching)
    _, c = key_client
    r = _post(c, "r1")
    assert r.status_code == 200 and r.json()["accepted"] == 1
    assert alive_when_resumed == [False]
